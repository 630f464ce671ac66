"""Real servers for tests, and a raw byte client to talk to them.

Owns: starting real beanstalkd and `python -m haqueue serve` on free loopback ports, waiting
(bounded) until they accept connections, stopping them by PID; and `RawConn`, a blocking
socket client whose every read has a deadline and which splits the byte stream into
beanstalkd replies (a line, plus for OK/FOUND/RESERVED the announced body and its CRLF).

Rules: loopback only; ports come from the kernel at run time; a server that dies or never
listens raises `ServerStartError` carrying the tail of its stderr; `stop()` is idempotent and
escalates from SIGTERM to SIGKILL.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from typing import Callable, Iterator

HOST = "127.0.0.1"
START_TIMEOUT = 5.0
HAQUEUE_START_TIMEOUT = 10.0  # a one-node Raft cluster must elect itself before it listens
READ_TIMEOUT = 5.0
STDERR_TAIL = 3000


class ServerStartError(RuntimeError):
    """A server exited early or never accepted a connection; the message has its stderr tail."""


class ConnectionClosed(ConnectionError):
    """The peer closed the connection before the awaited replies arrived."""


def free_udp_port(host: str = HOST) -> int:
    """A UDP port the kernel just handed out on `host` (the id service's)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def free_port(host: str = HOST) -> int:
    """A port the kernel just handed out; the caller binds it soon after (small race)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def beanstalkd_path() -> str:
    for candidate in (shutil.which("beanstalkd"), "/usr/sbin/beanstalkd", "/usr/bin/beanstalkd"):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    raise ServerStartError("beanstalkd is not installed (apt-get install beanstalkd)")


class ServerProcess:
    """A started server: .host, .port, .pid, .argv; stop() ends it (by PID, idempotent)."""

    def __init__(self, name: str, argv: list[str], host: str, port: int,
                 proc: subprocess.Popen, stderr_path: str) -> None:
        self.name = name
        self.argv = argv
        self.host = host
        self.port = port
        self.proc = proc
        self.pid = proc.pid
        self._stderr_path = stderr_path

    def __repr__(self) -> str:
        return f"<{self.name} pid={self.pid} {self.host}:{self.port}>"

    def stderr_tail(self, limit: int = STDERR_TAIL) -> str:
        try:
            with open(self._stderr_path, "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - limit))
                return f.read().decode("utf-8", "replace").strip()
        except OSError:
            return ""

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, timeout: float = 5.0) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout)
        with contextlib.suppress(OSError):
            os.unlink(self._stderr_path)

    def __enter__(self) -> "ServerProcess":
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop()

    def connect(self, timeout: float = READ_TIMEOUT) -> "RawConn":
        return RawConn(self.host, self.port, timeout)


def _accepts(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5) as probe:
            # Leave no trace: a probe closed from this side may still count as a
            # connection using `default` when a test's first stats-tube runs (the
            # differential pause script saw current-using 2 on beanstalkd). `quit`
            # makes the server close it, and its EOF says the server has done so.
            with contextlib.suppress(OSError):
                probe.sendall(b"quit\r\n")
                while probe.recv(64):
                    pass
            return True
    except OSError:
        return False


def _launch(name: str, argv: list[str], host: str, port: int, timeout: float,
            env: dict | None = None) -> ServerProcess:
    fd, stderr_path = tempfile.mkstemp(prefix=f"{name}-", suffix=".stderr")
    with os.fdopen(fd, "wb") as stderr:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=stderr, stderr=stderr,
                                env=env)
    server = ServerProcess(name, argv, host, port, proc, stderr_path)
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            tail = server.stderr_tail()
            server.stop()
            raise ServerStartError(f"{name} exited with status {proc.returncode} before listening "
                                   f"on {host}:{port}: {tail or '(no stderr)'}")
        if _accepts(host, port):
            return server
        if time.monotonic() > deadline:
            tail = server.stderr_tail()
            server.stop()
            raise ServerStartError(f"{name} did not listen on {host}:{port} within {timeout:g}s: "
                                   f"{tail or '(no stderr)'}")
        time.sleep(0.02)


def _start_on_free_port(name: str, make_argv: Callable[[int], list[str]], timeout: float,
                        env: dict | None = None) -> ServerProcess:
    # free_port() can race with another process taking the port: retry on "in use".
    for attempt in range(3):
        port = free_port()
        try:
            return _launch(name, make_argv(port), HOST, port, timeout, env)
        except ServerStartError as exc:
            if attempt == 2 or "in use" not in str(exc).lower():
                raise
    raise AssertionError("unreachable")


def start_beanstalkd(*extra_args: str, timeout: float = START_TIMEOUT) -> ServerProcess:
    """Real beanstalkd on a free loopback port (e.g. start_beanstalkd("-z", "100"))."""
    binary = beanstalkd_path()
    return _start_on_free_port(
        "beanstalkd", lambda port: [binary, "-l", HOST, "-p", str(port), *extra_args], timeout)


def start_haqueue(*extra_args: str, data_dir: str | None = None,
                  timeout: float = HAQUEUE_START_TIMEOUT) -> ServerProcess:
    """`python -m haqueue serve` on a free loopback port; it accepts beanstalkd's flags."""
    def argv(port: int) -> list[str]:
        args = [sys.executable, "-m", "haqueue", "serve", "-l", HOST, "-p", str(port)]
        if data_dir is not None:
            args += ["-b", str(data_dir)]
        return args + list(extra_args)

    env = dict(os.environ, PYTHONUNBUFFERED="1")
    return _start_on_free_port("haqueue", argv, timeout, env)


@contextlib.contextmanager
def running(start, *args, **kwargs) -> Iterator[ServerProcess]:
    """`start(*args, **kwargs)`'s server for the block, stopped however the block ends."""
    server = start(*args, **kwargs)
    try:
        yield server
    finally:
        server.stop()


def beanstalkd(*extra_args: str):
    return running(start_beanstalkd, *extra_args)


def haqueue(*extra_args: str, data_dir: str | None = None):
    return running(start_haqueue, *extra_args, data_dir=data_dir)


# --- raw client ------------------------------------------------------------------------------

_BODY_REPLIES = (b"OK ", b"FOUND ", b"RESERVED ")


def split_reply(buf: bytes | bytearray) -> int:
    """Length of the first complete beanstalkd reply in buf, or 0 if it is not complete yet."""
    end = buf.find(b"\r\n")
    if end < 0:
        return 0
    line_len = end + 2
    if not buf.startswith(_BODY_REPLIES):
        return line_len
    try:
        size = int(bytes(buf[:end]).rsplit(b" ", 1)[1])
    except (IndexError, ValueError):
        return line_len  # not a body reply after all; show it as it is
    total = line_len + size + 2
    return total if len(buf) >= total else 0


def split_replies(buf: bytes | bytearray) -> tuple[list[bytes], bytes]:
    """All complete replies in buf, and the incomplete rest."""
    replies = []
    pos = 0
    while n := split_reply(buf[pos:]):
        replies.append(bytes(buf[pos : pos + n]))
        pos += n
    return replies, bytes(buf[pos:])


class RawConn:
    """A raw beanstalkd connection: send bytes, read replies with a deadline."""

    def __init__(self, host: str, port: int, timeout: float = READ_TIMEOUT) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.timeout = timeout
        self.buf = bytearray()
        self.closed_by_peer = False

    def __enter__(self) -> "RawConn":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _fill(self, deadline: float) -> bool:
        """Read once before the deadline; False on timeout. Raises nothing on EOF (flags it)."""
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        self.sock.settimeout(remaining)
        try:
            data = self.sock.recv(65536)
        except socket.timeout:
            return False
        except ConnectionResetError:
            data = b""
        if not data:
            self.closed_by_peer = True
        self.buf += data
        return True

    def recv_until(self, until: int | Callable[[bytes], bool], timeout: float | None = None) -> bytes:
        """Read until `until` complete replies are buffered (int), or until the predicate holds
        for the buffered bytes; return those bytes and consume them. TimeoutError /
        ConnectionClosed (both carrying what arrived) when it does not happen in time."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while True:
            if isinstance(until, int):
                replies, _ = split_replies(self.buf)
                if len(replies) >= until:
                    taken = b"".join(replies[:until])
                    del self.buf[: len(taken)]
                    return taken
            elif until(bytes(self.buf)):
                taken = bytes(self.buf)
                self.buf.clear()
                return taken
            if self.closed_by_peer:
                raise ConnectionClosed(f"connection closed; received {bytes(self.buf)!r}")
            if not self._fill(deadline):
                raise TimeoutError(f"no complete reply in time; received {bytes(self.buf)!r}")

    def recv_replies(self, count: int, timeout: float | None = None) -> list[bytes]:
        """Exactly `count` replies, as a list."""
        return split_replies(self.recv_until(count, timeout))[0]

    def recv_reply(self, timeout: float | None = None) -> bytes:
        return self.recv_until(1, timeout)

    def expect_nothing(self, wait: float) -> bytes:
        """Wait `wait` seconds and return whatever arrived (b"" if the server stayed silent).
        Only for asserting silence; do not use it to wait for something."""
        deadline = time.monotonic() + wait
        while self._fill(deadline) and not self.closed_by_peer:
            pass
        taken = bytes(self.buf)
        self.buf.clear()
        return taken

    def wait_closed(self, timeout: float | None = None) -> bytes:
        """Read until the server closes the connection; return what arrived before. TimeoutError
        if it stays open."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while not self.closed_by_peer:
            if not self._fill(deadline):
                raise TimeoutError(f"connection still open; received {bytes(self.buf)!r}")
        taken = bytes(self.buf)
        self.buf.clear()
        return taken

    def half_close(self) -> None:
        """Send FIN: the server reads end-of-file, and may still answer."""
        self.sock.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()
