"""One client connection (haqueue/server/beanstalk/session.py), hosted through its typed host interface.

A Session here knows its server only as a SessionHost (host.py): the host is
tests/support/session_host.LocalHost, with a real QueueState, TubeDirectory and
counters, a log that commits when the test says so, and an in-memory socket.
So each test sees a session between submitting a command and being answered:
the pipeline, the order of replies, reads that wait for writes, the waiting
reserve, tube references, turns, end of input, unknown outcomes.
"""

from __future__ import annotations

import asyncio

import pytest

from haqueue.config.limits import ClientLimits
from haqueue.core import commands as C
from haqueue.protocol import beanstalk as P
from haqueue.server.beanstalk import session as session_module
from haqueue.server.host import SessionHost
from haqueue.config.limits import ClientLimits
from haqueue.server.limits import COMMANDS_PER_TURN, INPUT_HIGH
from haqueue.server.beanstalk.tubes import DEFAULT_TUBE
from haqueue.server.timers import STAMP_RESOLUTION_MS as STAMP_MS
from tests.support.session_host import LocalHost, connect, turn


@pytest.fixture
def loop():
    loop = asyncio.new_event_loop()
    try:
        yield loop
    finally:
        loop.close()


@pytest.fixture(autouse=True)
def turns_end_by_count(monkeypatch):
    """A turn ends after COMMANDS_PER_TURN commands or TURN_SECONDS of work (READ_TURN_SECONDS
    until it writes): only the first here, so that a loaded machine does not cut a pipeline
    short at random."""
    monkeypatch.setattr(session_module, "TURN_SECONDS", 3600.0)
    monkeypatch.setattr(session_module, "READ_TURN_SECONDS", 3600.0)


@pytest.fixture
def host(loop) -> LocalHost:
    return LocalHost(loop)


def put(body: bytes = b"hi", pri: int = 0, delay: int = 0, ttr: int = 60) -> bytes:
    return b"put %d %d %d %d\r\n%s\r\n" % (pri, delay, ttr, len(body), body)


def test_the_test_host_is_a_session_host(host):
    assert isinstance(host, SessionHost)


def test_pipelined_puts_are_all_in_flight_at_once_and_answered_in_order_once_committed(host):
    session, transport = connect(host)
    session.data_received(put(b"a") + put(b"b") + put(b"c"))
    assert [command[0] for command, _ in host.batcher.pending] == [C.PUT] * 3  # a window, not one by one
    assert transport.written == b""  # nothing answered before it is committed
    host.batcher.commit()
    assert transport.written == b"INSERTED 1\r\nINSERTED 2\r\nINSERTED 3\r\n"
    assert host.counters.commands["put"] == 3 and session.is_producer


def test_a_read_waits_for_the_connection_s_earlier_writes_and_sees_them(host):
    session, transport = connect(host)
    session.data_received(put(b"mine") + b"peek 1\r\n")
    assert transport.written == b"" and session.blocked_on_writes
    host.batcher.commit()
    assert transport.written == b"INSERTED 1\r\n" + P.found(1, b"mine")


def test_an_unknown_outcome_closes_the_connection_without_a_reply(host, loop):
    session, transport = connect(host)
    session.data_received(put() + put())
    host.batcher.lose()  # leadership lost: applied or not, nobody knows
    turn(loop)
    assert transport.aborted and transport.written == b""
    assert session.closed and session not in host.sessions


def test_a_command_taken_after_leadership_is_lost_drops_the_connection(host, loop):
    session, transport = connect(host)
    host.serving = False
    session.data_received(b"list-tube-used\r\n")
    turn(loop)
    assert transport.aborted and transport.written == b""


def test_use_watch_and_ignore_are_local_and_counted_in_the_directory(host):
    session, transport = connect(host)
    session.data_received(b"use a\r\nwatch b\r\nwatch b\r\nignore default\r\nignore b\r\n"
                          b"list-tubes-watched\r\nlist-tube-used\r\n")
    assert host.batcher.pending == []  # none of them goes to the log
    assert transport.written == (b"USING a\r\nWATCHING 2\r\nWATCHING 2\r\nWATCHING 1\r\nNOT_IGNORED\r\n"
                                 + P.ok(P.yaml_list(["b"])) + b"USING a\r\n")
    directory = host.directory
    assert directory.using == {DEFAULT_TUBE: 0, "a": 1} and directory.watching == {DEFAULT_TUBE: 0, "b": 1}
    assert sorted(directory.names()) == ["a", "b", "default"]
    # default: the server's own reference; a: used; b: watched. (Closing hands them to the host.)
    assert directory.refs == {DEFAULT_TUBE: 1, "a": 1, "b": 1}


