"""The start-up benchmark: from exec to listening, and to the first `put` answered.

Client libraries' test harnesses start the server by path with beanstalkd's flags, sleep a
fixed 0.1 s and connect. This execs the server the same way N times (a fresh port, or
with --unix a fresh Unix socket path, and a fresh -b directory when durable, each time) and reports, per server, the time from just
before exec to the first successful connect (polled every 1 ms) and to the reply to one
`put` sent on that connection, and the CPU time the server used until then (its rusage:
it is killed the moment the reply arrives). On a machine shared with other work, the
CPU time moves far less than the wall-clock times do. Servers: beanstalkd, and haqueue as `haqueue-beanstalkd`
(the console script beside the running interpreter; `python -m haqueue serve` if absent).

haqueue is measured as installed: its modules' bytecode cached, as `pip install` leaves it
(`cache_bytecode`). A development checkout run with PYTHONDONTWRITEBYTECODE set would
otherwise compile every one of haqueue's modules again at every start (about 40 ms of a
168 ms start here), a cost no installed node pays.
"""

from __future__ import annotations

import compileall
import os
import signal
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

from haqueue.bench.load import BenchError
from haqueue.bench.servers import HOST, beanstalkd_path, free_port, stop_process

CONNECT_POLL = 0.001
START_TIMEOUT = 10.0
PUT = b"put 0 0 60 5\r\nhello\r\n"


@dataclass
class StartupResult:
    server: str
    durable: bool
    listening: list[float] = field(default_factory=list)  # seconds after exec
    answered: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)  # CPU seconds used until the reply

    def summary(self, which: str) -> dict[str, float]:
        values = sorted(getattr(self, which))

        def rank(p: int) -> float:
            return values[max(0, -(-len(values) * p // 100) - 1)] * 1000

        return {"count": len(values), "min": values[0] * 1000, "p50": rank(50), "p90": rank(90),
                "max": values[-1] * 1000}

    def to_json(self) -> dict:
        return {"server": self.server, "durable": self.durable,
                "listening_ms": self.summary("listening"), "put_answered_ms": self.summary("answered"),
                "cpu_to_answer_ms": self.summary("cpu")}


def haqueue_command() -> list[str]:
    script = os.path.join(os.path.dirname(sys.executable), "haqueue-beanstalkd")
    if os.access(script, os.X_OK):
        return [script]
    return [sys.executable, "-m", "haqueue", "serve"]


def command(kind: str) -> list[str]:
    if kind == "beanstalkd":
        return [beanstalkd_path()]
    if kind == "haqueue":
        return haqueue_command()
    raise BenchError(f"unknown server kind {kind!r}")


def start_once(argv: list[str], timeout: float = START_TIMEOUT, unix: bool = False) -> tuple[float, float, float]:
    """Exec argv (plus -l HOST -p PORT, or -l unix:PATH): (listening, put answered) seconds
    after exec, and the CPU seconds the server used until the reply."""
    socket_dir = tempfile.mkdtemp(prefix="hq-startup-") if unix else None
    if socket_dir is not None:
        path = os.path.join(socket_dir, "s.sock")
        full = [*argv, "-l", f"unix:{path}"]
    else:
        port = free_port()
        full = [*argv, "-l", HOST, "-p", str(port)]
    began = time.monotonic()
    proc = subprocess.Popen(full, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    try:
        deadline = began + timeout
        while True:
            try:
                if socket_dir is not None:
                    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                    try:
                        conn.settimeout(timeout)
                        conn.connect(path)
                    except OSError:
                        conn.close()
                        raise
                else:
                    conn = socket.create_connection((HOST, port), timeout=timeout)
                break
            except OSError:
                if proc.poll() is not None:
                    raise BenchError(f"{argv[0]} exited with status {proc.returncode}: "
                                     f"{proc.stderr.read().decode(errors='replace').strip()[-300:]}")
                if time.monotonic() > deadline:
                    raise BenchError(f"{argv[0]} not listening after {timeout:g} s") from None
                time.sleep(CONNECT_POLL)  # polling the port, bounded by the deadline
        listening = time.monotonic() - began
        with conn:
            conn.settimeout(timeout)
            conn.sendall(PUT)
            reply = b""
            while not reply.endswith(b"\r\n"):
                chunk = conn.recv(64)
                if not chunk:
                    raise BenchError(f"{argv[0]} closed the connection instead of answering put")
                reply += chunk
            answered = time.monotonic() - began
        if not reply.startswith(b"INSERTED "):
            raise BenchError(f"{argv[0]} answered put with {reply!r}")
        # Killed now, so that its rusage counts the way to the reply and nothing after
        # (its data, if any, is a throwaway directory).
        os.kill(proc.pid, signal.SIGKILL)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = -signal.SIGKILL
        return listening, answered, usage.ru_utime + usage.ru_stime
    finally:
        stop_process(proc)
        proc.stderr.close()
        if socket_dir is not None:
            shutil.rmtree(socket_dir, ignore_errors=True)


def cache_bytecode() -> None:
    """Write haqueue's modules' bytecode beside them, as installing the package does.

    compileall writes whatever PYTHONDONTWRITEBYTECODE says (that variable only stops
    the interpreter from writing what it compiles while importing); an up-to-date
    cache is left as it is.
    """
    import haqueue

    if not compileall.compile_dir(os.path.dirname(haqueue.__file__), quiet=1):
        raise BenchError("could not compile haqueue's modules (see above)")


def measure_startup(kinds: list[str], starts: int, durable: bool, unix: bool = False) -> list[StartupResult]:
    """`starts` rounds of: each kind once (taking turns, so load hurts both alike)."""
    if "haqueue" in kinds:
        cache_bytecode()
    results = {kind: StartupResult(kind, durable) for kind in kinds}
    for _ in range(starts):
        for kind in kinds:
            data_dir = tempfile.mkdtemp(prefix=f"haqueue-startup-{kind}-") if durable else None
            try:
                argv = command(kind) + (["-b", data_dir] if data_dir else [])
                listening, answered, cpu = start_once(argv, unix=unix)
            finally:
                if data_dir:
                    shutil.rmtree(data_dir, ignore_errors=True)
            results[kind].listening.append(listening)
            results[kind].answered.append(answered)
            results[kind].cpu.append(cpu)
    return list(results.values())
