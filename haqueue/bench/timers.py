"""The timer-precision benchmark: how late (or early) a server's timers fire, as a client sees it.

Every timer beanstalkd keeps is exercised through the protocol, in lanes that run side by
side (each lane has its own tube and three connections, and starts at a random offset in
its first second so that expiries do not all land together):

  reserve-with-timeout  `reserve-with-timeout 1` on an empty tube answers TIMED_OUT
  delay                 `put` with delay 1, then a waiting `reserve` gets the job
  deadline-soon         a job reserved with ttr 2; the next `reserve` answers DEADLINE_SOON
                        when 1 s of its time-to-run is left (then the job is deleted)
  time-to-run           a job reserved with ttr 1 by an idle connection: when the
                        reservation expires, a waiting reserve on another connection gets it
  pause-tube            a ready job in a tube paused for 1 s: a waiting reserve gets it

Lateness = (reply arrived - command sent) - the asked time, so it includes one loopback
round trip; a negative lateness is a timer that fired early by more than that, which is
a bug (client suites assert "at least the asked time"). Times are taken with
time.monotonic() in data_received, before any task switch. Every reply is checked; an
unexpected one ends the run with a BenchError.
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass, field

from haqueue.bench.load import BenchError

KINDS = ("reserve-with-timeout", "delay", "deadline-soon", "time-to-run", "pause-tube")
TIMERS_PER_ROUND = len(KINDS)
DEFAULT_LANES = 50
NUDGE_AFTER = 0.05
NUDGE_EVERY = 0.01
REPLY_TIMEOUT = 10.0  # the longest timer is 2 s: anything near this is a hung server


@dataclass
class TimerResult:
    """Lateness samples (seconds) per kind, for one server."""

    server: str
    address: str
    samples: dict[str, list[float]] = field(default_factory=lambda: {k: [] for k in KINDS})

    def all_samples(self) -> list[float]:
        return [s for kind in KINDS for s in self.samples[kind]]

    def summary(self, kind: str | None = None) -> dict[str, float] | None:
        """count, early (how many fired early), min, p50, p99, max; times in ms."""
        values = sorted(self.all_samples() if kind is None else self.samples[kind])
        if not values:
            return None

        def rank(p: float) -> float:  # nearest rank: a lateness some timer really had
            return values[max(0, -(-len(values) * p // 100) - 1)] * 1000

        return {
            "count": len(values),
            "early": sum(1 for v in values if v < 0),
            "min": values[0] * 1000,
            "p50": rank(50),
            "p99": rank(99),
            "max": values[-1] * 1000,
        }

    def to_json(self) -> dict:
        return {
            "server": self.server,
            "address": self.address,
            "lateness_ms": {kind: self.summary(kind) for kind in KINDS} | {"all": self.summary()},
        }


class _Conn(asyncio.Protocol):
    """One connection: send a command, await its reply with the time its bytes arrived."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.replies: asyncio.Queue = asyncio.Queue()
        self.lost = False

    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        arrived = time.monotonic()
        self.buf += data
        while True:
            end = self.buf.find(b"\r\n")
            if end < 0:
                return
            line = bytes(self.buf[:end])
            size = 0
            if line.startswith((b"RESERVED ", b"OK ", b"FOUND ")):
                size = int(line.rsplit(b" ", 1)[1]) + 2
            if len(self.buf) < end + 2 + size:
                return
            del self.buf[: end + 2 + size]
            self.replies.put_nowait((line, arrived))

    def connection_lost(self, exc) -> None:
        self.lost = True
        self.replies.put_nowait((b"(closed)", time.monotonic()))

    def send(self, command: bytes) -> float:
        sent = time.monotonic()
        self.transport.write(command + b"\r\n")
        return sent

    async def reply(self, expect: bytes, context: str) -> tuple[bytes, float]:
        try:
            line, arrived = await asyncio.wait_for(self.replies.get(), REPLY_TIMEOUT)
        except asyncio.TimeoutError:
            raise BenchError(f"{context}: no reply within {REPLY_TIMEOUT:g} s") from None
        if not line.startswith(expect):
            raise BenchError(f"{context}: expected {expect.decode()}, got {line[:80]!r}")
        return line, arrived

    async def call(self, command: bytes, expect: bytes) -> tuple[bytes, float]:
        self.send(command)
        return await self.reply(expect, command.split(b"\r\n")[0].decode())


async def _connect(host: str, port: int) -> _Conn:
    loop = asyncio.get_running_loop()
    try:
        _, conn = await loop.create_connection(_Conn, host, port)
    except OSError as exc:
        raise BenchError(f"cannot connect to {host}:{port}: {exc.strerror or exc}") from None
    return conn


