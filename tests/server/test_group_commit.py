"""What rides in one Raft entry: a worker's `delete` and the `reserve` pipelined behind it.

The server, its sessions and the batcher are real; the log is the fuzz harness's
InstantLog (applies each entry at once), wrapped to record what each entry carried.
"""

from __future__ import annotations

import asyncio

from haqueue.core import commands as C
from haqueue.server.batcher import wall_ms
from haqueue.server.beanstalk.session import Session
from tests.fuzz.harness import ScriptedTransport, make_server


def turns(loop: asyncio.AbstractEventLoop, count: int = 5) -> None:
    for _ in range(count):
        loop.run_until_complete(asyncio.sleep(0))


def test_a_delete_and_the_reserve_pipelined_behind_it_ride_in_one_entry():
    loop = asyncio.new_event_loop()
    try:
        server = make_server(loop)
        entries: list[list[str]] = []
        log = server.replica
        log.stamp = wall_ms()  # the log's clock near the wall clock's: no timer is due
        apply_now = log.submit

        def recording(data: bytes, callback) -> None:
            entries.append([C.NAMES[command[0]] for command in C.decode_batch(data)[1]])
            apply_now(data, callback)

        log.submit = recording
        worker = Session(server, 1)
        transport = ScriptedTransport(worker)
        worker.connection_made(transport)
        worker.data_received(b"put 0 0 60 1\r\na\r\nput 0 0 60 1\r\nb\r\nreserve\r\n")
        turns(loop)
        assert entries == [["put", "put", "reserve"]]

        entries.clear()
        worker.data_received(b"delete 1\r\nreserve\r\n")
        turns(loop)
        assert entries == [["delete", "reserve"]]
        transport.drain(1 << 20)
        assert transport.received.endswith(b"RESERVED 1 1\r\na\r\nDELETED\r\nRESERVED 2 1\r\nb\r\n")

        # Nothing ready behind the delete: the reserve still rides with it, finds
        # nothing, and waits (no second entry until a job arrives).
        entries.clear()
        worker.data_received(b"delete 2\r\nreserve\r\n")
        turns(loop)
        assert entries == [["delete", "reserve"]]
        assert worker.reserving and worker in server.waiters
        worker.connection_lost(None)
        turns(loop)
    finally:
        loop.close()
