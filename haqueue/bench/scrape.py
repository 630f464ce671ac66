"""What a Prometheus scrape costs a node: CPU per GET /metrics with many tubes.

Starts a haqueue node with its admin endpoint, gives it `tubes` tubes (one
job each, so they persist), then scrapes /metrics `scrapes` times, one
request after another as Prometheus does, and reads the node's CPU time
(user + system, by PID) before and after. The node's idle CPU (its Raft tick
thread) over an equally long quiet spell is measured too and subtracted, so
the figure is what the scrapes cost. The target (docs/operations.md): under
5 ms per scrape with 1,000 tubes.
"""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass

import psutil

from haqueue import admin_client
from haqueue.bench.load import BenchError
from haqueue.bench.servers import HOST, free_port, started


@dataclass
class ScrapeResult:
    tubes: int
    scrapes: int
    series: int
    bytes_per_scrape: int
    cpu_ms_per_scrape: float  # the scrapes' own cost: raw minus idle
    raw_cpu_ms_per_scrape: float
    idle_cpu_ms_per_scrape: float
    wall_ms_per_scrape: float

    def describe(self) -> str:
        return (f"metrics scrape: {self.tubes:,} tubes, {self.series:,} series, "
                f"{self.bytes_per_scrape / 1024:.0f} KiB, {self.scrapes} scrapes: "
                f"node CPU {self.cpu_ms_per_scrape:.2f} ms per scrape "
                f"(raw {self.raw_cpu_ms_per_scrape:.2f}, idle {self.idle_cpu_ms_per_scrape:.2f} subtracted), "
                f"{self.wall_ms_per_scrape:.2f} ms wall")


def make_tubes(host: str, port: int, tubes: int) -> None:
    """One job in each of `tubes` tubes, pipelined on one connection."""
    with socket.create_connection((host, port), timeout=30) as conn:
        conn.sendall(b"".join(b"use scrape-%d\r\nput 0 0 600 1\r\nx\r\n" % i for i in range(tubes)))
        expected, seen, buffer = 2 * tubes, 0, b""
        while seen < expected:
            chunk = conn.recv(65536)
            if not chunk:
                raise BenchError("the node closed the connection while tubes were made")
            buffer += chunk
            *lines, buffer = buffer.split(b"\r\n")
            for line in lines:
                if not (line.startswith(b"USING") or line.startswith(b"INSERTED")):
                    raise BenchError(f"unexpected reply while making tubes: {line!r}")
            seen += len(lines)


def cpu_seconds(process: psutil.Process) -> float:
    times = process.cpu_times()
    return times.user + times.system


def bench_scrape(tubes: int = 1000, scrapes: int = 200) -> ScrapeResult:
    admin = free_port()
    with started("haqueue", extra_args=("--admin", f"{HOST}:{admin}")) as server:
        make_tubes(server.host, server.port, tubes)
        process = psutil.Process(server.pid)

        def scrape() -> bytes:
            code, body = admin_client.get(HOST, admin, "/metrics", timeout=30)
            if code != 200:
                raise BenchError(f"/metrics answered {code}")
            return body

        body = b""
        for _ in range(5):  # warm up: imports, the prefix cache
            body = scrape()
        series = sum(1 for line in body.splitlines() if line and not line.startswith(b"#"))
        cpu_before, started_at = cpu_seconds(process), time.perf_counter()
        for _ in range(scrapes):
            scrape()
        wall = time.perf_counter() - started_at
        raw = cpu_seconds(process) - cpu_before
        # Idle for as long as the scrapes took: what the node spends anyway.
        idle_before = cpu_seconds(process)
        time.sleep(wall)
        idle = cpu_seconds(process) - idle_before
    return ScrapeResult(
        tubes=tubes, scrapes=scrapes, series=series, bytes_per_scrape=len(body),
        cpu_ms_per_scrape=max(0.0, raw - idle) * 1000 / scrapes,
        raw_cpu_ms_per_scrape=raw * 1000 / scrapes,
        idle_cpu_ms_per_scrape=idle * 1000 / scrapes,
        wall_ms_per_scrape=wall * 1000 / scrapes,
    )