class _Lane:
    """Three connections on a tube of their own, running every kind of timer in turn."""

    def __init__(self, tube: str, result: TimerResult) -> None:
        self.tube = tube.encode()
        self.result = result

    async def open(self, host: str, port: int) -> None:
        self.producer = await _connect(host, port)
        self.worker = await _connect(host, port)
        self.other = await _connect(host, port)
        await self.producer.call(b"use " + self.tube, b"USING")
        for conn in (self.worker, self.other):
            await conn.call(b"watch " + self.tube, b"WATCHING")
            await conn.call(b"ignore default", b"WATCHING")

    def close(self) -> None:
        for conn in (self.producer, self.worker, self.other):
            if conn.transport is not None:
                conn.transport.close()

    def record(self, kind: str, sent: float, arrived: float, asked: float) -> None:
        self.result.samples[kind].append(arrived - sent - asked)

    async def run(self, rounds: int, offset: float) -> None:
        await asyncio.sleep(offset)  # spread the lanes' expiries over a second
        for _ in range(rounds):
            await self.reserve_with_timeout()
            await self.delay()
            await self.deadline_soon()
            await self.time_to_run()
            await self.pause_tube()

    async def reserve_with_timeout(self) -> None:
        sent = self.worker.send(b"reserve-with-timeout 1")
        _, arrived = await self.worker.reply(b"TIMED_OUT", "reserve-with-timeout 1")
        self.record("reserve-with-timeout", sent, arrived, 1.0)

    async def delay(self) -> None:
        sent = self.producer.send(b"put 0 1 60 1\r\nd")
        await self.producer.reply(b"INSERTED", "put with delay 1")
        await self._take_when_ready("delay", sent)

    async def deadline_soon(self) -> None:
        job, sent = await self._reserve_new_job(ttr=2, body=b"s")
        _, soon = await self.worker.call(b"reserve", b"DEADLINE_SOON")
        self.record("deadline-soon", sent, soon, 1.0)
        await self.worker.call(b"delete " + job, b"DELETED")

    async def time_to_run(self) -> None:
        job, sent = await self._reserve_new_job(ttr=1, body=b"t")
        stop = asyncio.Event()
        nudge = asyncio.ensure_future(self._nudge_worker(sent + 1.0 + NUDGE_AFTER, stop))
        try:
            taken, expired = await self.other.call(b"reserve", b"RESERVED")
        finally:
            stop.set()
            await nudge  # after its last reply: none may be left for the next command
        self.record("time-to-run", sent, expired, 1.0)
        if taken.split()[1] != job:
            raise BenchError(f"time-to-run: expected job {job!r} back, got {taken!r}")
        await self.other.call(b"delete " + job, b"DELETED")

    async def _reserve_new_job(self, ttr: int, body: bytes) -> tuple[bytes, float]:
        """Put a job with time-to-run `ttr` and reserve it on the worker: its id, and when
        the reserve was sent (the reservation's timer starts then)."""
        await self.producer.call(b"put 0 0 %d 1\r\n" % ttr + body, b"INSERTED")
        sent = self.worker.send(b"reserve")
        line, _ = await self.worker.reply(b"RESERVED", f"reserve (ttr {ttr})")
        return line.split()[1], sent

    async def _take_when_ready(self, kind: str, sent: float) -> None:
        """The worker waits for the job whose 1 s timer started at `sent`; its arrival is the figure."""
        line, arrived = await self.worker.call(b"reserve", b"RESERVED")
        self.record(kind, sent, arrived, 1.0)
        await self.worker.call(b"delete " + line.split()[1], b"DELETED")

    async def _nudge_worker(self, start: float, stop: asyncio.Event) -> None:
        """beanstalkd 1.12 sometimes never expires the reservation of a connection that stays
        idle (tests/differential/harness.py says the same); activity on it makes it fire. So
        a reservation still held NUDGE_AFTER past its time gets a `peek 0` every
        NUDGE_EVERY: such a server's figure is then late by at least NUDGE_AFTER, not hung."""
        pause = max(0.0, start - time.monotonic())
        while not await _set_within(stop, pause):
            await self.worker.call(b"peek 0", b"NOT_FOUND")
            pause = NUDGE_EVERY

    async def pause_tube(self) -> None:
        await self.producer.call(b"put 0 0 60 1\r\np", b"INSERTED")
        sent = self.producer.send(b"pause-tube " + self.tube + b" 1")
        await self.producer.reply(b"PAUSED", "pause-tube 1")
        await self._take_when_ready("pause-tube", sent)


async def _set_within(event: asyncio.Event, seconds: float) -> bool:
    try:
        await asyncio.wait_for(event.wait(), seconds)
    except asyncio.TimeoutError:
        return False
    return True


def lanes_and_rounds(timers: int, lanes: int) -> tuple[int, int]:
    """As many lanes as needed (at most `lanes`) and rounds each, for at least `timers`."""
    rounds_total = -(-timers // TIMERS_PER_ROUND)
    lanes = max(1, min(lanes, rounds_total))
    return lanes, -(-rounds_total // lanes)


async def _measure(host: str, port: int, timers: int, lanes: int, server: str) -> TimerResult:
    result = TimerResult(server=server, address=f"{host}:{port}")
    lanes, rounds = lanes_and_rounds(timers, lanes)
    prefix = f"timers-{time.time_ns():x}"
    workers = [_Lane(f"{prefix}-{i}", result) for i in range(lanes)]
    try:
        for lane in workers:
            await lane.open(host, port)
        rng = random.Random(0)
        await asyncio.gather(*(lane.run(rounds, rng.random()) for lane in workers))
    finally:
        for lane in workers:
            if hasattr(lane, "other"):
                lane.close()
    return result


def measure_timers(host: str, port: int, timers: int, lanes: int = DEFAULT_LANES,
                   server: str = "") -> TimerResult:
    """Run at least `timers` timers against host:port; lateness per kind."""
    return asyncio.run(_measure(host, port, timers, lanes, server))
