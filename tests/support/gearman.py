"""Real Gearman servers for tests, and a raw packet client to talk to them.

Owns: starting real gearmand (in memory) and `python -m haqueue serve --gearman-port` on free
loopback ports, each stopped by PID (servers.ServerProcess); `GearConn`, a blocking
socket whose every read has a deadline and which splits the stream into Gearman packets
(or admin reply blocks); and `normalise`, which maps each server's job handles to
H:1, H:2, ... in order of first appearance, so two servers' replies compare byte for byte.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
import subprocess
import sys
import time

from haqueue.protocol.gearman import HEADER, PACKETS, request
from tests.support.servers import (HAQUEUE_START_TIMEOUT, HOST, START_TIMEOUT, RawConn, ServerProcess, ServerStartError, running,
                                   _launch, free_port)


def gearmand_path() -> str:
    for candidate in (shutil.which("gearmand"), "/usr/sbin/gearmand"):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    raise ServerStartError("gearmand is not installed (apt-get install gearman-job-server)")


def start_gearmand(*extra: str) -> ServerProcess:
    """gearmand 1.1.20, in-memory queue, one I/O thread (its replies in a deterministic order)."""
    binary = gearmand_path()
    for attempt in range(3):
        port = free_port()
        argv = [binary, "-L", HOST, "-p", str(port), "--log-file=none", "-t", "0", "--queue-type=builtin",
                *extra]
        try:
            return _launch("gearmand", argv, HOST, port, START_TIMEOUT)
        except ServerStartError as exc:
            if attempt == 2 or "in use" not in str(exc).lower():
                raise
    raise AssertionError("unreachable")


def start_haqueue_gearman(*extra: str, data_dir: str | None = None) -> ServerProcess:
    """A single haqueue node with its Gearman port; .port is the Gearman port, .beanstalk_port the other."""
    for attempt in range(3):
        port, gearman_port = free_port(), free_port()
        if port == gearman_port:
            continue
        argv = [sys.executable, "-m", "haqueue", "serve", "-l", HOST, "-p", str(port),
                "--gearman-port", str(gearman_port), *extra]
        if data_dir is not None:
            argv += ["-b", data_dir]
        try:
            server = _launch("haqueue", argv, HOST, gearman_port, HAQUEUE_START_TIMEOUT,
                             dict(os.environ, PYTHONUNBUFFERED="1"))
        except ServerStartError as exc:
            if attempt == 2 or "in use" not in str(exc).lower():
                raise
            continue
        server.beanstalk_port = port
        return server
    raise AssertionError("unreachable")


def gearmand(*extra: str):
    return running(start_gearmand, *extra)


def haqueue_gearman(*extra: str, data_dir: str | None = None):
    return running(start_haqueue_gearman, *extra, data_dir=data_dir)


class GearConn(RawConn):
    """A raw Gearman connection: send packets or lines, read whole packets with a deadline
    (the socket handling is RawConn's)."""

    def __init__(self, port: int, host: str = HOST, timeout: float = 5.0) -> None:
        super().__init__(host, port, timeout)

    @property
    def eof(self) -> bool:
        return self.closed_by_peer

    def req(self, name: str, *args: bytes) -> None:
        self.send(request(name, *args))

    def _fill(self, deadline: float) -> bool:
        return not self.eof and super()._fill(deadline)  # nothing more comes after the end

    def packet(self, timeout: float | None = None) -> bytes:
        """The next whole packet's bytes (TimeoutError, or EOFError at end of stream)."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while True:
            if len(self.buf) >= HEADER.size:
                size = struct.unpack_from(">I", self.buf, 8)[0]
                if len(self.buf) >= HEADER.size + size:
                    out = bytes(self.buf[:HEADER.size + size])
                    del self.buf[:HEADER.size + size]
                    return out
            if not self._fill(deadline):
                if self.eof:
                    raise EOFError(f"closed with {bytes(self.buf)!r} buffered")
                raise TimeoutError(f"no whole packet; have {bytes(self.buf)!r}")

    def packets(self, n: int, timeout: float | None = None) -> list[bytes]:
        return [self.packet(timeout) for _ in range(n)]

    def admin(self, line: bytes, timeout: float | None = None) -> bytes:
        """Send an admin line; its answer: one line, or lines up to "." for status and workers."""
        self.send(line + b"\n")
        block = line.split()[:1] in ([b"status"], [b"workers"], [b"STATUS"], [b"WORKERS"])
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while True:
            if block:
                found = self.buf.find(b"\n.\n")
                end = 2 if self.buf.startswith(b".\n") else found + 3 if found >= 0 else 0
                if end:
                    out = bytes(self.buf[:end])
                    del self.buf[:end]
                    return out
            else:
                end = self.buf.find(b"\n")
                if end >= 0:
                    out = bytes(self.buf[:end + 1])
                    del self.buf[:end + 1]
                    return out
            if not self._fill(deadline):
                raise TimeoutError(f"no admin answer to {line!r}; have {bytes(self.buf)!r}")

    def quiet(self, wait: float = 0.2) -> bytes:
        """What arrives within `wait` (a check that nothing more is sent)."""
        deadline = time.monotonic() + wait
        while self._fill(deadline):
            if self.eof:
                break
        out = bytes(self.buf)
        self.buf.clear()
        return out

    def closes(self, timeout: float | None = None) -> bool:
        """Whether the server closes the connection within `timeout`."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while not self.eof and self._fill(deadline):
            pass
        return self.eof


def parse(packet: bytes) -> tuple[str, tuple[bytes, ...]]:
    """(name, arguments) of a response packet's bytes."""
    _, type_, size = HEADER.unpack_from(packet)
    name, fields = PACKETS[type_]
    data = packet[HEADER.size:]
    return name, tuple(data.split(b"\0", fields - 1)) if fields else ()


_HANDLE = re.compile(rb"H:[^\x00\s]+:\d+")


class Normaliser:
    """Each server's job handles as H:1, H:2, ... by first appearance, sizes fixed up."""

    def __init__(self) -> None:
        self.names: dict[bytes, bytes] = {}

    def __call__(self, packet: bytes) -> bytes:
        if not packet.startswith(b"\0RES"):
            return _HANDLE.sub(self._name, packet)
        body = _HANDLE.sub(self._name, packet[HEADER.size:])
        return packet[:8] + struct.pack(">I", len(body)) + body

    def _name(self, match) -> bytes:
        return self.names.setdefault(match.group(0), b"H:%d" % (len(self.names) + 1))


# --- the lab's Gearman workload (haqueue/lab/gearmanworkload.py), run by tests on loopback ---------

COMPLETED = '"type":"ok","f":"delete"'  # a history line: a WORK_COMPLETE acknowledged


def lab_workload(mode: str, host: str, port: int, history, *extra: str) -> list[str]:
    """The argv of `python -m haqueue.lab.gearmanworkload MODE` against host:port."""
    return [sys.executable, "-m", "haqueue.lab.gearmanworkload", mode, "--host", host, "--port", str(port),
            "--history", str(history), *extra]


def completed(history) -> int:
    """How many completions the history records so far."""
    return history.read_text().count(COMPLETED) if history.exists() else 0


def drain_and_check(host: str, port: int, history, drained) -> dict:
    """Drain the queue with the workload, then judge both histories with the lab's queue checker."""
    from haqueue.lab import checker

    done = subprocess.run(lab_workload("drain", host, port, drained), capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    events = [json.loads(line) for path in (history, drained) for line in path.read_text().splitlines()]
    return checker.check(events)
