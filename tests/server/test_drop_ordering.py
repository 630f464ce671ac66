"""A connection's close is seen by every command that follows it, as in beanstalkd.

beanstalkd puts a closed connection's reservations back before it reads anything else;
haqueue logs DROP_CONN, so for a moment they are still reserved. Reads wait for it
(server/beanstalk/drops.py); so must a reserve that would otherwise answer at once.
The server, sessions and batcher are real; the log is the fuzz harness's InstantLog.
"""

from __future__ import annotations

import asyncio

from haqueue.core import commands as C
from haqueue.core.commands import decode_batch
from haqueue.server.batcher import wall_ms
from haqueue.server.beanstalk.session import Session
from tests.fuzz.harness import ScriptedTransport, make_server


def turns(loop: asyncio.AbstractEventLoop, count: int = 5) -> None:
    for _ in range(count):
        loop.run_until_complete(asyncio.sleep(0))


def logged_commands(server) -> list[tuple]:
    """Every command the server logs from now on, in log order (the list grows)."""
    logged: list[tuple] = []
    submit = server.replica.submit

    def record(data, callback):
        logged.extend(decode_batch(data)[1])
        submit(data, callback)

    server.replica.submit = record
    return logged


def connect(server, conn_id: int) -> tuple[Session, ScriptedTransport]:
    session = Session(server, conn_id)
    transport = ScriptedTransport(session)
    session.connection_made(transport)
    return session, transport


def test_a_reserve_with_timeout_0_right_after_a_close_gets_the_job_the_close_released():
    loop = asyncio.new_event_loop()
    try:
        server = make_server(loop)
        server.replica.stamp = wall_ms()
        holder, _ = connect(server, 1)
        holder.data_received(b"put 0 0 60 1\r\na\r\nreserve\r\n")
        turns(loop)
        other, transport = connect(server, 2)
        holder.connection_lost(None)  # its DROP_CONN is submitted, not yet applied
        assert server.drops.pending
        other.data_received(b"reserve-with-timeout 0\r\n")
        turns(loop)
        transport.drain(1 << 20)
        assert transport.received == b"RESERVED 1 1\r\na\r\n"
    finally:
        loop.close()


def test_a_close_holding_more_than_an_entry_of_reservations_goes_back_in_bounded_entries(monkeypatch):
    # A worker that reserved more jobs than one entry should put back, then left: its
    # drop is several DROP_CONN_SOME entries of at most REQUEUES_PER_ENTRY jobs each, so
    # no entry's apply outlasts an election timeout; a read waits for the last of them.
    from haqueue.server.beanstalk import drops

    monkeypatch.setattr(drops, "REQUEUES_PER_ENTRY", 4)
    loop = asyncio.new_event_loop()
    try:
        server = make_server(loop)
        server.replica.stamp = wall_ms()
        logged = logged_commands(server)
        holder, _ = connect(server, 1)
        holder.data_received(b"put 0 0 60 1\r\na\r\n" * 10 + b"reserve\r\n" * 10)
        turns(loop, 30)
        assert len(server.state.reservations_of(1)) == 10
        logged.clear()
        other, transport = connect(server, 2)
        holder.connection_lost(None)
        other.data_received(b"stats\r\n")
        turns(loop, 30)
        drops_logged = [c for c in logged if c[0] in (C.DROP_CONN, C.DROP_CONN_SOME)]
        assert drops_logged == [(C.DROP_CONN_SOME, 1, 4)] * 3
        assert server.state.reservations_of(1) == {}
        transport.drain(1 << 20)
        assert b"current-jobs-ready: 10\n" in transport.received
    finally:
        loop.close()


def test_a_new_leader_puts_back_a_big_orphan_holding_in_bounded_entries_before_release_orphans(monkeypatch):
    # A connection of the old leader that held more reservations than one entry should put
    # back: the new leader logs DROP_CONN_SOME entries for it first, then RELEASE_ORPHANS
    # (which the others' few go back in), so no entry's apply deposes the new leader.
    from haqueue.server import app

    monkeypatch.setattr(app, "REQUEUES_PER_ENTRY", 4)
    loop = asyncio.new_event_loop()
    try:
        server = make_server(loop)
        log = server.replica
        log.stamp = wall_ms()  # the reservations' time-to-run has not run out
        log.state.apply_batch(log.stamp, [(C.PUT, "default", 0, 0, 60_000, b"j")] * 12
                              + [(C.RESERVE, 1, ("default",))] * 10 + [(C.RESERVE, 2, ("default",))] * 2)
        logged = logged_commands(server)
        log.term = 3
        # Leading until RELEASE_ORPHANS is applied; then (for this test) no longer, so
        # _become_leader stops before it would open the client port.
        log.leads_in = lambda term: not any(c[0] == C.RELEASE_ORPHANS for c in logged)
        loop.run_until_complete(server._become_leader())
        assert logged == [(C.DROP_CONN_SOME, 1, 4)] * 3 + [(C.RELEASE_ORPHANS, (), 3)]
        assert server.state.counts()["ready"] == 12
    finally:
        loop.close()
