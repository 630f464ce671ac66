"""A client that never reads, and the check that a node survives it.

Owns `check_flood_is_contained`, the scenario the single-node and the cluster
tests share: while the flood runs another client's puts are answered, the
server's memory stays within a bound, TCP pushes back on the flooder, and
once it leaves memory is where it was. The flooder (20 MB of `stats`, as in
issue 11, never reading) and the RSS sampler are the benchmark's
(haqueue/bench/flood.py).
"""

from __future__ import annotations

import ssl
import time
from dataclasses import dataclass, field

import psutil

from haqueue.bench.flood import Flood, RssSampler
from tests.support.servers import RawConn

# The documented bound (docs/reliability.md, "Hostile clients"): a node's
# resident memory grows by less than this while one client floods it.
FLOOD_RSS_BOUND = 32 * 1024 * 1024


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
                             connect=RawConn, also=None) -> FloodReport:
    """Flood (host, port) with unread stats; assert the node keeps its bounds. Returns figures.

    Throughout, a connected client's puts are answered, new connections are accepted and
    answered, and `also()` (e.g. an admin-port check) is called now and then.
    """
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
                pushed_back = flood.done or flood.stalled_for() > 1.0
                if elapsed > max_seconds or (elapsed > min_seconds and pushed_back):
                    break
                t0 = time.perf_counter()
                other.send(b"put 0 0 60 5\r\nhello\r\n")
                reply = other.recv_reply(timeout=2)  # served throughout: never 2 s without an answer
                latencies.append(time.perf_counter() - t0)
                assert reply.startswith(b"INSERTED "), reply
                # Deleted again, so the probe's own jobs (tens of thousands on a fast
                # machine, ~400 bytes each) do not count as memory the flood took.
                other.send(b"delete " + reply.split()[1] + b"\r\n")
                assert other.recv_reply(timeout=2) == b"DELETED\r\n"
                if len(latencies) % 200 == 1:
                    with connect(host, port, timeout=2) as newcomer:  # accepts go on too
                        newcomer.send(b"list-tube-used\r\n")
                        assert newcomer.recv_reply(timeout=2) == b"USING default\r\n"
                    if also is not None:
                        also()
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


@dataclass
class ReadingFloodReport:
    put_latencies: list[float]
    flood_received: int
    turns_yielded: int

    def summary(self) -> str:
        ordered = sorted(self.put_latencies)
        return (f"{len(ordered)} puts under a reading flood: median {ordered[len(ordered) // 2] * 1000:.2f} ms, "
                f"slowest {ordered[-1] * 1000:.1f} ms; the flooder read {self.flood_received / 1e6:.1f} MB; "
                f"{self.turns_yielded} turns yielded to Raft")


def stat_value(conn, key: str) -> str:
    conn.send(b"stats\r\n")
    body = conn.recv_reply().decode()
    return body.split(f"\n{key}: ")[1].split("\n")[0]


def wait_for_stat(conn, key: str, value: str, within: float = 10.0) -> None:
    """Until the node's `stats` says `key: value` (asked over `conn`); fail after `within` s.
    The node's own count is the event: a client outside it can only ask again."""
    deadline = time.monotonic() + within
    while (seen := stat_value(conn, key)) != value:
        assert time.monotonic() < deadline, f"{key} stayed {seen}, never {value}"
        time.sleep(0.02)  # between two asks, bounded by the deadline


def check_reading_flood_yields_to_raft(host: str, port: int, puts: int = 300,
                                       connect=RawConn) -> ReadingFloodReport:
    """A connection pipelines `stats` and reads every reply (the loop never idles) while
    another client puts one job at a time: each put is answered, the flooder is served
    all along, and the node's turns make room for Raft (haqueue-turns-yielded-to-raft).

    How long the puts take is the benchmark's to judge (`haqueue bench --flood`).
    """
    with connect(host, port) as other:
        yielded_before = int(stat_value(other, "haqueue-turns-yielded-to-raft"))
        flood = Flood(host, port, read=True).start()
        latencies: list[float] = []
        try:
            deadline = time.monotonic() + 10
            while flood.received < 1_000_000:  # the flood is under way
                assert time.monotonic() < deadline, "the reading flooder got no replies"
                time.sleep(0.01)
            received = flood.received
            for _ in range(puts):
                t0 = time.perf_counter()
                other.send(b"put 0 0 60 5\r\nhello\r\n")
                assert other.recv_reply(timeout=2).startswith(b"INSERTED ")
                latencies.append(time.perf_counter() - t0)
            assert flood.error is None, f"the flooder was cut off: {flood.error!r}"
            assert flood.received > received, "the flooder got nothing while the puts were served"
            received = flood.received
        finally:
            flood.close()
        yielded = int(stat_value(other, "haqueue-turns-yielded-to-raft")) - yielded_before
    assert yielded > 0, "no turn waited for Raft while writes were in the log"
    return ReadingFloodReport(latencies, received, yielded)
