"""The asyncio load generator: one process's share of a bench run.

Rules:
- One reader task per connection; replies are parsed incrementally from what it
  reads (haqueue.bench.replies) and EVERY reply is checked; the first unexpected one
  fails the whole run with a `BenchError` naming it.
- Commands are written in batches: a producer keeps `window` puts in flight, and
  when k replies arrive in one read it writes k more puts with one `write`.
- Latency of a command = from the moment its bytes were handed to the socket to
  the moment its reply was parsed. Commands in one batch share a send time, and
  replies parsed from one read share a reply time (see report.Latencies).
- Time has three marks, all `time.monotonic_ns()` (one system-wide clock on Linux,
  so every process of a run shares them): `t_start`; `t0 = t_start + warmup`;
  `t1 = t0 + duration`. A command is *measured* when it was sent in [t0, t1). With
  `jobs`, only measured puts draw on the budget, so exactly `jobs` puts are measured.
  Throughput = measured replies / (time of the last measured reply - t0).
- `cycle`: producers put into the tube, consumers `reserve` and then write
  `delete <id>` and the next `reserve` together. The put's send time travels in the
  job body (16 hex digits), so the consumer measures put->delete end to end without
  any shared table. Producers keep at most `backlog` jobs put but not yet deleted
  (default window x producers): without a bound, producers that outrun consumers
  grow the queue without limit and end-to-end latency measures only the run length.
  When producers stop, consumers drain the tube; the run ends when every
  acknowledged put has been deleted, so the tube is empty again.
- `openloop`: puts at a fixed `rate` (per second, over all connections, taking
  turns), each sent when its time comes whether or not earlier ones were
  answered, so a slow server cannot slow the generator down (no coordinated
  omission). A put's latency runs from when it was *due*, not from when it was
  written: if the generator itself falls behind, that lateness counts too.
"""

from __future__ import annotations

import asyncio
import os
import re
import socket
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace

from haqueue.bench.replies import DELETED, ConsumerReplies, PutReplies, UnexpectedReply
from haqueue.bench.report import Latencies, RunResult

# CLOCK_MONOTONIC: system-wide, so send times written by one process can be
# compared with reply times read by another.
monotonic_ns = time.monotonic_ns

PUT_PRIORITY = 1024  # the priority most clients use by default
PUT_TTR = 60  # long enough that no job times out while a consumer holds it
STAMP_BYTES = 16  # hex digits of the put's send time at the start of a cycle body
READ_SIZE = 1 << 18
NEVER = 1 << 62

# protocol.txt "Names": letters, digits, - + / ; . $ _ ( ), not starting with "-";
# beanstalkd's MAX_TUBE_NAME_LEN is 201 including the terminating NUL.
_TUBE_NAME = re.compile(r"[A-Za-z0-9+/;.$_()][A-Za-z0-9\-+/;.$_()]{0,199}")

WORKLOADS = ("put", "cycle", "openloop")


class BenchError(Exception):
    """The run cannot go on; the message is one line naming the problem."""


def parse_address(text: str) -> tuple[str, int]:
    """`HOST:PORT` (or `[v6]:PORT`) -> (host, port), or BenchError."""
    host, sep, port_text = text.rpartition(":")
    if not sep or not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise BenchError(f"bad address {text!r}: expected HOST:PORT")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, int(port_text)


