"""Starting haqueue as client libraries' test harnesses start beanstalkd.

Such a harness execs $BEANSTALKD_PATH with beanstalkd's flags, sleeps a fixed 0.1 s and
connects once; haqueue-beanstalkd must be listening by then (haqueue/cli/early.py), and the
put sent at once must be answered (after its commit, whenever that is).
"""

from __future__ import annotations

import os
import socket
import stat
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from haqueue.bench.startup import haqueue_command
from haqueue.cli import early
from tests.support.servers import HOST, free_port

HARNESS_SLEEP = 0.1  # what the harnesses do; the fixed sleep is the point of this test


@pytest.mark.parametrize("durable", [False, True], ids=["memory", "data-dir"])
def test_a_client_harness_start_finds_it_listening_after_a_fixed_100_ms(tmp_path, durable):
    port = free_port()
    argv = [*haqueue_command(), "-l", HOST, "-p", str(port)]
    if durable:
        argv += ["-b", str(tmp_path / "data")]
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    try:
        time.sleep(HARNESS_SLEEP)
        with socket.create_connection((HOST, port), timeout=5) as conn:  # once, no retry
            conn.sendall(b"put 0 0 60 5\r\nhello\r\n")
            conn.settimeout(10)
            reply = b""
            while not reply.endswith(b"\r\n"):
                chunk = conn.recv(64)
                assert chunk, f"closed after {reply!r}"
                reply += chunk
        assert reply == b"INSERTED 1\r\n"
    finally:
        proc.terminate()
        _, stderr = proc.communicate(timeout=10)
    assert proc.returncode == 0, stderr.decode()


def test_haqueue_beanstalkd_is_serve_under_beanstalkds_command_line():
    result = subprocess.run([*haqueue_command(), "-v"], capture_output=True, text=True, timeout=30)
    assert result.returncode == 0 and "beanstalkd 1.12 protocol" in result.stdout


@pytest.mark.parametrize("args, address", [
    ([], ("0.0.0.0", 11300)),
    (["-l", "127.0.0.1", "-p", "1234"], ("127.0.0.1", 1234)),
    (["-l127.0.0.1", "-p1234", "-f0", "-F", "-VV", "-z", "10"], ("127.0.0.1", 1234)),
    (["--listen=::1", "--port", "1234", "-b", "/tmp/x", "-n"], ("::1", 1234)),
    (["-p", "1", "-p", "2"], ("0.0.0.0", 2)),  # the last one wins, as with click
    (["-l", "localhost"], None),  # a name may resolve to several addresses: the usual path
    (["-l", "unix:/run/q.sock"], ("unix:/run/q.sock", None)),  # beanstalkd's -l unix:PATH
    (["-l", "unix:"], None),  # no path: the usual path says so
    (["-p", "0"], None),
    (["-p", "x"], None),
    (["-p"], None),
    (["-h"], None),
    (["-v"], None),
    (["-u", "nobody"], None),
    (["--config", "c.toml", "--node", "n1"], None),
    (["-p", "1234", "--admin", "127.0.0.1:1235"], None),  # listening means its admin is up
    (["--no-such-option"], None),
    (["-z", "4294967296"], None),  # click refuses these values: it says why
    (["-s", "4095"], None),
    (["-f", "-1"], None),
    (["-p", "1_234"], None),  # click reads it as 1234; plain reading does not try
    (["-Fn"], None),
    (["--verbose=2"], None),
    (["-b", "/etc/hostname"], None),  # click.Path(file_okay=False): "is a file"
])
def test_only_command_lines_read_exactly_as_click_would_listen_early(args, address):
    assert early._address(args) == address


@pytest.mark.parametrize("args", [
    [],
    ["-l", "127.0.0.1", "-p", "1234"],
    ["-l127.0.0.1", "-p1234", "-f0", "-F", "-VV", "-z", "10", "-n", "-c", "-n"],
    ["--listen=::1", "--port", "1234", "--data-dir", "/tmp/x", "--fsync-ms=7", "--no-fsync",
     "--max-job-size", "0", "--journal-size=4096", "--verbose", "-V", "-p", "9"],
    ["-b/tmp/y", "-s8192", "-z4294967295", "-c"],
    ["-b", "-p", "-p", "80"],  # a value is the next argument, whatever it looks like
])
def test_a_plain_command_line_gets_the_values_click_would_give_it(args):
    from haqueue.cli.serve import serve

    plain = early.plain_options(args)
    clicked = serve.make_context("serve", list(args)).params
    assert plain == {name: clicked[name] for name in plain}


@pytest.mark.parametrize("args", [
    ["-p", "65536"], ["-z", "-1"], ["-s", "12"], ["-f", "x"], ["-p"], ["-b", "/etc/hostname"],
    ["--fsync-ms=-5"], ["extra"],
])
def test_what_click_refuses_is_not_plain(args):
    import click

    from haqueue.cli.serve import serve

    with pytest.raises(click.UsageError):
        serve.make_context("serve", list(args))
    assert early.plain_options(args) is None


