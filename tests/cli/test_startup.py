"""Starting haqueue as client libraries' test harnesses start beanstalkd.

Such a harness execs $BEANSTALKD_PATH with beanstalkd's flags, sleeps a fixed 0.1 s and
connects once; haqueue-beanstalkd must be listening by then (haqueue/cli/early.py), and the
put sent at once must be answered (after its commit, whenever that is).
"""

from __future__ import annotations

import socket
import subprocess
import time

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
    (["-l", "unix:/run/q.sock"], None),
    (["-p", "0"], None),
    (["-p", "x"], None),
    (["-p"], None),
    (["-h"], None),
    (["-v"], None),
    (["-u", "nobody"], None),
    (["--config", "c.toml", "--node", "n1"], None),
    (["-p", "1234", "--admin", "127.0.0.1:1235"], None),  # listening means its admin is up
    (["--no-such-option"], None),
])
def test_only_command_lines_read_exactly_as_click_would_listen_early(args, address):
    assert early._address(args) == address


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
