"""`haqueue bench gearman`: Gearman workloads against gearmand and haqueue, in the same run.

Owns the two Gearman workloads, with synchronous clients as users run them
(one request, wait for its answer, the next):
- submit: connections each submitting background jobs (SUBMIT_JOB_BG ->
  JOB_CREATED); jobs/s and the latency of each acknowledgement;
- cycle: producers submitting background jobs and workers running them the
  way a worker library does (GRAB_JOB -> JOB_ASSIGN -> WORK_COMPLETE with the
  next GRAB_JOB behind it, PRE_SLEEP -> NOOP when idle); completed jobs/s.
  Producers stay at most `backlog` jobs ahead of the workers.

and the servers, each started on free loopback ports and stopped by PID on
every way out: real gearmand with its in-memory queue (the issue's yardstick,
which keeps nothing across a crash), gearmand with its persistent libsqlite3
queue (where Debian's build has it: every background job stored in SQLite,
two fdatasyncs, before JOB_CREATED; the durable peer), and a haqueue cluster
started here (three nodes on loopback by default, durable: each acknowledgement
after a majority fsynced, -f0) or a single node. Every reply is checked; an
unexpected one ends the run with a BenchError.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from haqueue.bench.load import BenchError
from haqueue.bench.servers import HOST, free_port, stop_process
from haqueue.protocol.gearman import HEADER, TYPES, request

WORKLOADS = ("submit", "cycle")
_JOB_CREATED, _NO_JOB, _NOOP, _JOB_ASSIGN = (TYPES[n] for n in ("JOB_CREATED", "NO_JOB", "NOOP", "JOB_ASSIGN"))


@dataclass
class GearmanResult:
    server: str
    workload: str
    jobs: int
    seconds: float
    latencies_ms: list[float] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return self.jobs / self.seconds if self.seconds else 0.0

    def percentile(self, p: float) -> float:
        if not self.latencies_ms:
            return 0.0
        ordered = sorted(self.latencies_ms)
        return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]

    def to_json(self) -> dict:
        return {"server": self.server, "workload": self.workload, "jobs": self.jobs, "seconds": self.seconds,
                "rate": self.rate, "p50_ms": self.percentile(50), "p99_ms": self.percentile(99)}


class _Conn:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, timeout: float) -> None:
        self.reader, self.writer, self.timeout = reader, writer, timeout

    async def packet(self) -> tuple[int, bytes]:
        try:
            header = await asyncio.wait_for(self.reader.readexactly(HEADER.size), self.timeout)
            _, type_, size = HEADER.unpack(header)
            data = await asyncio.wait_for(self.reader.readexactly(size), self.timeout) if size else b""
        except asyncio.TimeoutError:
            raise BenchError(f"the server sent nothing for {self.timeout:g} s") from None
        except asyncio.IncompleteReadError:
            raise BenchError("the server closed a connection") from None
        return type_, data

    def close(self) -> None:
        self.writer.close()


async def _connect(address: tuple[str, int], timeout: float) -> _Conn:
    reader, writer = await asyncio.open_connection(*address)
    return _Conn(reader, writer, timeout)


def _expect(type_: int, data: bytes, wanted: int) -> None:
    if type_ != wanted:
        raise BenchError(f"unexpected Gearman reply type {type_}: {data[:80]!r}")


async def run_workload(address: tuple[str, int], workload: str, connections: int, workers: int, body_size: int,
                       duration: float, warmup: float, backlog: int, timeout: float,
                       server: str) -> GearmanResult:
    function = b"bench-%d" % os.getpid() + os.urandom(4).hex().encode()
    body = b"x" * body_size
    submit = request("SUBMIT_JOB_BG", function, b"", body)
    start = time.monotonic()
    measure_from, stop_at = start + warmup, start + warmup + duration
    counted = [0]
    latencies: list[float] = []
    state = {"submitted": 0, "completed": 0}
    room = asyncio.Event()
    room.set()

    async def producer() -> None:
        conn = await _connect(address, timeout)
        try:
            while time.monotonic() < stop_at:
                if workload == "cycle" and state["submitted"] - state["completed"] >= backlog:
                    room.clear()
                    await asyncio.wait_for(room.wait(), timeout)
                    continue
                sent = time.monotonic()
                conn.writer.write(submit)
                state["submitted"] += 1
                _expect(*await conn.packet(), _JOB_CREATED)
                done = time.monotonic()
                if workload == "submit" and done >= measure_from and done < stop_at:
                    counted[0] += 1
                    latencies.append((done - sent) * 1000)
        finally:
            conn.close()

    async def worker() -> None:
        conn = await _connect(address, timeout)
        grab = request("GRAB_JOB")
        try:
            conn.writer.write(request("CAN_DO", function) + grab)
            assigned_at = None
            while time.monotonic() < stop_at:
                type_, data = await conn.packet()
                if type_ == _NO_JOB:
                    conn.writer.write(request("PRE_SLEEP"))
                    while True:  # a NOOP, or the end of the run
                        try:
                            type_, data = await asyncio.wait_for(conn.packet(), max(0.01, stop_at - time.monotonic()))
                        except asyncio.TimeoutError:
                            return
                        if type_ == _NOOP:
                            break
                    conn.writer.write(grab)
                    continue
                if type_ == _NOOP:
                    continue  # a wake-up that crossed our GRAB_JOB
                _expect(type_, data, _JOB_ASSIGN)
                handle = data.split(b"\0", 1)[0]
                now = time.monotonic()
                conn.writer.write(request("WORK_COMPLETE", handle, b"") + grab)
                state["completed"] += 1
                room.set()
                if measure_from <= now < stop_at:
                    counted[0] += 1
                    if assigned_at is not None:
                        latencies.append((now - assigned_at) * 1000)
                assigned_at = now
        finally:
            conn.close()

    tasks = [producer() for _ in range(connections)]
    if workload == "cycle":
        tasks += [worker() for _ in range(workers)]
    await asyncio.gather(*tasks)
    return GearmanResult(server, workload, counted[0], duration, latencies)


# ------------------------------------------------------------------ servers
def gearmand_path() -> str:
    found = shutil.which("gearmand") or ("/usr/sbin/gearmand" if os.access("/usr/sbin/gearmand", os.X_OK) else None)
    if found is None:
        raise BenchError("gearmand is not installed (apt-get install gearman-job-server)")
    return found


def _wait_serving(address: tuple[str, int], what: str, proc: subprocess.Popen | None = None,
                  limit: float = 30.0) -> None:
    """Until an ECHO_REQ is answered at address (BenchError after `limit`, or if proc exits)."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise BenchError(f"{what} exited with status {proc.returncode} before serving Gearman")
        try:
            with socket.create_connection(address, timeout=0.5) as sock:
                sock.sendall(request("ECHO_REQ", b"ready"))
                sock.settimeout(2)
                if sock.recv(64):
                    return
        except OSError:
            pass
        time.sleep(0.05)
    raise BenchError(f"{what} did not serve Gearman on {address[0]}:{address[1]} within {limit:g} s")