def connect_when_listening(proc: subprocess.Popen, port: int) -> socket.socket:
    deadline = time.monotonic() + 10
    while True:  # polling the port, bounded by the deadline
        try:
            return socket.create_connection((HOST, port), timeout=10)
        except OSError:
            assert proc.poll() is None and time.monotonic() < deadline, "not listening"
            time.sleep(0.01)


def test_the_early_socket_keeps_beanstalkds_backlog_once_the_server_takes_it():
    port = free_port()
    proc = subprocess.Popen([*haqueue_command(), "-l", HOST, "-p", str(port)],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        with connect_when_listening(proc, port) as conn:
            conn.sendall(b"put 0 0 60 5\r\nhello\r\n")
            assert conn.recv(64) == b"INSERTED 1\r\n"  # served: the server has the socket now
        listing = subprocess.run(["ss", "-Hltn", f"sport = :{port}"], capture_output=True, text=True,
                                 check=True).stdout.split()
        assert listing[0] == "LISTEN" and listing[2] == "1024", listing  # Send-Q: the backlog
    finally:
        proc.terminate()
        proc.communicate(timeout=10)


def test_a_plain_start_never_imports_click():
    port = free_port()
    proc = subprocess.Popen([*haqueue_command(), "-l", HOST, "-p", str(port)],
                            env=dict(os.environ, PYTHONPROFILEIMPORTTIME="1"),
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        with connect_when_listening(proc, port) as conn:
            conn.sendall(b"put 0 0 60 5\r\nhello\r\n")
            assert conn.recv(64) == b"INSERTED 1\r\n"
    finally:
        proc.terminate()
        _, stderr = proc.communicate(timeout=10)
    imported = [line.rsplit("|", 1)[1].strip() for line in stderr.decode().splitlines()
                if line.startswith("import time:") and "|" in line]
    assert "haqueue.server.app" in imported  # the profile is complete
    assert [name for name in imported if name.split(".")[0] == "click"] == []


@pytest.mark.parametrize("extra", [[], ["--max-tubes", "5"]], ids=["plain", "through-click"])
def test_a_data_dir_that_cannot_be_made_is_one_line_either_way(tmp_path, extra):
    blocker = tmp_path / "file"
    blocker.write_text("")
    data_dir = blocker / "data"
    result = subprocess.run([*haqueue_command(), "-l", HOST, "-p", str(free_port()), "-b", str(data_dir),
                             *extra], capture_output=True, text=True, timeout=30)
    assert result.returncode == 1
    assert result.stderr == f"haqueue: -b {data_dir}: Not a directory\n"


def test_the_early_socket_is_taken_once_and_only_for_its_own_address():
    port = free_port()
    early.listen_early(["-l", HOST, "-p", str(port)])
    try:
        assert early.take(HOST, port + 1) is None
        sock = early.take(HOST, port)
        assert sock is not None and sock.getsockname() == (HOST, port)
        with socket.create_connection((HOST, port), timeout=1):
            pass  # the kernel completes it: listening already, nothing accepted yet
        assert early.take(HOST, port) is None
    finally:
        if sock is not None:
            sock.close()


def test_a_port_in_use_is_left_to_the_usual_path(tmp_path):
    with socket.socket() as taken:
        taken.bind((HOST, 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        early.listen_early(["-l", HOST, "-p", str(port)])
        assert early.take(HOST, port) is None
        result = subprocess.run([*haqueue_command(), "-l", HOST, "-p", str(port)],
                                capture_output=True, text=True, timeout=30)
    assert result.returncode == 1
    assert result.stderr.strip() == f"haqueue: cannot listen on {HOST}:{port}: Address already in use"


@pytest.fixture
def socket_dir():
    """A short directory for Unix sockets (a socket path has at most 107 bytes; pytest's
    tmp_path can be longer), removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="hq-", dir="/tmp") as path:
        yield Path(path)


def put_once_after_the_harness_sleep(proc: subprocess.Popen, path: Path) -> bytes:
    """What greenstalk's test harness does: exec, a fixed 0.1 s, connect once, then a put."""
    time.sleep(HARNESS_SLEEP)
    assert stat.S_ISSOCK(path.lstat().st_mode), "no socket file after 0.1 s"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(10)
        conn.connect(str(path))  # once, no retry
        conn.sendall(b"put 0 0 60 5\r\nhello\r\n")
        reply = b""
        while not reply.endswith(b"\r\n"):
            chunk = conn.recv(64)
            assert chunk, f"closed after {reply!r}"
            reply += chunk
    return reply


def test_a_client_harness_start_on_a_unix_socket_finds_it_listening_after_a_fixed_100_ms(socket_dir):
    path = socket_dir / "q.sock"
    proc = subprocess.Popen([*haqueue_command(), "-l", f"unix:{path}"], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        assert put_once_after_the_harness_sleep(proc, path) == b"INSERTED 1\r\n"
    finally:
        proc.terminate()
        _, stderr = proc.communicate(timeout=10)
    assert proc.returncode == 0, stderr.decode()


def test_a_stale_socket_file_is_replaced_as_beanstalkd_replaces_it(socket_dir):
    path = socket_dir / "q.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as stale:
        stale.bind(str(path))  # a previous run's file: nobody listens on it
    proc = subprocess.Popen([*haqueue_command(), "-l", f"unix:{path}"], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 10
        while True:  # refused while the stale file is there: polled until replaced, bounded
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
                try:
                    conn.connect(str(path))
                except OSError:
                    assert proc.poll() is None and time.monotonic() < deadline, "never replaced"
                    time.sleep(0.005)
                    continue
                conn.settimeout(10)
                conn.sendall(b"put 0 0 60 5\r\nhello\r\n")
                assert conn.recv(64) == b"INSERTED 1\r\n"
                break
    finally:
        proc.terminate()
        proc.communicate(timeout=10)


def test_a_file_that_is_not_a_socket_is_refused_in_one_line_and_kept(socket_dir):
    path = socket_dir / "data"
    path.write_text("precious")
    result = subprocess.run([*haqueue_command(), "-l", f"unix:{path}"], capture_output=True, text=True,
                            timeout=30)
    assert result.returncode == 1
    assert result.stderr == f"haqueue: cannot listen on unix:{path}: a file that is not a socket is there\n"
    assert path.read_text() == "precious"


def test_the_early_unix_socket_is_taken_once_and_only_for_its_own_path(socket_dir):
    path = socket_dir / "q.sock"
    listen = f"unix:{path}"
    assert early.listen_early(["-l", listen]) is not None
    sock = None
    try:
        assert early.take(f"unix:{socket_dir / 'other.sock'}", None) is None
        assert early.take(HOST, early.DEFAULT_PORT) is None
        sock = early.take(listen, None)
        assert sock is not None and sock.getsockname() == str(path)
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.connect(str(path))  # the kernel completes it: listening already
        assert early.take(listen, None) is None
    finally:
        if sock is not None:
            sock.close()


def test_commands_sent_while_the_node_starts_count_their_delays_and_timeouts_from_their_arrival(socket_dir):
    """As beanstalkd, ready within ms, counts them: a harness sends at once, the node reads
    0.1-0.5 s later (haqueue/cli/arrivals.py noted when the bytes came). Never earlier
    than that either: nothing ends before its time after the command was sent."""
    path = socket_dir / "q.sock"
    proc = subprocess.Popen([*haqueue_command(), "-l", f"unix:{path}"], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 10
        while True:  # connect as soon as it listens (polled, bounded)
            producer = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                producer.connect(str(path))
                break
            except OSError:
                producer.close()
                assert proc.poll() is None and time.monotonic() < deadline, "not listening"
                time.sleep(0.001)
        waiter = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        waiter.connect(str(path))
        with producer, waiter:
            producer.settimeout(10)
            waiter.settimeout(10)
            sent = time.monotonic()
            producer.sendall(b"use later\r\nput 0 1 60 1\r\nx\r\nwatch later\r\nreserve\r\n")
            waiter.sendall(b"reserve-with-timeout 1\r\n")
            replies = b""
            while b"INSERTED" not in replies:
                replies += producer.recv(256)
            inserted = time.monotonic()  # the node serves: its start took inserted - sent
            while not replies.endswith(b"RESERVED 1 1\r\nx\r\n"):
                replies += producer.recv(256)
            reserved = time.monotonic()
            assert waiter.recv(64) == b"TIMED_OUT\r\n"
            timed_out = time.monotonic()
    finally:
        proc.terminate()
        proc.communicate(timeout=10)
    waited = inserted - sent
    assert waited > 0.05, "the node was ready too soon for this test to tell"
    assert 1.0 <= reserved - sent < 1.0 + waited / 2  # from the arrival, not from the reading
    assert 1.0 <= timed_out - sent < 1.0 + waited / 2


def test_arrivals_notes_each_connection_and_when_its_first_bytes_came(socket_dir):
    from haqueue.cli.arrivals import Arrivals

    path = str(socket_dir / "a.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(8)
    arrivals = Arrivals(listener)
    talker, silent = (socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) for _ in range(2))
    taken = []
    try:
        talker.connect(path)
        silent.connect(path)
        before = time.monotonic()
        talker.sendall(b"put 0 1 60 1\r\nx\r\n")
        deadline = time.monotonic() + 10
        while True:  # the thread notes the bytes soon after they come: polled, bounded
            with arrivals._lock:
                noted = [entry[1] for entry in arrivals._taken]
            if len(noted) == 2 and any(noted):
                break
            assert time.monotonic() < deadline, f"not noted: {noted}"
            time.sleep(0.001)
        taken = arrivals.stop()
        after = time.monotonic()
        assert arrivals.stop() == []  # once
        (first, first_at, count), (second, second_at, second_count) = taken
        assert before <= first_at <= after and count == 17  # the talker connected first
        assert (second_at, second_count) == (None, 0)  # no bytes yet: counted from when they are read
        assert first.recv(64) == b"put 0 1 60 1\r\nx\r\n"  # noted, not read
    finally:
        for sock, _, _ in taken:
            sock.close()
        for sock in (talker, silent, listener):
            sock.close()