def test_a_put_keeps_its_tube_until_it_is_applied(host):
    # `use a`, `put`, `use b` pipelined: "a" must not be freed before the job is in it.
    session, transport = connect(host)
    session.data_received(b"use a\r\n" + put() + b"use b\r\n")
    assert "a" in host.directory.names()
    host.batcher.commit()
    assert transport.written == b"USING a\r\nINSERTED 1\r\nUSING b\r\n"
    assert "a" in host.directory.names() and host.forgotten == []  # it holds a job now


def test_a_draining_server_answers_puts_draining_and_logs_nothing(host):
    session, transport = connect(host)
    host.draining = True
    session.data_received(put())
    assert transport.written == P.DRAINING and host.batcher.pending == []


def test_past_the_memory_mark_a_put_answers_out_of_memory_and_logs_nothing(host):
    session, transport = connect(host)
    host.memory.room = False
    session.data_received(put())
    assert transport.written == P.OUT_OF_MEMORY and host.batcher.pending == []
    assert host.counters.out_of_memory_replies == 1


def test_watching_past_the_limit_answers_out_of_memory(loop):
    host = LocalHost(loop, ClientLimits(max_watched_tubes=2))
    session, transport = connect(host)
    session.data_received(b"watch a\r\nwatch b\r\n")
    assert transport.written == b"WATCHING 2\r\n" + P.OUT_OF_MEMORY
    assert host.counters.out_of_memory_replies == 1 and "b" not in host.directory.names()


def test_pausing_a_tube_that_does_not_exist_is_answered_here(host):
    session, transport = connect(host)
    session.data_received(b"pause-tube nowhere 10\r\n")
    assert transport.written == P.NOT_FOUND and host.batcher.pending == []


def test_a_reserve_with_nothing_ready_waits_and_a_put_elsewhere_wakes_it_in_the_same_entry(host):
    worker, worker_out = connect(host, 1)
    producer, producer_out = connect(host, 2)
    worker.data_received(b"reserve\r\n")
    assert host.waiters == {worker} and host.waiting_on(DEFAULT_TUBE) == 1
    assert host.batcher.pending == [] and worker_out.written == b""
    producer.data_received(put(b"job"))
    # The waiting reserve goes to the log right behind the put: one commit, not two.
    assert [command[0] for command, _ in host.batcher.pending] == [C.PUT, C.RESERVE] and not host.waiters
    host.batcher.commit()
    assert producer_out.written == b"INSERTED 1\r\n"
    assert worker_out.written == P.reserved(1, b"job")


def test_a_delayed_put_leaves_the_waiting_reserve_waiting(host):
    worker, worker_out = connect(host, 1)
    producer, producer_out = connect(host, 2)
    worker.data_received(b"reserve\r\n")
    producer.data_received(b"put 0 5 60 3\r\njob\r\n")
    assert [command[0] for command, _ in host.batcher.pending] == [C.PUT] and host.waiters == {worker}
    host.batcher.commit()
    assert producer_out.written == b"INSERTED 1\r\n" and worker_out.written == b""


def test_a_reserve_sent_behind_a_put_that_finds_no_job_waits_again(host):
    worker, worker_out = connect(host, 1)
    producer, producer_out = connect(host, 2)
    worker.data_received(b"reserve\r\n")
    # The tube is paused in the same entry, ahead of the put: the job is not reservable
    # when the reserve behind the put is applied.
    producer.data_received(b"pause-tube default 60\r\n" + put(b"job"))
    assert [command[0] for command, _ in host.batcher.pending] == [C.PAUSE_TUBE, C.PUT, C.RESERVE]
    host.batcher.commit()
    assert producer_out.written == b"PAUSED\r\nINSERTED 1\r\n"
    # Its reserve found no job: no answer, and the worker reserves on (waiting, or,
    # in this host whose entries are stamped far from the wall clock, trying again).
    assert worker_out.written == b"" and worker.reserving


def test_a_reserve_with_timeout_zero_answers_timed_out_without_the_log(host):
    session, transport = connect(host)
    session.data_received(b"reserve-with-timeout 0\r\n" * 3 + b"list-tube-used\r\n")
    assert transport.written == P.TIMED_OUT * 3 + b"USING default\r\n"
    assert host.batcher.pending == [] and not host.waiters


