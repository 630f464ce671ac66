"""The single-node server, driven through real sockets and a real client library."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import greenstalk
import pytest

from tests.support.servers import RawConn, free_port, haqueue, start_haqueue


@pytest.fixture
def server():
    with haqueue() as srv:
        yield srv
        if srv.alive():
            # A bug caught at the core's apply boundary must fail the test that hit it.
            with RawConn(srv.host, srv.port) as conn:
                conn.send(b"stats\r\n")
                assert b"haqueue-internal-errors: 0\n" in conn.recv_until(1)


def client(srv, **kw) -> greenstalk.Client:
    return greenstalk.Client((srv.host, srv.port), **kw)


def wait_for_stat(conn: RawConn, line: bytes, timeout: float = 5.0) -> None:
    """Poll the server's `stats` until it shows `line`, bounded by a deadline."""
    deadline = time.monotonic() + timeout
    while True:
        conn.send(b"stats\r\n")
        if line in conn.recv_until(1):
            return
        assert time.monotonic() < deadline, f"stats never showed {line!r}"


def test_greenstalk_drives_a_full_job_lifecycle(server):
    with client(server, use="emails", watch=["emails"]) as c:
        first = c.put(b"hello", priority=10, ttr=30)
        second = c.put(b"world", priority=5)
        assert second > first
        job = c.reserve(timeout=1)
        assert (job.id, job.body) == (second, "world")
        c.touch(job)
        c.release(job, priority=1, delay=0)
        job = c.reserve(timeout=1)
        assert job.id == second
        assert c.stats_job(job)["releases"] == 1
        assert c.stats_job(job)["reserves"] == 2
        c.bury(job)
        assert c.peek_buried().id == second
        assert c.kick(10) == 1
        c.delete(c.reserve(timeout=1))
        c.delete(c.reserve(timeout=1))
        with pytest.raises(greenstalk.TimedOutError):
            c.reserve(timeout=0)
        stats = c.stats_tube("emails")
        assert stats["total-jobs"] == 2
        assert stats["cmd-delete"] == 2
        assert "emails" in c.tubes()


def test_pipelined_puts_are_answered_in_order_with_increasing_ids(server):
    with RawConn(server.host, server.port) as conn:
        conn.send(b"".join(b"put 0 0 60 3\r\nabc\r\n" for _ in range(500)))
        replies = conn.recv_until(500)
    ids = [int(line.split()[1]) for line in replies.split(b"\r\n") if line]
    assert len(ids) == 500
    assert ids == sorted(ids) and len(set(ids)) == 500


def test_a_blocking_reserve_is_woken_by_a_put_on_another_connection(server):
    with RawConn(server.host, server.port) as worker, RawConn(server.host, server.port) as producer:
        worker.send(b"reserve\r\n")
        # The put must come after the reserve waits, or it would not test the wake-up.
        wait_for_stat(producer, b"current-waiting: 1\n")
        producer.send(b"put 0 0 60 2\r\nhi\r\n")
        assert producer.recv_until(1).startswith(b"INSERTED")
        assert worker.recv_until(1, timeout=3).endswith(b"\r\nhi\r\n")


def test_reserve_with_timeout_times_out(server):
    with RawConn(server.host, server.port) as conn:
        started = time.monotonic()
        conn.send(b"reserve-with-timeout 1\r\n")
        assert conn.recv_until(1, timeout=3) == b"TIMED_OUT\r\n"
        assert time.monotonic() - started >= 0.9


def test_a_closed_connection_releases_its_reservations(server):
    with RawConn(server.host, server.port) as conn:
        conn.send(b"put 0 0 60 1\r\nx\r\nreserve\r\n")
        reply = conn.recv_until(2)
        assert b"RESERVED" in reply
    with RawConn(server.host, server.port) as other:
        deadline = time.monotonic() + 3
        while True:
            other.send(b"reserve-with-timeout 0\r\n")
            reply = other.recv_until(1)
            if reply.startswith(b"RESERVED") or time.monotonic() > deadline:
                break
        assert reply.startswith(b"RESERVED")


def test_time_to_run_expiry_releases_the_job_and_counts_a_timeout(server):
    with RawConn(server.host, server.port) as conn:
        conn.send(b"put 0 0 1 1\r\nx\r\nreserve\r\n")
        first = conn.recv_until(2)
        job_id = first.split(b"\r\n")[0].split()[1]
        # With ttr 1 the job is inside the safety margin at once: a second
        # reserve answers DEADLINE_SOON, then the job times out and comes back.
        conn.send(b"reserve-with-timeout 5\r\n")
        assert conn.recv_until(1, timeout=3) == b"DEADLINE_SOON\r\n"
        with RawConn(server.host, server.port) as other:
            # Another worker waits; the expiry is a logged release that wakes it.
            other.send(b"reserve-with-timeout 5\r\n")
            again = other.recv_until(1, timeout=5)
        assert again.startswith(b"RESERVED " + job_id)
        conn.send(b"stats-job " + job_id + b"\r\n")
        assert b"timeouts: 1\n" in conn.recv_until(1)


