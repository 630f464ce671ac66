"""`haqueue bench peers`: haqueue's 3-node cluster against the replicated queues a user
would otherwise run, in one sitting, one table.

Rules:
- Systems run one after another, each started fresh by bench, measured on the
  three workloads, and stopped by PID before the next starts: haqueue 3 nodes
  `-f0` and `-f 50` (`haqueue serve` under a LocalCluster on 127.0.0.11-13),
  RabbitMQ 3 nodes with a quorum queue, NATS 3 servers with a JetStream R3 file
  stream (bench/peer_servers.py starts those; bench/peer_load.py speaks to them).
- Every system's servers run on the CPUs of servers.SERVER_CPUS (CPU 0 by
  default) and the load, this one process, on the others, so each system gets
  the same core and the load never competes with it.
- The workloads are the issue's: cycle (4 producers + 4 workers, window 1: all
  synchronous), put (8 connections x window 64), open loop (2,000 puts/s over 8
  connections, latency from when each put was due). Each gets a tube, queue or
  stream of its own.
- Beside each figure: the load process's CPU over the run — connections, warmup,
  measured time and drain; a peer's queue or stream set up and deleted outside it —
  (a load at 100 % of its core would be measuring itself, not the servers) and the
  servers' CPU over the same window (all the system's processes, as % of one core; at
  100 % the servers' core is the limit).
- Ratios are haqueue's against the peer the issue pairs it with: `-f0` (fsync
  before each acknowledgement) with RabbitMQ's quorum queue (fdatasync before each
  confirm), `-f 50` (group commit every 50 ms) with NATS (no fsync before its
  PubAck). Above 1 means haqueue is ahead: rate / rate, or the peer's p99 over
  haqueue's for the open loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import psutil

from haqueue.bench import peer_servers, servers
from haqueue.bench.load import BenchError, LoadSpec, merge
from haqueue.bench.report import RunResult
from haqueue.bench.runner import run as run_haqueue

WORKLOADS = ("cycle", "put", "openloop")
SYSTEMS = ("haqueue-f0", "haqueue-f50", "rabbitmq", "nats")
# The pairs the targets compare: both sync each acknowledgement / neither does.
PAIRS = (("haqueue-f0", "rabbitmq"), ("haqueue-f50", "nats"))
LEADER_TIMEOUT = 30.0


def workload_spec(workload: str, duration: float, warmup: float, timeout: float, body_size: int = 100) -> LoadSpec:
    base = LoadSpec(host=servers.HOST, port=0, workload=workload, duration=duration, warmup=warmup,
                    timeout=timeout, body_size=body_size, tube=f"peers-{workload}")
    if workload == "cycle":
        return replace(base, producers=4, consumers=4, window=1)
    if workload == "put":
        return replace(base, connections=8, window=64)
    return replace(base, connections=8, rate=2000.0)


@dataclass
class PeerRun:
    """One workload on one system, with the CPU the load and the servers spent on it."""

    system: str
    result: RunResult
    client_cpu: float  # the load process, % of one core over the run
    server_cpu: float  # all the system's server processes, % of one core over the run

    @property
    def server_us_per_job(self) -> float | None:
        """The servers' CPU per job (cycle: a put, its reserve and its delete; otherwise a
        put), in microseconds: issue 24's CPU per replicated command, under this load."""
        rate = self.result.jobs_per_s
        return self.server_cpu / 100 / rate * 1e6 if rate else None

    def to_json(self) -> dict:
        us = self.server_us_per_job
        return {"system": self.system, "workload": self.result.workload, "client_cpu_percent": round(self.client_cpu, 1),
                "server_cpu_percent": round(self.server_cpu, 1),
                "server_cpu_us_per_job": None if us is None else round(us, 1), **self.result.to_json()}


@dataclass
class Sitting:
    runs: dict[tuple[str, str], PeerRun] = field(default_factory=dict)  # (system, workload)
    labels: dict[str, str] = field(default_factory=dict)
    # (system, workload or "start") -> the one-line error that ended it; the sitting goes on
    errors: dict[tuple[str, str], str] = field(default_factory=dict)


def _version(cmd: list[str]) -> str:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return out.split()[-1].lstrip("v") if out else ""


def system_label(system: str) -> str:
    if system == "haqueue-f0":
        return "haqueue 3 nodes -f0"
    if system == "haqueue-f50":
        return "haqueue 3 nodes -f 50"
    if system == "rabbitmq":
        v = _version(["dpkg-query", "-W", "-f", "${Version}", "rabbitmq-server"]).split("-")[0]
        return f"RabbitMQ {v} quorum queue, 3 nodes".replace("  ", " ")
    v = _version([peer_servers.nats_path() or "nats-server", "--version"])
    return f"NATS {v} JetStream R3, 3 servers".replace("  ", " ")