def _spawn(argv: list[str]) -> subprocess.Popen:
    return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)


GEARMAND_MEMORY, GEARMAND_SQLITE = "gearmand (memory)", "gearmand (sqlite)"


def gearmand_has_sqlite_queue() -> bool:
    """Whether this gearmand was built with its libsqlite3 persistent queue (Debian's is)."""
    try:
        shown = subprocess.run([gearmand_path(), "--help"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return "--libsqlite3-db" in shown.stdout


@contextmanager
def gearmand_started(queue_db: str | None = None) -> Iterator[tuple[str, int]]:
    """gearmand on a free loopback port: its in-memory queue, or with `queue_db` its
    libsqlite3 queue in that file (a background job is stored before JOB_CREATED, and
    a gearmand started on the same file runs the jobs left in it)."""
    port = free_port()
    queue = ["--queue-type=builtin"] if queue_db is None else ["--queue-type=libsqlite3",
                                                               f"--libsqlite3-db={queue_db}"]
    proc = _spawn([gearmand_path(), "-L", HOST, "-p", str(port), "--log-file=none", *queue])
    try:
        _wait_serving((HOST, port), "gearmand", proc)
        yield (HOST, port)
    finally:
        stop_process(proc)


@contextmanager
def gearmand_durable_started() -> Iterator[tuple[str, int]]:
    """gearmand with its libsqlite3 queue in a fresh file, removed afterwards."""
    workdir = tempfile.mkdtemp(prefix="haqueue-bench-gearmand-")
    try:
        with gearmand_started(os.path.join(workdir, "queue.sqlite")) as address:
            yield address
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


@contextmanager
def haqueue_started(nodes: int) -> Iterator[tuple[str, int]]:
    """A durable haqueue (-f0) of `nodes` nodes serving Gearman; yields the leader's address."""
    workdir = Path(tempfile.mkdtemp(prefix="haqueue-bench-gearman-"))
    try:
        if nodes == 1:
            port, beanstalk_port = free_port(), free_port()
            proc = _spawn([sys.executable, "-m", "haqueue", "serve", "-l", HOST, "-p", str(beanstalk_port),
                           "--gearman-port", str(port), "-b", str(workdir), "-f0"])
            try:
                _wait_serving((HOST, port), "haqueue", proc)
                yield (HOST, port)
            finally:
                stop_process(proc)
            return
        from haqueue.local_cluster import LOOPBACK_BASE, LocalCluster, free_port_on_all

        addresses = [f"127.0.0.{LOOPBACK_BASE + i}" for i in range(nodes)]
        port = free_port_on_all(addresses, 24730)
        cluster = LocalCluster.create(workdir, nodes=nodes, serve_args=["-f0", "--gearman-port", str(port)],
                                      client_port=free_port_on_all(addresses, 21300))
        try:
            cluster.start()
            leader = cluster.leader(timeout=30)
            if leader is None:
                raise BenchError(f"the {nodes}-node haqueue cluster elected no leader within 30 s")
            _wait_serving((leader.address, port), f"the haqueue leader {leader.id}")
            yield (leader.address, port)
        finally:
            cluster.stop()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def bench_gearman(workload: str, nodes: int = 3, connections: int = 8, workers: int = 4, body_size: int = 100,
                  duration: float = 5.0, warmup: float = 1.0, backlog: int = 256, timeout: float = 10.0,
                  repeat: int = 1) -> list[GearmanResult]:
    """gearmand in memory, gearmand with its SQLite queue (if built with it), then haqueue,
    taking turns `repeat` times; one result per run."""
    if workload not in WORKLOADS:
        raise BenchError(f"unknown Gearman workload {workload!r}: expected one of {', '.join(WORKLOADS)}")
    haqueue_name = f"haqueue {nodes}-node -f0" if nodes > 1 else "haqueue 1-node -f0"
    servers = [(GEARMAND_MEMORY, gearmand_started)]
    if gearmand_has_sqlite_queue():
        servers.append((GEARMAND_SQLITE, gearmand_durable_started))
    servers.append((haqueue_name, lambda: haqueue_started(nodes)))
    results = []
    for _ in range(repeat):
        for name, start in servers:
            with start() as address:
                results.append(asyncio.run(run_workload(address, workload, connections, workers, body_size,
                                                        duration, warmup, backlog, timeout, name)))
    return results


def format_gearman(results: list[GearmanResult]) -> str:
    lines = [f"{'server':<24} {'workload':<8} {'jobs/s':>10} {'p50 ms':>8} {'p99 ms':>8}"]
    for r in results:
        lines.append(f"{r.server:<24} {r.workload:<8} {r.rate:>10.0f} {r.percentile(50):>8.2f} "
                     f"{r.percentile(99):>8.2f}")
    by_server: dict[str, list[float]] = {}
    for r in results:
        by_server.setdefault(r.server, []).append(r.rate)
    rates = {name: sum(v) / len(v) for name, v in by_server.items()}
    names = list(rates)
    haqueue = names[-1] if names else None
    for peer in names[:-1]:  # haqueue, the last server, against each gearmand
        if rates[peer]:
            lines.append(f"ratio {haqueue} / {peer}: {rates[haqueue] / rates[peer]:.2f}x")
    return "\n".join(lines)