def test_a_reserve_blocks_the_pipeline_until_it_is_answered(host):
    session, transport = connect(host)
    session.data_received(b"reserve\r\nlist-tube-used\r\n")
    assert transport.written == b"" and session.reserving
    session.data_received(b"")  # nothing new: still waiting
    assert transport.written == b""


def test_end_of_input_answers_what_was_read_times_out_a_waiting_reserve_then_closes(host, loop):
    session, transport = connect(host)
    session.data_received(put() + b"reserve-with-timeout 100\r\nput 0 0 60 5\r\nhal")
    session.eof_received()
    assert not transport.closing  # the put is not answered yet
    host.batcher.commit()
    # The reserve found the job the put made: the log answers it.
    host.batcher.commit()
    turn(loop)
    assert transport.written == b"INSERTED 1\r\n" + P.reserved(1, b"hi")  # the cut-off put is dropped
    assert transport.lost

    other, other_out = connect(host, 2)
    other.data_received(b"reserve\r\n")
    assert host.waiters == {other}
    other.eof_received()
    turn(loop)
    assert other_out.written == P.TIMED_OUT and other_out.lost and not host.waiters


def test_quit_closes_only_after_the_earlier_replies_are_written(host, loop):
    session, transport = connect(host)
    session.data_received(put() + b"quit\r\n")
    turn(loop)
    assert not transport.closing
    host.batcher.commit()
    turn(loop)
    assert transport.written == b"INSERTED 1\r\n" and transport.lost


def test_a_long_pipeline_yields_its_turn_and_goes_on_at_the_next(host, loop):
    session, transport = connect(host)
    session.data_received(b"list-tube-used\r\n" * (COMMANDS_PER_TURN + 5))
    assert transport.written.count(b"USING") == COMMANDS_PER_TURN and host.turns.yielded == 1
    turn(loop)
    assert transport.written.count(b"USING") == COMMANDS_PER_TURN + 5


def test_a_turn_runs_its_first_command_however_late_the_clock_reads(host, loop, monkeypatch):
    # A process descheduled between its turn's start and its first command must not
    # give the turn up without progress: the put goes to the log now, the stats after it waits.
    monkeypatch.setattr(session_module, "READ_TURN_SECONDS", 0.0)
    monkeypatch.setattr(session_module, "TURN_SECONDS", 0.0)
    ticks = iter(range(1000))
    monkeypatch.setattr(session_module, "perf_counter", lambda: next(ticks))
    session, transport = connect(host)
    session.data_received(put() + b"list-tube-used\r\n")
    assert [command for command, _ in host.batcher.pending] == [(C.PUT, DEFAULT_TUBE, 0, 0, 60_000 + STAMP_MS, b"hi")]
    assert host.turns.yielded == 1 and transport.written == b""
    host.batcher.commit()
    turn(loop)
    assert transport.written == b"INSERTED 1\r\nUSING default\r\n"


def test_a_blocked_pipeline_stops_reading_past_the_input_mark_and_resumes_once_free(host, loop):
    session, transport = connect(host)
    session.data_received(b"reserve\r\n")
    session.data_received(b"list-tube-used\r\n" * (INPUT_HIGH // 16 + 1))
    assert not transport.reading  # the rest stays in the kernel: TCP pushes back
    session.eof_received()  # the reserve times out; the backlog is served, turn by turn
    turn(loop, 2 + (INPUT_HIGH // 16 + 1) // COMMANDS_PER_TURN)
    assert transport.written == P.TIMED_OUT + b"USING default\r\n" * (INPUT_HIGH // 16 + 1)
    assert transport.lost


def test_reserved_jobs_of_the_connection_are_deleted_through_the_log(host):
    session, transport = connect(host)
    session.data_received(put(b"job") + b"reserve\r\n")
    host.batcher.commit()
    host.batcher.commit()
    session.data_received(b"delete 1\r\ndelete 1\r\n")
    assert [command[:3] for command, _ in host.batcher.pending] == [(C.DELETE, 1, 1)] * 2
    host.batcher.commit()
    assert transport.written == b"INSERTED 1\r\n" + P.reserved(1, b"job") + P.DELETED + P.NOT_FOUND


def test_stats_tube_counts_the_connections_waiting_on_it(host):
    waiting, _ = connect(host, 1)
    waiting.data_received(b"reserve\r\n")
    session, transport = connect(host, 2)
    session.data_received(b"stats-tube default\r\nstats-tube nowhere\r\n")
    body = transport.written
    assert b"current-waiting: 1\n" in body and b"current-watching: 2\n" in body
    assert body.endswith(P.NOT_FOUND)