def _cpu_seconds(pids: list[int]) -> float:
    """CPU time so far of these processes and their descendants (RabbitMQ's VM is a child)."""
    total = 0.0
    for pid in pids:
        try:
            proc = psutil.Process(pid)
            family = [proc, *proc.children(recursive=True)]
        except psutil.Error:
            continue
        for p in family:
            try:
                t = p.cpu_times()
                total += t.user + t.system
            except psutil.Error:
                pass
    return total


@contextlib.contextmanager
def _haqueue_cluster(fsync_ms: int) -> Iterator[tuple[tuple[str, int], list[int]]]:
    """A 3-node haqueue cluster on loopback under the server CPUs; yields the leader's
    client address and the nodes' PIDs."""
    from haqueue.local_cluster import LocalCluster

    workdir = Path(tempfile.mkdtemp(prefix="haqueue-bench-peers-"))
    cluster = LocalCluster.create(workdir, nodes=3, serve_args=["-f", str(fsync_ms)])
    if servers.SERVER_CPUS is not None:
        prefix = ["taskset", "-c", ",".join(map(str, sorted(servers.SERVER_CPUS)))]
        cluster.launch_prefix = {m.id: prefix for m in cluster.spec.nodes}
    try:
        cluster.start()
        leader = cluster.leader(timeout=LEADER_TIMEOUT)
        if leader is None:
            tails = "; ".join(f"{n}: {cluster.log_tail(n, 1)}" for n in cluster.nodes)
            raise BenchError(f"the 3-node haqueue cluster elected no leader within {LEADER_TIMEOUT:g} s ({tails})")
        pids = [n.process.pid for n in cluster.nodes.values() if n.process is not None]
        yield (leader.address, leader.client_port), pids
    finally:
        cluster.stop()
        shutil.rmtree(workdir, ignore_errors=True)


class CpuWindow:
    """CPU spent by this process (the load) and by the servers' PIDs between start and stop."""

    def __init__(self, pids: list[int]) -> None:
        self.pids = pids
        self.marks: dict[str, tuple[float, float, float]] = {}

    def __call__(self, mark: str) -> None:
        self.marks[mark] = (time.monotonic(), time.process_time(), _cpu_seconds(self.pids))

    def percents(self) -> tuple[float, float]:
        """(load, servers), each as % of one core over the window."""
        (w0, c0, s0), (w1, c1, s1) = self.marks["start"], self.marks["stop"]
        wall = max(w1 - w0, 1e-9)
        return 100 * (c1 - c0) / wall, 100 * (s1 - s0) / wall


Runner = Callable[[LoadSpec, CpuWindow], RunResult]


@contextlib.contextmanager
def _started(system: str) -> Iterator[tuple[Runner, list[int]]]:
    """The system, started; yields how to run a spec against it and its server PIDs."""
    if system.startswith("haqueue"):
        with _haqueue_cluster(0 if system == "haqueue-f0" else 50) as ((host, port), pids):
            def run_cluster(spec: LoadSpec, window: CpuWindow) -> RunResult:
                window("start")
                try:
                    return run_haqueue(replace(spec, host=host, port=port))
                finally:
                    window("stop")
            yield run_cluster, pids
        return
    from haqueue.bench.peer_load import run_peer

    start = peer_servers.rabbitmq_cluster if system == "rabbitmq" else peer_servers.nats_cluster
    with start() as peer:
        def run(spec: LoadSpec, window: CpuWindow) -> RunResult:
            spec = replace(spec, host=servers.HOST, port=peer.ports[0])
            return merge(spec, [asyncio.run(run_peer(system, peer.ports, spec, window))])
        yield run, peer.pids


def check_installed(systems: list[str]) -> None:
    if "rabbitmq" in systems and not peer_servers.rabbitmq_installed():
        raise BenchError("bench peers: RabbitMQ is not installed (apt-get install rabbitmq-server; scripts/setup does)")
    if "nats" in systems and peer_servers.nats_path() is None:
        raise BenchError("bench peers: nats-server is not installed (apt-get install nats-server; scripts/setup does)")


def bench_peers(systems: list[str], duration: float, warmup: float, timeout: float,
                on_step: Callable[[str], None] = lambda _: None) -> Sitting:
    """Every system in turn, the three workloads on each; the figures of one sitting."""
    check_installed(systems)
    sitting = Sitting()
    # A failed run is reported once, as its error; asyncio's warning for every write to the
    # connection that failed would bury the table.
    quiet = logging.getLogger("asyncio")
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        _sit(sitting, systems, duration, warmup, timeout, on_step)
    finally:
        quiet.setLevel(level)
    return sitting


