"""The test helpers themselves: real servers start and stop, raw replies are split right, and
every failure is bounded and says why."""

from __future__ import annotations

import os
import sys
import time

import pytest

from tests.support.servers import (
    ConnectionClosed,
    RawConn,
    ServerStartError,
    _start_on_free_port,
    beanstalkd,
    split_replies,
    start_beanstalkd,
)


def test_started_beanstalkd_answers_and_stops_by_pid():
    server = start_beanstalkd("-z", "10")
    try:
        with RawConn(server.host, server.port) as conn:
            conn.send(b"put 0 0 1 11\r\n" + b"x" * 11 + b"\r\nput 0 0 1 2\r\nhi\r\nstats-job 1\r\n")
            too_big, inserted, stats = conn.recv_replies(3)
        assert too_big == b"JOB_TOO_BIG\r\n"
        assert inserted == b"INSERTED 1\r\n"
        assert stats.startswith(b"OK ") and b"\nid: 1\n" in stats and stats.endswith(b"\r\n")
    finally:
        server.stop()
    assert not server.alive()
    with pytest.raises(ProcessLookupError):
        os.kill(server.pid, 0)
    server.stop()  # idempotent


def test_split_replies_keeps_bodies_with_their_header():
    data = b"RESERVED 1 4\r\na\r\nb\r\nOK 3\r\n---\r\nNOT_FOUND\r\nFOUND 2 10\r\nabc"
    replies, rest = split_replies(data)
    assert replies == [b"RESERVED 1 4\r\na\r\nb\r\n", b"OK 3\r\n---\r\n", b"NOT_FOUND\r\n"]
    assert rest == b"FOUND 2 10\r\nabc"


def test_recv_until_times_out_with_what_arrived():
    with beanstalkd() as server, server.connect() as conn:
        conn.send(b"reserve-with-timeout 5\r\n")
        started = time.monotonic()
        with pytest.raises(TimeoutError):
            conn.recv_reply(timeout=0.3)
        assert time.monotonic() - started < 2


def test_recv_until_accepts_a_predicate():
    with beanstalkd() as server, server.connect() as conn:
        conn.send(b"list-tubes\r\n")
        got = conn.recv_until(lambda buf: buf.endswith(b"- default\n\r\n"))
        assert got == b"OK 14\r\n---\n- default\n\r\n"


def test_quit_is_seen_as_a_close():
    with beanstalkd() as server, server.connect() as conn:
        conn.send(b"quit\r\n")
        assert conn.wait_closed(timeout=2) == b""
        with pytest.raises(ConnectionClosed):
            conn.recv_reply(timeout=1)


def test_server_that_exits_reports_its_stderr():
    with pytest.raises(ServerStartError) as info:
        start_beanstalkd("-z", "notanumber")
    assert "beanstalkd exited" in str(info.value)
    assert "notanumber" in str(info.value) or "-z" in str(info.value)


def test_server_that_never_listens_fails_within_the_timeout():
    script = "import sys, time; sys.stderr.write('still booting'); sys.stderr.flush(); time.sleep(30)"
    started = time.monotonic()
    with pytest.raises(ServerStartError) as info:
        _start_on_free_port("sleeper", lambda port: [sys.executable, "-c", script], timeout=0.5)
    assert time.monotonic() - started < 5
    assert "did not listen" in str(info.value) and "still booting" in str(info.value)