def test_drain_mode_refuses_puts_after_sigusr1(server):
    os.kill(server.pid, signal.SIGUSR1)
    with RawConn(server.host, server.port) as conn:
        deadline = time.monotonic() + 3
        while True:
            conn.send(b"put 0 0 60 1\r\nx\r\n")
            reply = conn.recv_until(1)
            if reply == b"DRAINING\r\n" or time.monotonic() > deadline:
                break
        assert reply == b"DRAINING\r\n"
        conn.send(b"stats\r\n")
        assert b"draining: true\n" in conn.recv_until(1)


def test_sigterm_stops_the_server_gracefully():
    srv = start_haqueue()
    try:
        os.kill(srv.pid, signal.SIGTERM)
        assert srv.proc.wait(timeout=5) == 0
    finally:
        srv.stop()


def test_serves_on_a_unix_socket(tmp_path):
    path = tmp_path / "haqueue.sock"
    proc = subprocess.Popen([sys.executable, "-m", "haqueue", "serve", "-l", f"unix:{path}"],
                            stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 10
        while not path.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        with socket.socket(socket.AF_UNIX) as sock:
            sock.settimeout(5)
            sock.connect(str(path))
            sock.sendall(b"put 0 0 10 2\r\nhi\r\n")
            assert sock.recv(100).startswith(b"INSERTED ")
    finally:
        proc.terminate()
        proc.wait(timeout=5)


def test_accepts_a_listening_socket_from_systemd_socket_activation():
    port = free_port()
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(16)
    # What systemd does: the socket as fd 3, LISTEN_PID set to the child's pid.
    code = (
        "import os,sys; os.dup2(int(sys.argv[1]), 3); os.environ['LISTEN_FDS']='1'; "
        "os.environ['LISTEN_PID']=str(os.getpid()); "
        "from haqueue.cli.main import main; sys.exit(main(['serve', '-p', '1']))"
    )
    proc = subprocess.Popen([sys.executable, "-c", code, str(listener.fileno())],
                            pass_fds=(listener.fileno(),), stderr=subprocess.PIPE)
    listener.close()
    try:
        with RawConn("127.0.0.1", port) as conn:
            conn.send(b"put 0 0 10 2\r\nhi\r\n")
            assert conn.recv_until(1, timeout=10).startswith(b"INSERTED ")
    finally:
        proc.terminate()
        proc.wait(timeout=5)


def test_a_port_in_use_is_one_line_and_a_nonzero_exit(server):
    result = subprocess.run(
        [sys.executable, "-m", "haqueue", "serve", "-l", server.host, "-p", str(server.port)],
        capture_output=True, text=True, timeout=10,
    )
    assert result.returncode != 0
    assert result.stderr.strip().count("\n") == 0
    assert "Address already in use" in result.stderr


def test_an_unknown_option_is_one_line_and_a_nonzero_exit():
    result = subprocess.run([sys.executable, "-m", "haqueue", "serve", "-Q"],
                            capture_output=True, text=True, timeout=10)
    assert result.returncode == 2
    assert result.stderr.strip() == "haqueue serve: No such option '-Q'."


def test_many_waiting_reserves_each_get_a_different_job(server):
    workers = [socket.create_connection((server.host, server.port), timeout=10) for _ in range(300)]
    try:
        for w in workers:
            w.sendall(b"reserve-with-timeout 10\r\n")
        with RawConn(server.host, server.port) as producer:
            producer.send(b"".join(b"put 0 0 60 4\r\n%04d\r\n" % i for i in range(300)))
            producer.recv_until(300)
        bodies = []
        for w in workers:
            buf = b""
            while buf.count(b"\r\n") < 2:
                buf += w.recv(100)
            assert buf.startswith(b"RESERVED ")
            bodies.append(buf.split(b"\r\n")[1])
        assert sorted(bodies) == [b"%04d" % i for i in range(300)]
    finally:
        for w in workers:
            w.close()


def test_a_tube_left_before_its_put_is_applied_is_still_listed(server):
    # beanstalkd: a tube exists while a job is in it. A put in flight holds
    # its tube too, or `use b` right behind it would free "a" first.
    with RawConn(server.host, server.port) as conn:
        conn.send(b"use a\r\nput 0 0 60 1\r\nx\r\nuse b\r\nlist-tubes\r\nuse default\r\nstats\r\n")
        replies = conn.recv_replies(6)
    assert replies[1].startswith(b"INSERTED ")
    assert b"- a\n" in replies[3]
    assert b"current-tubes: 2\n" in replies[5]  # default and a; b is no longer used


def test_a_thousand_pipelined_immediate_timeouts_are_all_answered(server):
    # Each `reserve-with-timeout 0` on an empty tube is answered inside the
    # pipeline; answering used to start the pipeline again, one stack frame
    # deeper per reserve, until the stack overflowed (the session fuzzer).
    with RawConn(server.host, server.port) as conn:
        conn.send(b"reserve-with-timeout 0\r\n" * 2000 + b"list-tube-used\r\n")
        replies = conn.recv_replies(2001, timeout=20)
    assert replies[:2000] == [b"TIMED_OUT\r\n"] * 2000
    assert replies[2000] == b"USING default\r\n"
