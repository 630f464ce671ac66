"""Start and stop the servers bench compares: a real beanstalkd and a haqueue node.

Rules: each server gets a free loopback port (bind 127.0.0.1:0, then release it)
and its own temporary directory (its `-b` data dir when durable, and its log);
it runs in its own session so a Ctrl-C at the terminal reaches bench, which then
stops it in order. A server is stopped by its PID (SIGTERM, then SIGKILL after a
grace period) on every way out of the `started` block: success, failure, Ctrl-C.
Readiness is a TCP connect that succeeds, polled with a bounded timeout; a server
that exits first is reported with the last line it printed.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from haqueue.bench.load import BenchError

KINDS = ("beanstalkd", "haqueue")
HOST = "127.0.0.1"
# A haqueue node serves once it leads (a lone node at once, after reading its
# journal and snapshot; a cluster member after an election); beanstalkd listens at once.
READY_TIMEOUT = 30.0
STOP_GRACE = 5.0
PORT_ATTEMPTS = 3  # another process may take the free port between probe and bind


@dataclass
class Server:
    kind: str
    host: str
    port: int
    pid: int
    durable: bool

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


def beanstalkd_path() -> str:
    found = shutil.which("beanstalkd") or next(
        (p for p in ("/usr/sbin/beanstalkd", "/usr/bin/beanstalkd") if os.access(p, os.X_OK)),
        None,
    )
    if found is None:
        raise BenchError("beanstalkd is not installed (apt-get install beanstalkd)")
    return found


# CPUs the started servers run on (`bench --server-cpus`), or None: anywhere.
SERVER_CPUS: set[int] | None = None


def pin_servers(cpus: set[int]) -> None:
    """Run started servers on `cpus` and this process (the load) on the others,
    so the load generator never takes the servers' CPU time."""
    global SERVER_CPUS
    mine = os.sched_getaffinity(0)
    if not cpus <= mine:
        raise BenchError(f"--server-cpus: this machine has CPUs {sorted(mine)}, not {sorted(cpus - mine)}")
    if not mine - cpus:
        raise BenchError("--server-cpus: leave at least one CPU for the load generator")
    SERVER_CPUS = set(cpus)
    os.sched_setaffinity(0, mine - cpus)


def server_command(kind: str, port: int, data_dir: str | None) -> list[str]:
    """The command line that runs `kind` on HOST:port; durable when data_dir is given."""
    if SERVER_CPUS is not None:
        # taskset sets the affinity before exec: every thread the server starts inherits it.
        return ["taskset", "-c", ",".join(map(str, sorted(SERVER_CPUS))),
                *_unpinned_command(kind, port, data_dir)]
    return _unpinned_command(kind, port, data_dir)


def _unpinned_command(kind: str, port: int, data_dir: str | None) -> list[str]:
    if kind == "beanstalkd":
        cmd = [beanstalkd_path(), "-l", HOST, "-p", str(port)]
    elif kind == "haqueue":
        cmd = [sys.executable, "-m", "haqueue", "serve", "-l", HOST, "-p", str(port)]
    else:
        raise BenchError(f"unknown server kind {kind!r}: expected one of {', '.join(KINDS)}")
    if data_dir is not None:
        # -f0: fsync before every reply that reports a change (both accept it).
        cmd += ["-b", data_dir, "-f0"]
    return cmd


def free_port(host: str = HOST) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


@contextmanager
def started(kind: str, durable: bool = False, extra_args: tuple[str, ...] = ()) -> Iterator[Server]:
    """Run one server of `kind` for the duration of the block (`extra_args` appended to its command)."""
    workdir = tempfile.mkdtemp(prefix=f"haqueue-bench-{kind}-")
    proc: subprocess.Popen | None = None
    try:
        data_dir = None
        if durable:
            data_dir = os.path.join(workdir, "data")
            os.mkdir(data_dir)
        log_path = os.path.join(workdir, "server.log")
        for attempt in range(PORT_ATTEMPTS):
            port = free_port()
            with open(log_path, "wb") as log:
                proc = subprocess.Popen(
                    server_command(kind, port, data_dir) + list(extra_args),
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            try:
                _wait_listening(proc, port, kind, log_path)
                break
            except _PortTaken:
                stop_process(proc)
                proc = None
                if attempt == PORT_ATTEMPTS - 1:
                    raise BenchError(f"{kind}: no free port after {PORT_ATTEMPTS} tries") from None
        assert proc is not None
        yield Server(kind=kind, host=HOST, port=port, pid=proc.pid, durable=durable)
    finally:
        if proc is not None:
            stop_process(proc)
        shutil.rmtree(workdir, ignore_errors=True)


class _PortTaken(Exception):
    pass


def _wait_listening(proc: subprocess.Popen, port: int, kind: str, log_path: str) -> None:
    deadline = time.monotonic() + READY_TIMEOUT
    while True:
        status = proc.poll()
        if status is not None:
            last = _last_line(log_path)
            if "in use" in last.lower():
                raise _PortTaken()
            raise BenchError(
                f"{kind} exited with status {status} before listening"
                + (f": {last}" if last else "")
            )
        try:
            with socket.create_connection((HOST, port), timeout=0.5):
                return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise BenchError(f"{kind} not listening on {HOST}:{port} after {READY_TIMEOUT:g} s")
        time.sleep(0.02)  # polling a condition (the port), bounded by the deadline


def _last_line(path: str) -> str:
    try:
        with open(path, "rb") as f:
            lines = f.read().decode("utf-8", "replace").strip().splitlines()
    except OSError:
        return ""
    return lines[-1].strip() if lines else ""


def stop_process(proc: subprocess.Popen) -> None:
    """SIGTERM, then SIGKILL after STOP_GRACE; by the Popen's PID."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(STOP_GRACE)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