def _sit(sitting: Sitting, systems: list[str], duration: float, warmup: float, timeout: float,
         on_step: Callable[[str], None]) -> None:
    for system in systems:
        sitting.labels[system] = system_label(system)
        on_step(f"starting {sitting.labels[system]}")
        # A run that fails (a leader lost under a busy machine's load, a peer that will not
        # start) is reported in its cell and below the table; the other systems still run.
        try:
            with _started(system) as (run, pids):
                for workload in WORKLOADS:
                    on_step(f"{sitting.labels[system]}: {workload}")
                    spec = workload_spec(workload, duration, warmup, timeout)
                    window = CpuWindow(pids)
                    try:
                        result = run(spec, window)
                    except BenchError as exc:
                        sitting.errors[(system, workload)] = str(exc)
                        continue
                    result.server = sitting.labels[system]
                    client_cpu, server_cpu = window.percents()
                    sitting.runs[(system, workload)] = PeerRun(system, result, client_cpu, server_cpu)
        except BenchError as exc:
            sitting.errors[(system, "start")] = str(exc)


# ------------------------------------------------------------------ the table
def _figure(run: PeerRun | None, workload: str, failed: bool) -> str:
    if run is None:
        return "failed (below)" if failed else ""
    r = run.result
    if workload == "openloop":
        s = r.put_latency.summary()
        figure = f"{s['p50']:.1f} / {s['p99']:.1f} ms" if s else "no puts"
    else:
        figure = f"{r.jobs_per_s:,.0f}"
    us = run.server_us_per_job
    per_job = "" if us is None else f", {us:,.0f} us/job"
    return f"{figure} (load {run.client_cpu:.0f} %, servers {run.server_cpu:.0f} %{per_job})"


def _ratio(a: PeerRun | None, b: PeerRun | None, workload: str) -> str:
    if a is None or b is None:
        return ""
    if workload == "openloop":
        sa, sb = a.result.put_latency.summary(), b.result.put_latency.summary()
        if not sa or not sb or not sa["p99"]:
            return ""
        return f"{sb['p99'] / sa['p99']:.2f}x (p99)"
    if not b.result.jobs_per_s:
        return ""
    return f"{a.result.jobs_per_s / b.result.jobs_per_s:.2f}x"


ROW_NAMES = {
    "cycle": "cycle: 4 producers + 4 sync workers, jobs/s",
    "put": "put: 8 connections x 64 in flight, puts/s",
    "openloop": "open loop 2,000 puts/s over 8 connections, p50 / p99",
}


def format_sitting(sitting: Sitting, systems: list[str], headline: str) -> str:
    pairs = [(h, p) for h, p in PAIRS if h in systems and p in systems]
    header = ["workload", *(sitting.labels[s] for s in systems),
              *(f"{sitting.labels[h].replace('haqueue 3 nodes ', 'haqueue ')} / {sitting.labels[p].split()[0]}"
                for h, p in pairs)]
    rows = [header]
    for w in WORKLOADS:
        rows.append([ROW_NAMES[w], *(_figure(sitting.runs.get((s, w)), w,
                                             (s, w) in sitting.errors or (s, "start") in sitting.errors)
                                     for s in systems),
                     *(_ratio(sitting.runs.get((h, w)), sitting.runs.get((p, w)), w) for h, p in pairs)])
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = [headline]
    for i, row in enumerate(rows):
        lines.append(" | ".join(cell.ljust(widths[j]) for j, cell in enumerate(row)).rstrip())
        if i == 0:
            lines.append("-+-".join("-" * w for w in widths))
    lines.append("load = the load process's CPU, servers = all the system's server processes' CPU, "
                 "each as % of one core over the run; us/job = the servers' CPU per job (cycle: its put, "
                 "reserve and delete; otherwise its put); ratio > 1: haqueue ahead (rate / rate; "
                 "open loop: the peer's p99 / haqueue's)")
    for (system, what), message in sitting.errors.items():
        lines.append(f"failed: {sitting.labels[system]}, {'start-up' if what == 'start' else what}: {message}")
    return "\n".join(lines)


def sitting_json(sitting: Sitting, systems: list[str], settings: dict) -> dict:
    return {"settings": settings, "systems": {s: sitting.labels[s] for s in systems},
            "runs": [run.to_json() for (s, w), run in sitting.runs.items()],
            "errors": [{"system": s, "workload": w, "error": e} for (s, w), e in sitting.errors.items()]}


def default_server_cpus() -> set[int] | None:
    """CPU 0 for the servers when the machine has another for the load; else no pinning."""
    mine = os.sched_getaffinity(0)
    return {min(mine)} if len(mine) > 1 else None
