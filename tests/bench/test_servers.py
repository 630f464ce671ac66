"""Servers bench starts: free loopback ports, temp data dirs, stopped by PID."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import psutil
import pytest

from haqueue.bench import servers
from haqueue.bench.load import BenchError


def refuses(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except ConnectionRefusedError:
        return True
    return False


def test_started_beanstalkd_listens_and_is_stopped_by_pid():
    with servers.started("beanstalkd") as server:
        assert psutil.Process(server.pid).name() == "beanstalkd"
        socket.create_connection((server.host, server.port), timeout=1).close()
    assert not psutil.pid_exists(server.pid) or psutil.Process(server.pid).status() == "zombie"
    assert refuses(server.port)


def test_durable_server_writes_its_log_in_a_temporary_data_dir_removed_after():
    with servers.started("beanstalkd", durable=True) as server:
        cmdline = psutil.Process(server.pid).cmdline()
        data_dir = cmdline[cmdline.index("-b") + 1]
        assert cmdline[-1] == "-f0"
        assert any(name.startswith("binlog.") for name in os.listdir(data_dir))
    assert not os.path.exists(data_dir)


def test_server_is_stopped_when_the_block_fails():
    with pytest.raises(RuntimeError):
        with servers.started("beanstalkd") as server:
            raise RuntimeError("bench failed")
    assert refuses(server.port)


def test_server_exiting_before_it_listens_is_reported_with_its_last_line(monkeypatch):
    script = "import sys; print('starting'); print('boom: no such flag -x'); sys.exit(3)"
    monkeypatch.setattr(servers, "server_command", lambda kind, port, data_dir: [sys.executable, "-c", script])
    with pytest.raises(BenchError, match=r"^haqueue exited with status 3 before listening: boom: no such flag -x$"):
        with servers.started("haqueue"):
            pass


def test_haqueue_command_is_python_m_haqueue_serve_with_beanstalkd_flags():
    assert servers.server_command("haqueue", 4000, "/d") == [
        sys.executable, "-m", "haqueue", "serve", "-l", "127.0.0.1", "-p", "4000", "-b", "/d", "-f0"
    ]
    assert servers.server_command("beanstalkd", 4000, None)[1:] == ["-l", "127.0.0.1", "-p", "4000"]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_interrupting_compare_stops_the_servers_it_started(sig):
    bench = subprocess.Popen(
        [sys.executable, "-m", "haqueue", "bench", "compare", "--compare-with", "beanstalkd",
         "--duration", "30", "--warmup", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    servers_seen: list[psutil.Process] = []
    try:
        deadline = time.monotonic() + 10
        while not servers_seen and time.monotonic() < deadline:
            servers_seen = [p for p in psutil.Process(bench.pid).children() if p.name() == "beanstalkd"]
            time.sleep(0.02)  # polling for the child, bounded by the deadline
        assert servers_seen, "bench never started beanstalkd"
        bench.send_signal(sig)
        assert bench.wait(10) == 130  # as an interrupted program exits
        assert bench.stderr.read().decode().strip().splitlines()[-1] == "haqueue: interrupted"
        gone, alive = psutil.wait_procs(servers_seen, timeout=5)
        assert not alive
    finally:
        if bench.poll() is None:
            bench.kill()
            bench.wait()
        for server in servers_seen:
            if server.is_running():
                server.kill()
