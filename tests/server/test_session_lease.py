"""A reply that hands a connection a job is written only while the leader's lease holds.

A leader whose apply stalled (its fsync stuck behind a large write) past an
election may apply a reservation that a newer leader has already released and
given to another worker. Such a leader's lease has lapsed (no majority
acknowledged its recent appends), so the RESERVED or TOUCHED reply waits; it
is written once the lease holds again, or never, if the node steps down and
drops the connection. Driven here with a Session on an in-memory transport
and a host whose lease the test sets.
"""

from __future__ import annotations

import asyncio

from haqueue.server.session import Session
from haqueue.server.stats import ServerCounters
from haqueue.server.tubes import TubeDirectory


class Transport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.written = b""
        self.aborted = False

    def write(self, data) -> None:
        self.written += bytes(data)

    def abort(self) -> None:
        self.aborted = True

    def close(self) -> None:
        self.aborted = True

    def is_closing(self) -> bool:
        return self.aborted

    def get_extra_info(self, name, default=None):
        return default

    def get_write_buffer_size(self) -> int:
        return 0

    def set_write_buffer_limits(self, high=None, low=None) -> None:
        pass

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


class Node:
    lease = True

    def read_lease_valid(self) -> bool:
        return self.lease


class Host:
    """What a Session uses of its server, for this path."""

    max_job_size = 65535
    serving = True

    def __init__(self, loop) -> None:
        self.loop = loop
        self.replica = Node()
        self.counters = ServerCounters()
        self.directory = TubeDirectory()
        self.sessions: set = set()
        self.dirty: set = set()

    def stop_waiting(self, session) -> None:
        pass

    def start_waiting(self, session) -> None:
        pass

    def session_opened(self, session) -> None:
        self.sessions.add(session)

    def session_closed(self, session) -> None:
        self.sessions.discard(session)


async def _reserved_while_the_lease_lapsed(regain: bool) -> tuple[Session, Transport, Host]:
    host = Host(asyncio.get_running_loop())
    session, transport = Session(host, 1), Transport()
    session.connection_made(transport)
    session.reserving = session.reserve_in_flight = True
    host.replica.lease = False
    session._reserve_done(("RESERVED", 7, b"hi"))
    session.flush()
    await asyncio.sleep(0.05)  # several lease rechecks pass (10 ms each)
    assert transport.written == b""
    if regain:
        host.replica.lease = True
        for _ in range(100):
            await asyncio.sleep(0.01)
            if transport.written:
                break
    return session, transport, host


def test_a_reservation_is_not_answered_while_the_lease_has_lapsed_and_is_once_it_holds():
    session, transport, _ = asyncio.run(_reserved_while_the_lease_lapsed(regain=True))
    assert transport.written == b"RESERVED 7 2\r\nhi\r\n"


def test_a_reservation_held_for_the_lease_is_never_answered_after_a_step_down():
    async def scenario():
        session, transport, host = await _reserved_while_the_lease_lapsed(regain=False)
        session.abort()  # what the step-down does to every connection
        session.connection_lost(None)
        host.replica.lease = True
        await asyncio.sleep(0.05)
        return transport

    transport = asyncio.run(scenario())
    assert transport.aborted and transport.written == b""


def test_a_touch_waits_for_the_lease_too():
    async def scenario():
        host = Host(asyncio.get_running_loop())
        session, transport = Session(host, 1), Transport()
        session.connection_made(transport)
        host.replica.lease = False
        slot = [None]
        session.slots.append(slot)
        session.in_flight = 1
        session._write_done(slot, 0, None, ("TOUCHED",))
        session.flush()
        await asyncio.sleep(0.05)  # several lease rechecks pass (10 ms each): nothing may be written
        before = transport.written
        host.replica.lease = True
        for _ in range(100):  # the next recheck writes it: poll, bounded
            await asyncio.sleep(0.01)
            if transport.written:
                break
        return before, transport.written

    before, after = asyncio.run(scenario())
    assert (before, after) == (b"", b"TOUCHED\r\n")
