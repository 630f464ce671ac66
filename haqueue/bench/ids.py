"""`haqueue bench ids`: the id service under closed-loop UDP clients, on a real three-node cluster.

What users feel: each client sends one `get`, waits for the reply, sends the
next (id_server's client, and the seed's published figure: 4 PHP processes,
~10,000 ids/s at 0.39 ms). The cluster is three `haqueue serve` nodes on
loopback (haqueue/local_cluster.py), durable (`-f 0`: fsync before every
reply), with the id service on; clients ask the leader's address.

Two runs, one per mode (docs/id-service.md "Speed"):
- segment: a rule in segment mode (blocks of 1,000 committed ahead, served
  from the leader's memory), 4 clients;
- exact: the built-in `counter` rule, one committed reservation per id,
  64 clients (group commit shares entries between them).

Clients run in `processes` worker processes, each a select loop over its
share of connect()ed UDP sockets, one request outstanding per socket. A
request without a reply within `RETRY_AFTER` is sent again (UDP may drop;
an outcome-unknown reservation is silent by design) and counted. Every id
is checked: one repeated across the run ends it with an error.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import select
import socket
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from haqueue.bench.load import BenchError

RETRY_AFTER = 1.0
LEADER_TIMEOUT = 30.0
SEGMENT_RULE = """
[[id_rules]]
name = "bench_segment"
format = "{counter:019}"
mode = "segment"
segment = 1000
"""
RULES = {"segment": "bench_segment", "exact": "counter"}
DEFAULT_CLIENTS = {"segment": 4, "exact": 64}


@dataclass
class IdRun:
    mode: str
    clients: int
    processes: int
    nodes: int
    durable: bool
    seconds: float
    ids: int
    retries: int
    latencies_ms: list[float]

    @property
    def rate(self) -> float:
        return self.ids / self.seconds if self.seconds else 0.0

    def percentile(self, p: float) -> float:
        values = self.latencies_ms
        if not values:
            return 0.0
        return values[min(len(values) - 1, int(p / 100 * len(values)))]

    def describe(self) -> str:
        durability = "durable (-f 0)" if self.durable else "in memory"
        head = (f"ids {self.mode}: {self.rate:,.0f} ids/s  {self.clients} closed-loop UDP clients in "
                f"{self.processes} process(es), {self.nodes} nodes {durability}, {self.seconds:.1f} s, "
                f"{self.ids:,} ids, {self.retries} retries")
        mean = sum(self.latencies_ms) / len(self.latencies_ms) if self.latencies_ms else 0.0
        tail = "  latency ms: " + "  ".join(
            f"p{p:g} {self.percentile(p):.3f}" for p in (50, 90, 99, 99.9)) + \
            f"  max {self.latencies_ms[-1] if self.latencies_ms else 0:.3f}  mean {mean:.3f}"
        return head + "\n" + tail


def _client_worker(address: tuple[str, int], rule: str, sockets: int, warmup: float, duration: float,
                   results) -> None:
    """One process: `sockets` closed-loop clients; puts (ids, latencies, retries) on `results`."""
    request = json.dumps({"action": "get", "rule_name": rule, "app_name": "bench"}).encode()
    socks = []
    for _ in range(sockets):
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.setblocking(False)
        sock.connect(address)
        socks.append(sock)
    sent_at = {}
    by_fd = {s.fileno(): s for s in socks}
    now = time.perf_counter()
    for sock in socks:
        sock.send(request)
        sent_at[sock.fileno()] = now
    start = now + warmup
    end = start + duration
    ids: list[str] = []
    latencies: list[float] = []
    retries = 0
    poller = select.epoll()
    for fd in by_fd:
        poller.register(fd, select.EPOLLIN)
    try:
        while True:
            events = poller.poll(0.1)
            now = time.perf_counter()
            if now >= end:
                break
            for fd, _ in events:
                sock = by_fd[fd]
                try:
                    reply = sock.recv(512)
                except (BlockingIOError, ConnectionRefusedError):
                    continue
                body = json.loads(reply)
                if body.get("code") != 0:
                    raise RuntimeError(f"unexpected reply: {reply[:200]!r}")
                if sent_at[fd] >= start:
                    ids.append(body["data"])
                    latencies.append((now - sent_at[fd]) * 1000)
                sock.send(request)
                sent_at[fd] = time.perf_counter()
            for fd, at in sent_at.items():
                if now - at > RETRY_AFTER:
                    retries += 1
                    by_fd[fd].send(request)
                    sent_at[fd] = now
        results.put((ids, latencies, retries, None))
    except Exception as exc:  # reported by the parent as one line
        results.put(([], [], retries, f"{type(exc).__name__}: {exc}"))
    finally:
        poller.close()
        for sock in socks:
            sock.close()


def run_clients(address: tuple[str, int], rule: str, clients: int, processes: int, warmup: float,
                duration: float) -> tuple[list[str], list[float], int]:
    """Closed-loop UDP clients against `address`: every id, every latency (ms), retries."""
    context = multiprocessing.get_context("fork")
    results = context.Queue()
    shares = [clients // processes + (1 if i < clients % processes else 0) for i in range(processes)]
    workers = [context.Process(target=_client_worker, args=(address, rule, n, warmup, duration, results))
               for n in shares if n]
    for worker in workers:
        worker.start()
    ids: list[str] = []
    latencies: list[float] = []
    retries = 0
    try:
        for _ in workers:
            got_ids, got_latencies, got_retries, error = results.get(timeout=warmup + duration + 60)
            if error:
                raise BenchError(f"bench ids: a client failed: {error}")
            ids += got_ids
            latencies += got_latencies
            retries += got_retries
    finally:
        for worker in workers:
            worker.join(timeout=10)
            if worker.is_alive():
                worker.kill()
    return ids, latencies, retries


def bench_ids(modes: list[str], clients: int | None, processes: int | None, warmup: float, duration: float,
              durable: bool = True, nodes: int = 3) -> list[IdRun]:
    """Start a cluster with the id service, run each mode's clients against its leader, stop it."""
    from haqueue.local_cluster import LocalCluster

    runs = []
    with tempfile.TemporaryDirectory(prefix="haqueue-bench-ids-") as workdir:
        probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        probe.bind(("127.0.0.1", 0))
        id_port = probe.getsockname()[1]
        probe.close()
        serve_args = ["-f", "0"] if durable else ["-F"]
        cluster = LocalCluster.create(Path(workdir), nodes=nodes, serve_args=serve_args + ["--id-port", str(id_port),
                                                                                          "--id-rate-limit", "0"])
        with open(cluster.config_path, "a") as file:
            file.write(SEGMENT_RULE)
        try:
            cluster.start()
            leader = cluster.leader(timeout=LEADER_TIMEOUT)
            if leader is None:
                tails = "; ".join(f"{n}: {cluster.log_tail(n, 1)}" for n in sorted(cluster.nodes))
                raise BenchError(f"bench ids: no leader within {LEADER_TIMEOUT:g} s ({tails})")
            for mode in modes:
                count = clients or DEFAULT_CLIENTS[mode]
                procs = processes or min(count, max(1, os.cpu_count() or 1), 4)
                ids, latencies, retries = run_clients((leader.address, id_port), RULES[mode], count, procs,
                                                      warmup, duration)
                if len(set(ids)) != len(ids):
                    raise BenchError(f"bench ids: {mode} mode issued {len(ids) - len(set(ids))} id(s) twice")
                latencies.sort()
                runs.append(IdRun(mode, count, procs, nodes, durable, duration, len(ids), retries, latencies))
        finally:
            cluster.stop()
    return runs