@dataclass(frozen=True)
class LoadSpec:
    """What to run against one address (or one process's share of it)."""

    host: str
    port: int
    workload: str = "put"
    tube: str = "bench"
    connections: int = 8  # put
    window: int = 64
    producers: int = 4  # cycle
    consumers: int = 4  # cycle
    body_size: int = 100
    duration: float | None = 5.0  # seconds measured; None: until `jobs` puts
    jobs: int | None = None  # measured puts to make; None: until `duration`
    warmup: float = 1.0
    backlog: int | None = None  # cycle: None means window x producers; 0 unbounded
    processes: int = 1
    timeout: float = 10.0  # no reply on any connection for this long fails the run
    rate: float = 2000.0  # openloop: puts per second over all connections

    @property
    def address(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    @property
    def backlog_cap(self) -> int:
        if self.workload != "cycle":
            return 0
        return self.window * self.producers if self.backlog is None else self.backlog

    def validate(self) -> None:
        if self.workload not in WORKLOADS:
            raise BenchError(f"unknown workload {self.workload!r}: expected put, cycle or openloop")
        if self.workload == "openloop" and not self.rate > 0:
            raise BenchError(f"--rate {self.rate:g}: must be more than 0 puts/s")
        if self.duration is None and self.jobs is None:
            raise BenchError("give --duration or --jobs (or both)")
        if not _TUBE_NAME.fullmatch(self.tube):
            raise BenchError(f"bad tube name {self.tube!r}: see protocol.txt, Names")
        if self.workload == "cycle" and self.body_size < STAMP_BYTES:
            raise BenchError(
                f"--body-size {self.body_size} is too small for cycle: the body carries "
                f"the put's send time in {STAMP_BYTES} bytes"
            )
        per = {"put": {"--connections": self.connections},
               "openloop": {"--connections": self.connections}}.get(
            self.workload, {"--producers": self.producers, "--consumers": self.consumers}
        )
        for name, count in per.items():
            if count < self.processes:
                raise BenchError(
                    f"{name} {count} is fewer than --processes {self.processes}: "
                    "each process needs at least one"
                )

    def shares(self) -> list[LoadSpec]:
        """Split connections (and the jobs budget) over `processes` processes.

        In `cycle`, each process gets its own tube (`TUBE-k`), so that its consumers
        drain exactly what its producers put and the process knows when it is done.
        """
        k = self.processes
        if k == 1:
            return [self]

        def part(total: int, i: int) -> int:
            return total // k + (1 if i < total % k else 0)

        def part_or_keep(total: int | None, i: int) -> int | None:
            # None (no budget / default backlog) and 0 (unbounded) mean the same per share.
            return total if not total else max(1, part(total, i))

        return [
            replace(
                self,
                processes=1,
                connections=part(self.connections, i),
                producers=part(self.producers, i),
                consumers=part(self.consumers, i),
                jobs=None if self.jobs is None else part(self.jobs, i),
                rate=self.rate * part(self.connections, i) / self.connections,
                backlog=part_or_keep(self.backlog, i),
                tube=f"{self.tube}-{i}" if self.workload == "cycle" else self.tube,
            )
            for i in range(k)
        ]


@dataclass
class ShareResult:
    """What one process measured; `merge` adds shares up into a RunResult."""

    t0: int
    last_put: int
    last_cycle: int
    measured_puts: int = 0
    measured_cycles: int = 0
    put_latency: Latencies = field(default_factory=Latencies)
    e2e_latency: Latencies = field(default_factory=Latencies)
    totals: dict[str, int] = field(default_factory=dict)


def merge(spec: LoadSpec, shares: list[ShareResult]) -> RunResult:
    result = RunResult(workload=spec.workload, address=spec.address)
    t0 = min(s.t0 for s in shares)
    for s in shares:
        result.add_measured(s)
    if result.measured_puts:
        result.put_seconds = (max(s.last_put for s in shares) - t0) / 1e9
    if result.measured_cycles:
        result.cycle_seconds = (max(s.last_cycle for s in shares) - t0) / 1e9
    return result


class _Run:
    """The state the connections of one process share while it runs."""

    def __init__(self, spec: LoadSpec, t_start: int) -> None:
        self.spec = spec
        self.window = spec.window
        self.t0 = t_start + int(spec.warmup * 1e9)
        self.t1 = NEVER if spec.duration is None else self.t0 + int(spec.duration * 1e9)
        self.budget = spec.jobs  # measured puts still to issue; None: no limit
        self.backlog_cap = spec.backlog_cap  # 0: no limit
        self.backlog = 0  # puts issued and not yet deleted
        self.blocked: list[_Producer] = []  # producers waiting for backlog room
        self.wake_room = max(1, min(spec.window, self.backlog_cap // 4))
        self.put_latency = Latencies()
        self.e2e_latency = Latencies()
        self.measured_puts = 0
        self.measured_cycles = 0
        self.last_put = self.t0
        self.last_cycle = self.t0
        self.puts = 0
        self.reserves = 0
        self.deletes = 0
        self.reserves_sent = 0
        self.producers_left = 0
        self.schedule_over = False  # openloop: no put will be due any more
        self.t_start = t_start
        self.last_activity = monotonic_ns()
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def fail(self, exc: BaseException) -> None:
        if not self.done.done():
            self.done.set_exception(exc)

    def producer_finished(self) -> None:
        self.producers_left -= 1
        self.check_done()

    def check_done(self) -> None:
        if self.producers_left == 0 and self.deletes == (
            self.puts if self.spec.workload == "cycle" else 0
        ):
            if not self.done.done():
                self.done.set_result(None)

    def on_deleted(self, count: int) -> None:
        self.deletes += count
        self.backlog -= count
        if self.blocked and self.backlog_cap - self.backlog >= self.wake_room:
            waiting, self.blocked = self.blocked, []
            for producer in waiting:
                producer.waiting_room = False
                producer.top_up()
        if self.producers_left == 0:
            self.check_done()

    def result(self) -> ShareResult:
        return ShareResult(
            t0=self.t0,
            last_put=self.last_put,
            last_cycle=self.last_cycle,
            measured_puts=self.measured_puts,
            measured_cycles=self.measured_cycles,
            put_latency=self.put_latency,
            e2e_latency=self.e2e_latency,
            totals={
                "put": self.puts,
                "reserve": self.reserves,
                "delete": self.deletes,
                "reserve_sent": self.reserves_sent,
            },
        )


class _Producer:
    """Keeps `window` puts in flight on one connection."""

    def __init__(self, run: _Run, writer: asyncio.StreamWriter) -> None:
        self.run = run
        self.writer = writer
        self.parser = PutReplies()
        self.sent: deque[list[int]] = deque()  # [send time, commands] per batch
        self.inflight = 0
        self.finished = False
        self.waiting_room = False  # listed in run.blocked
        size = run.spec.body_size
        self.header = b"put %d 0 %d %d\r\n" % (PUT_PRIORITY, PUT_TTR, size)
        self.stamped = run.spec.workload == "cycle"
        self.open_loop = run.spec.workload == "openloop"
        if self.stamped:
            self.tail = b"x" * (size - STAMP_BYTES) + b"\r\n"
        else:
            self.command = self.header + b"x" * size + b"\r\n"

    def send_due(self, due_ns: int) -> None:
        """openloop: one put, due at `due_ns`, written now whatever is in flight."""
        run = self.run
        if due_ns >= run.t0 and run.budget is not None:
            run.budget -= 1
        self.writer.write(self.command)
        self.sent.append([due_ns, 1])
        self.inflight += 1

    def top_up(self) -> None:
        """Write as many puts as the window, the budget, the backlog and the clock allow."""
        if self.finished:
            return
        run = self.run
        if self.open_loop:
            # The schedule writes; a producer only notices that it is done.
            if run.schedule_over and self.inflight == 0:
                self.finished = True
                run.producer_finished()
            return
        want = run.window - self.inflight
        if want <= 0:
            return
        now = monotonic_ns()
        final = False  # no more puts will ever be issued
        if now >= run.t1:
            want, final = 0, True
        elif now >= run.t0 and run.budget is not None:
            if run.budget <= want:
                want, final = run.budget, True
        if run.backlog_cap and want > run.backlog_cap - run.backlog:
            want, final = run.backlog_cap - run.backlog, False
            if not self.waiting_room:
                self.waiting_room = True
                run.blocked.append(self)
        if want > 0:
            if now >= run.t0 and run.budget is not None:
                run.budget -= want
            if self.stamped:
                # header/tail frame the body (peers' producers set their own, bench/peer_load.py)
                command = self.header + b"%016x" % now + self.tail
            else:
                command = self.command
            self.writer.write(command * want)
            self.sent.append([now, want])
            self.inflight += want
            run.backlog += want
        elif final and self.inflight == 0:
            self.finished = True
            run.producer_finished()

    def on_data(self, data: bytes, now: int) -> None:
        n = self.parser.feed(data)
        if not n:
            return
        if n > self.inflight:
            raise BenchError(f"{n} put replies for {self.inflight} puts in flight")
        run = self.run
        run.puts += n
        self.inflight -= n
        t0 = run.t0
        sent = self.sent
        latency = run.put_latency
        while n:
            batch = sent[0]
            ts, count = batch
            take = count if count <= n else n
            if ts >= t0:
                latency.add(now - ts, take)
                run.measured_puts += take
                run.last_put = now
            if take == count:
                sent.popleft()
            else:
                batch[1] = count - take
            n -= take
        self.top_up()


class _Consumer:
    """Reserves a job, then writes `delete <id>` together with the next `reserve`."""

    def __init__(self, run: _Run, writer: asyncio.StreamWriter) -> None:
        self.run = run
        self.writer = writer
        self.parser = ConsumerReplies()
        self.expect_reserved = True
        self.job_stamp = 0
        self.body_size = run.spec.body_size

    def start(self) -> None:
        self.writer.write(b"reserve\r\n")
        self.run.reserves_sent += 1

    def on_data(self, data: bytes, now: int) -> None:
        run = self.run
        out = []
        deleted = 0
        for event in self.parser.feed(data):
            if type(event) is tuple:
                job_id, body = event
                if not self.expect_reserved:
                    raise UnexpectedReply("delete", b"RESERVED " + job_id)
                if len(body) != self.body_size:
                    raise UnexpectedReply(
                        f"reserve (a {len(body)}-byte body, expected {self.body_size})",
                        b"RESERVED " + job_id,
                    )
                try:
                    self.job_stamp = int(body[:STAMP_BYTES], 16)
                except ValueError:
                    raise BenchError(
                        f"reserved job {job_id.decode()} was not put by this run "
                        f"(is tube {run.spec.tube!r} shared with another client?)"
                    ) from None
                out.append(b"delete " + job_id + b"\r\nreserve\r\n")
                self.expect_reserved = False
            else:
                if self.expect_reserved:
                    raise UnexpectedReply("reserve", DELETED)
                deleted += 1
                self.expect_reserved = True
                stamp = self.job_stamp
                if run.t0 <= stamp < run.t1:
                    run.e2e_latency.add(now - stamp)
                    run.measured_cycles += 1
                    run.last_cycle = now
        if out:
            self.writer.write(b"".join(out))
            run.reserves += len(out)
            run.reserves_sent += len(out)
        if deleted:
            run.on_deleted(deleted)


async def _read_loop(run: _Run, reader: asyncio.StreamReader, on_data: Callable) -> None:
    try:
        read = reader.read
        while True:
            data = await read(READ_SIZE)
            if not data:
                raise BenchError("the server closed the connection")
            now = monotonic_ns()
            run.last_activity = now
            on_data(data, now)
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # noqa: BLE001 - every failure ends the run, reported once
        run.fail(exc)


async def _watchdog(run: _Run, timeout: float) -> None:
    limit = int(timeout * 1e9)
    while True:
        await asyncio.sleep(min(0.25, timeout / 4))
        if monotonic_ns() - run.last_activity > limit:
            run.fail(BenchError(f"no reply from the server for {timeout:g} s"))
            return


async def _schedule(run: _Run, producers: list[_Producer]) -> None:
    """openloop: put k is due at t_start + k / rate, on producer k mod n."""
    interval = 1e9 / run.spec.rate
    start, n, k = run.t_start, len(producers), 0
    while True:
        now = monotonic_ns()
        due = int((now - start) / interval) + 1
        while k < due:
            at = start + int(k * interval)
            if at >= run.t1 or (run.budget is not None and run.budget <= 0 and at >= run.t0):
                run.schedule_over = True
                for p in producers:
                    p.top_up()
                return
            producers[k % n].send_due(at)
            k += 1
        # Sleep until the next put is due; the loop's timer may wake late, and
        # the puts due meanwhile then go out together, charged from when due.
        await asyncio.sleep(max(0.0, (start + int(k * interval) - monotonic_ns()) / 1e9))


async def _at_t1(run: _Run, producers: list[_Producer]) -> None:
    # Producers blocked on the backlog with nothing in flight learn here that time is up.
    if run.t1 == NEVER:
        return
    await asyncio.sleep(max(0.0, (run.t1 - monotonic_ns()) / 1e9))
    for p in producers:
        p.top_up()


class _Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    async def command(self, spec: LoadSpec, line: bytes, expect: bytes) -> None:
        """Send one setup command and require exactly one reply line."""
        self.writer.write(line)
        got = await self.read_line(spec)
        if got != expect:
            raise UnexpectedReply(line.decode().strip(), got.rstrip(b"\r\n"))

    async def read_line(self, spec: LoadSpec) -> bytes:
        try:
            got = await asyncio.wait_for(self.reader.readline(), spec.timeout)
        except TimeoutError:
            raise BenchError(f"no reply from the server for {spec.timeout:g} s") from None
        if not got:
            raise BenchError("the server closed the connection")
        return got

    def close(self) -> None:
        self.writer.close()


async def _connect(spec: LoadSpec) -> _Connection:
    try:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(spec.host, spec.port, limit=READ_SIZE), spec.timeout
        )
    except TimeoutError:
        raise BenchError("cannot connect: timed out") from None
    except OSError as exc:
        # asyncio's message repeats the address; the errno's text says what happened.
        if isinstance(exc, socket.gaierror):
            reason = exc.strerror or str(exc)
        else:
            reason = os.strerror(exc.errno) if exc.errno else str(exc)
        raise BenchError(f"cannot connect: {reason}") from None
    return _Connection(reader, writer)


async def _setup_producer(spec: LoadSpec) -> _Connection:
    conn = await _connect(spec)
    tube = spec.tube.encode()
    await conn.command(spec, b"use " + tube + b"\r\n", b"USING " + tube + b"\r\n")
    return conn


async def _setup_consumer(spec: LoadSpec) -> _Connection:
    conn = await _connect(spec)
    if spec.tube != "default":
        tube = spec.tube.encode()
        await conn.command(spec, b"watch " + tube + b"\r\n", b"WATCHING 2\r\n")
        await conn.command(spec, b"ignore default\r\n", b"WATCHING 1\r\n")
    return conn


async def _require_empty_tube(spec: LoadSpec, conn: _Connection) -> None:
    """Cycle needs an empty tube: its consumers must reserve only this run's jobs."""
    tube = spec.tube.encode()
    conn.writer.write(b"stats-tube " + tube + b"\r\n")
    line = await conn.read_line(spec)
    if line == b"NOT_FOUND\r\n":
        return
    m = re.fullmatch(rb"OK (\d+)\r\n", line)
    if m is None:
        raise UnexpectedReply("stats-tube", line.rstrip(b"\r\n"))
    try:
        text = await asyncio.wait_for(
            conn.reader.readexactly(int(m.group(1)) + 2), spec.timeout
        )
    except (TimeoutError, asyncio.IncompleteReadError):
        raise BenchError("stats-tube: incomplete reply") from None
    stats = dict(
        (k.strip(), v.strip())
        for k, _, v in (ln.partition(":") for ln in text.decode("ascii", "replace").splitlines())
    )
    queued = sum(
        int(stats.get(f"current-jobs-{state}", "0") or 0)
        for state in ("ready", "delayed", "reserved")
    )
    if queued:
        raise BenchError(
            f"tube {spec.tube!r} already holds {queued} jobs; the cycle workload needs "
            "an empty tube (choose another with --tube)"
        )


async def close_run(tasks: list, opened: list) -> None:
    """End a run: cancel its tasks, close its connections, and let the transports
    close before the loop goes away (peer_load.py ends its runs the same way)."""
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    for conn in opened:
        conn.close()
    await asyncio.sleep(0)


async def run_share(
    spec: LoadSpec, ready: Callable[[], Awaitable[int]] | None = None
) -> ShareResult:
    """Run one process's share; `ready()` (when given) says so and returns t_start."""
    try:
        return await _run_share(spec, ready)
    except UnexpectedReply as exc:
        raise BenchError(f"{spec.address}: {exc}") from None
    except BenchError as exc:
        raise BenchError(f"{spec.address}: {exc}") from None


async def _run_share(spec: LoadSpec, ready: Callable[[], Awaitable[int]] | None) -> ShareResult:
    cycle = spec.workload == "cycle"
    n_producers = spec.producers if cycle else spec.connections
    n_consumers = spec.consumers if cycle else 0
    opened: list[_Connection] = []
    tasks: list[asyncio.Task] = []

    # keep() makes the setup coroutine itself: one made here and handed over would
    # never be awaited if the run were cancelled before keep's task started.
    async def keep(setup: Callable[[LoadSpec], Awaitable[_Connection]]) -> _Connection:
        conn = await setup(spec)
        opened.append(conn)
        return conn

    try:
        producer_conns = await asyncio.gather(
            *(keep(_setup_producer) for _ in range(n_producers))
        )
        consumer_conns = await asyncio.gather(
            *(keep(_setup_consumer) for _ in range(n_consumers))
        )
        if cycle:
            await _require_empty_tube(spec, producer_conns[0])
        t_start = await ready() if ready is not None else monotonic_ns()
        run = _Run(spec, t_start)
        producers = [_Producer(run, c.writer) for c in producer_conns]
        consumers = [_Consumer(run, c.writer) for c in consumer_conns]
        run.producers_left = len(producers)
        for conn, role in zip(producer_conns + consumer_conns, producers + consumers):
            tasks.append(asyncio.create_task(_read_loop(run, conn.reader, role.on_data)))
        tasks.append(asyncio.create_task(_watchdog(run, spec.timeout)))
        if spec.workload == "openloop":
            tasks.append(asyncio.create_task(_schedule(run, producers)))
        else:
            tasks.append(asyncio.create_task(_at_t1(run, producers)))
        for consumer in consumers:
            consumer.start()
        for producer in producers:
            producer.top_up()
        await run.done
        return run.result()
    finally:
        await close_run(tasks, opened)
