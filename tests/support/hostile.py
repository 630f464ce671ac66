"""A client that never reads, and the check that a node survives it.

Owns: `Flood`, one connection (plain or TLS) that pipelines a command (by
default 20 MB of `stats`, as in issue 11) from a thread and never reads a
reply; `RssSampler`, the peak resident set of a server process (psutil);
`check_flood_is_contained`, the scenario the single-node and the cluster
tests share: while the flood runs another client's puts are answered, the
server's memory stays within a bound, TCP pushes back on the flooder, and
once it leaves memory is where it was.
"""

from __future__ import annotations

import socket
import ssl
import threading
import time
from dataclasses import dataclass, field

import psutil

from tests.support.servers import RawConn

FLOOD_BYTES = 20_000_000
# The documented bound (docs/reliability.md, "Hostile clients"): a node's
# resident memory grows by less than this while one client floods it.
FLOOD_RSS_BOUND = 32 * 1024 * 1024


class Flood:
    """Send `total` bytes of `command` repeated, never reading; progress in .sent."""

    def __init__(self, host: str, port: int, command: bytes = b"stats\r\n",
                 total: int = FLOOD_BYTES, tls: ssl.SSLContext | None = None) -> None:
        sock = socket.create_connection((host, port), timeout=5)
        if tls is not None:
            sock = tls.wrap_socket(sock, server_hostname=host)
        sock.settimeout(0.2)
        self.sock = sock
        self.payload = command * (total // len(command))
        self.sent = 0
        self.last_progress = time.monotonic()
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> "Flood":
        self._thread.start()
        return self

    def _run(self) -> None:
        view = memoryview(self.payload)
        try:
            while self.sent < len(self.payload) and not self._stop.is_set():
                try:
                    n = self.sock.send(view[self.sent:self.sent + 65536])
                except (socket.timeout, ssl.SSLWantWriteError):
                    continue
                self.sent += n
                self.last_progress = time.monotonic()
        except OSError as exc:  # the server closed it (output limit)
            self.error = exc

    @property
    def done(self) -> bool:
        return self.sent >= len(self.payload)

    def stalled_for(self) -> float:
        return time.monotonic() - self.last_progress

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        try:
            self.sock.close()
        except OSError:
            pass


class RssSampler:
    """Samples a process's resident set every `period` seconds in a thread; .peak, .last."""

    def __init__(self, pid: int, period: float = 0.05) -> None:
        self.process = psutil.Process(pid)
        self.period = period
        self.peak = self.last = self.process.memory_info().rss
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> "RssSampler":
        self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        while not self._stop.wait(self.period):
            self.last = self.process.memory_info().rss
            self.peak = max(self.peak, self.last)


@dataclass
class FloodReport:
    baseline: int
    peak: int
    after: int
    sent: int
    put_latencies: list[float] = field(default_factory=list)

    def summary(self) -> str:
        mib = 1 << 20
        return (f"rss idle {self.baseline / mib:.1f} MiB, peak {self.peak / mib:.1f} MiB, "
                f"after {self.after / mib:.1f} MiB; flooder got {self.sent / 1e6:.1f} MB in; "
                f"{len(self.put_latencies)} puts, slowest {max(self.put_latencies) * 1000:.1f} ms")


def current_connections(host: str, port: int, connect=RawConn) -> int:
    with connect(host, port) as conn:
        conn.send(b"stats\r\n")
        body = conn.recv_reply().decode()
    return int(body.split("current-connections: ")[1].split("\n")[0])


def check_flood_is_contained(host: str, port: int, pid: int, min_seconds: float = 3.0,
                             max_seconds: float = 20.0, tls: ssl.SSLContext | None = None,
                             connect=RawConn) -> FloodReport:
    """Flood (host, port) with unread stats; assert the node keeps its bounds. Returns figures."""
    process = psutil.Process(pid)
    with connect(host, port) as warm:  # let the node allocate what any first client costs
        warm.send(b"stats\r\nput 0 0 60 1\r\nx\r\n")
        warm.recv_replies(2)
    baseline = process.memory_info().rss
    latencies: list[float] = []
    with RssSampler(pid) as rss, connect(host, port) as other:
        flood = Flood(host, port, tls=tls).start()
        try:
            started = time.monotonic()
            while True:
                elapsed = time.monotonic() - started
                if elapsed > max_seconds or (elapsed > min_seconds and (flood.done or flood.stalled_for() > 1.0)):
                    break
                t0 = time.perf_counter()
                other.send(b"put 0 0 60 5\r\nhello\r\n")
                reply = other.recv_reply(timeout=2)  # served throughout: never 2 s without an answer
                latencies.append(time.perf_counter() - t0)
                assert reply.startswith(b"INSERTED "), reply
            assert flood.error is None, f"the flooder was cut off: {flood.error!r}"
            assert not flood.done, "the node read all 20 MB: nothing pushed back on the flooder"
            sent = flood.sent
        finally:
            flood.close()
        peak = rss.peak
        assert peak - baseline < FLOOD_RSS_BOUND, (
            f"rss grew {(peak - baseline) >> 20} MiB under the flood (bound {FLOOD_RSS_BOUND >> 20} MiB)")
        # The flooder has left: the node notices, and memory is back near idle.
        deadline = time.monotonic() + 5
        while current_connections(host, port, connect) > 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert current_connections(host, port, connect) <= 2
        after = process.memory_info().rss
        assert after - baseline < FLOOD_RSS_BOUND // 2, f"rss after the flood: {after >> 20} MiB"
        other.send(b"put 0 0 60 5\r\nhello\r\n")
        assert other.recv_reply().startswith(b"INSERTED ")
    return FloodReport(baseline, peak, after, sent, latencies)
