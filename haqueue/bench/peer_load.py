"""bench's three workloads against RabbitMQ and NATS JetStream, measured as against haqueue.

Rules:
- The run's clock, budget, backlog, open-loop schedule and the way figures are
  counted are load.py's own (`_Run`, `_Producer`, `_schedule`, `merge`): only the
  bytes on the wire differ, so a figure here means what it means for haqueue.
- put: a producer keeps `window` publishes in flight; a publish is answered when
  the broker confirms it (RabbitMQ: publisher confirms, Basic.Ack, possibly
  `multiple`; NATS: the stream's PubAck on the producer's reply inbox).
- cycle: producers as in put (the put's send time in the body); a worker takes one
  message, acknowledges it and asks for the next in one write, as haqueue's
  consumer writes `delete` and `reserve` together:
  RabbitMQ: Basic.Get -> GetOk + content -> Basic.Ack (no reply in AMQP 0-9-1: the
  cycle ends when the ack is written; the channel's next reply follows it). On
  GetEmpty the worker asks again after EMPTY_RETRY (Basic.Get cannot wait for a
  message; polling flat out would spend the broker's core on empty Raft commands).
  NATS: a pull request `{"batch":1,"expires":...}` that waits server-side ->
  message -> `+ACK` with a reply inbox (AckSync): the cycle ends at the ack's reply.
- Each workload gets a queue or stream of its own, deleted afterwards; clients
  connect to the node that leads it (as haqueue's clients reach its leader).
- Every reply is checked; a broker error ends the run with its message.
"""

from __future__ import annotations

import asyncio
import json
import os
import struct
from collections import deque
from collections.abc import Awaitable, Callable

from haqueue.bench import amqp, nats
from haqueue.bench.load import (
    STAMP_BYTES,
    BenchError,
    LoadSpec,
    ShareResult,
    _at_t1,
    _Producer,
    _read_loop,
    _Run,
    _schedule,
    _watchdog,
    close_run,
    monotonic_ns,
)

EMPTY_RETRY = 0.001  # s: RabbitMQ worker's pause after Basic.GetEmpty
FETCH_EXPIRES_NS = 5_000_000_000  # a NATS pull request waits this long for a message
SETUP_TIMEOUT = 60.0
API_TIMEOUT = 2.0  # a JetStream API request unanswered this long is asked again  # JetStream elects its meta leader a few seconds after the servers start
READ_SIZE = 1 << 18


# ------------------------------------------------------------------ connections
class _Stream:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    def close(self) -> None:
        self.writer.close()


async def _open(host: str, port: int, timeout: float) -> _Stream:
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port, limit=READ_SIZE), timeout)
    except (OSError, TimeoutError) as exc:
        raise BenchError(f"cannot connect to {host}:{port}: {getattr(exc, 'strerror', None) or exc}") from None
    return _Stream(reader, writer)


async def _read(stream: _Stream, timeout: float) -> bytes:
    try:
        data = await asyncio.wait_for(stream.reader.read(READ_SIZE), timeout)
    except TimeoutError:
        raise BenchError(f"no reply from the server for {timeout:g} s") from None
    if not data:
        raise BenchError("the server closed the connection")
    return data


class AmqpConnection(_Stream):
    """An AMQP connection with channel 1 open, confirm mode on when asked."""

    frames: amqp.Frames
    pending: deque

    async def method(self, timeout: float) -> tuple[tuple[int, int], bytes]:
        while not self.pending:
            self.pending.extend(self.frames.feed(await _read(self, timeout)))
        kind, _, payload = self.pending.popleft()
        if kind != amqp.METHOD:
            raise BenchError(f"RabbitMQ: a frame of type {kind} where a method was expected")
        ids = amqp.method_ids(payload)
        if ids in (amqp.CONNECTION_CLOSE, amqp.CHANNEL_CLOSE):
            raise BenchError(f"RabbitMQ closed the {'connection' if ids[0] == 10 else 'channel'}: "
                             f"{amqp.close_reason(payload)}")
        return ids, payload

    async def expect(self, wanted: tuple[int, int], timeout: float) -> bytes:
        ids, payload = await self.method(timeout)
        if ids != wanted:
            raise BenchError(f"RabbitMQ: method {ids} where {wanted} was expected")
        return payload


async def amqp_connect(host: str, port: int, timeout: float, confirms: bool = False) -> AmqpConnection:
    s = await _open(host, port, timeout)
    conn = AmqpConnection(s.reader, s.writer)
    conn.frames, conn.pending = amqp.Frames(), deque()
    conn.writer.write(amqp.PROTOCOL_HEADER)
    await conn.expect(amqp.CONNECTION_START, timeout)
    conn.writer.write(amqp.start_ok())
    tune = await conn.expect(amqp.CONNECTION_TUNE, timeout)
    channel_max, frame_max, _ = struct.unpack_from(">HIH", tune, 4)
    conn.writer.write(amqp.tune_ok(channel_max or 2047, frame_max or 131072) + amqp.connection_open())
    await conn.expect(amqp.CONNECTION_OPEN_OK, timeout)
    conn.writer.write(amqp.channel_open())
    await conn.expect(amqp.CHANNEL_OPEN_OK, timeout)
    if confirms:
        conn.writer.write(amqp.confirm_select())
        await conn.expect(amqp.CONFIRM_SELECT_OK, timeout)
    if conn.pending or conn.frames.buf:
        raise BenchError("RabbitMQ sent more than the handshake asked for")
    return conn


class NatsConnection(_Stream):
    parser: nats.Messages
    pending: deque
    inbox: bytes
    requests = 0

    async def event(self, timeout: float):
        while not self.pending:
            self.pending.extend(self.parser.feed(await _read(self, timeout)))
        return self.pending.popleft()

    async def request(self, subject: bytes, payload: bytes, timeout: float) -> nats.Message | None:
        """One request on an inbox of its own under the connection's (sid 1); None after
        `timeout` without its reply (a late reply to an earlier request is dropped)."""
        self.requests += 1
        inbox = self.inbox + b".%d" % self.requests
        self.writer.write(nats.pub(subject, inbox, payload))
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            left = deadline - asyncio.get_running_loop().time()
            if left <= 0:
                return None
            try:
                event = await self.event(left)
            except BenchError as exc:
                if "no reply" in str(exc):
                    return None
                raise
            if isinstance(event, nats.Message):
                if event.subject == inbox:
                    return event
            elif event[0] == nats.PING_EVENT:
                self.writer.write(nats.PONG)


async def nats_connect(host: str, port: int, timeout: float) -> NatsConnection:
    s = await _open(host, port, timeout)
    conn = NatsConnection(s.reader, s.writer)
    conn.parser, conn.pending = nats.Messages(), deque()
    conn.inbox = b"_INBOX." + os.urandom(8).hex().encode()
    try:
        event = await conn.event(timeout)
        if event[0] != nats.INFO:
            raise BenchError(f"NATS: {event[0]} where INFO was expected")
        conn.writer.write(nats.CONNECT + nats.sub(conn.inbox + b".*", 1) + nats.PING)
        while (event := await conn.event(timeout)) != (nats.PONG_EVENT, b"PONG"):
            if isinstance(event, nats.Message):
                raise BenchError("NATS: a message before the handshake ended")
    except nats.NatsError as exc:
        raise BenchError(f"NATS: {exc}") from None
    return conn


# ------------------------------------------------------------------ producers
class _Confirms:
    """RabbitMQ publisher confirms on one channel -> how many publishes each read confirmed."""

    def __init__(self) -> None:
        self.frames = amqp.Frames()
        self.high = 0  # every tag <= high is confirmed
        self.singles: set[int] = set()  # confirmed tags above high (acks without `multiple`)

    def feed(self, data: bytes) -> int:
        n = 0
        for kind, _, payload in self.frames.feed(data):
            if kind == amqp.HEARTBEAT:
                continue
            ids = amqp.method_ids(payload) if kind == amqp.METHOD else None
            if ids == amqp.BASIC_ACK:
                tag, multiple = amqp.confirmed(payload)
                if multiple:
                    if tag > self.high:
                        below = {t for t in self.singles if t <= tag}
                        n += tag - self.high - len(below)
                        self.singles -= below
                        self.high = tag
                elif tag > self.high and tag not in self.singles:
                    self.singles.add(tag)
                    n += 1
                while self.high + 1 in self.singles:
                    self.high += 1
                    self.singles.remove(self.high)
            elif ids == amqp.BASIC_NACK:
                raise BenchError("RabbitMQ refused a publish (Basic.Nack)")
            elif ids in (amqp.CONNECTION_CLOSE, amqp.CHANNEL_CLOSE):
                raise BenchError(f"RabbitMQ closed the channel: {amqp.close_reason(payload)}")
            else:
                raise BenchError(f"RabbitMQ: unexpected frame (type {kind}, method {ids}) on a publisher")
        return n


class _PubAcks:
    """JetStream PubAcks on a producer's inbox -> how many publishes each read acknowledged."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self.parser = nats.Messages()
        self.writer = writer

    def feed(self, data: bytes) -> int:
        n = 0
        for event in self.parser.feed(data):
            if type(event) is nats.Message:
                if event.status or b'"error"' in event.payload:
                    raise BenchError(f"NATS refused a publish: status {event.status}, "
                                     f"{event.payload[:120].decode('utf-8', 'replace')}")
                n += 1
            elif event[0] == nats.PING_EVENT:
                self.writer.write(nats.PONG)
        return n


def _producer(run: _Run, writer: asyncio.StreamWriter, parser, head: bytes, tail: bytes) -> _Producer:
    """load.py's producer speaking another protocol: a publish is head + body + tail."""
    p = _Producer(run, writer)
    p.parser = parser
    size = run.spec.body_size
    if p.stamped:
        p.header, p.tail = head, b"x" * (size - STAMP_BYTES) + tail
    else:
        p.command = head + b"x" * size + tail
    return p


# ------------------------------------------------------------------ workers
def _cycle_done(run: _Run, stamp: int, now: int) -> None:
    if run.t0 <= stamp < run.t1:
        run.e2e_latency.add(now - stamp)
        run.measured_cycles += 1
        run.last_cycle = now


class _AmqpWorker:
    """Basic.Get; on GetOk and its content, Basic.Ack and the next Basic.Get in one write."""

    def __init__(self, run: _Run, writer: asyncio.StreamWriter, queue: str) -> None:
        self.run, self.writer = run, writer
        self.frames = amqp.Frames()
        self.get = amqp.basic_get(queue)
        self.tag = b""
        self.body = b""
        self.size = -1  # body bytes still expected; -1: no delivery under way

    def start(self) -> None:
        self.writer.write(self.get)
        self.run.reserves_sent += 1

    def _again(self) -> None:
        if not self.run.done.done():
            self.start()

    def on_data(self, data: bytes, now: int) -> None:
        run = self.run
        deleted = 0
        for kind, _, payload in self.frames.feed(data):
            if kind == amqp.HEARTBEAT:
                continue
            if kind == amqp.METHOD:
                ids = amqp.method_ids(payload)
                if ids == amqp.BASIC_GET_OK:
                    self.tag, self.body, self.size = amqp.get_ok_tag(payload), b"", -2
                elif ids == amqp.BASIC_GET_EMPTY:
                    asyncio.get_running_loop().call_later(EMPTY_RETRY, self._again)
                elif ids in (amqp.CONNECTION_CLOSE, amqp.CHANNEL_CLOSE):
                    raise BenchError(f"RabbitMQ closed the channel: {amqp.close_reason(payload)}")
                else:
                    raise BenchError(f"RabbitMQ: unexpected method {ids} on a worker")
            elif kind == amqp.HEADER and self.size == -2:
                self.size = struct.unpack_from(">Q", payload, 4)[0]
            elif kind == amqp.BODY and self.size > 0:
                self.body += payload
                self.size -= len(payload)
            else:
                raise BenchError(f"RabbitMQ: unexpected frame of type {kind} on a worker")
            if self.size == 0:
                body, self.size = self.body, -1
                if len(body) != run.spec.body_size:
                    raise BenchError(f"RabbitMQ delivered a {len(body)}-byte body, expected {run.spec.body_size}")
                self.writer.write(amqp.basic_ack(self.tag) + self.get)
                run.reserves += 1
                run.reserves_sent += 1
                deleted += 1
                _cycle_done(run, int(body[:STAMP_BYTES], 16), now)
        if deleted:
            run.on_deleted(deleted)


class _NatsWorker:
    """A pull request for one message; on it, +ACK (AckSync) and the next pull request in one write."""

    def __init__(self, run: _Run, writer: asyncio.StreamWriter, stream: str, consumer: str) -> None:
        self.run, self.writer = run, writer
        self.parser = nats.Messages()
        inbox = b"_INBOX." + os.urandom(8).hex().encode()
        self.fetch_inbox, self.ack_inbox = inbox + b".f", inbox + b".a"
        # sid 1 is the connection's request inbox (nats_connect)
        self.subscribe = nats.sub(self.fetch_inbox, 3) + nats.sub(self.ack_inbox, 4)
        self.next = nats.pub(f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{consumer}".encode(), self.fetch_inbox,
                             b'{"batch":1,"expires":%d}' % FETCH_EXPIRES_NS)
        self.acking: deque[int] = deque()  # send stamps of the messages whose +ACK awaits its reply

    def start(self) -> None:
        self.writer.write(self.next)
        self.run.reserves_sent += 1

    def on_data(self, data: bytes, now: int) -> None:
        run = self.run
        deleted = 0
        out = []
        for event in self.parser.feed(data):
            if type(event) is not nats.Message:
                if event[0] == nats.PING_EVENT:
                    out.append(nats.PONG)
                continue
            # By subscription: a fetched message keeps its stream subject, not our inbox's.
            if event.sid == b"4":
                if event.status or not self.acking:
                    raise BenchError(f"NATS: an ack answered with status {event.status} "
                                     f"{event.payload[:80]!r}")
                deleted += 1
                _cycle_done(run, self.acking.popleft(), now)
            elif event.sid != b"3":
                raise BenchError(f"NATS: a message on subscription {event.sid!r}")
            elif event.status == 408:  # the pull request expired with no message: ask again
                out.append(self.next)
            elif event.status:
                raise BenchError(f"NATS: a pull request answered with status {event.status}")
            else:
                body = event.payload
                if len(body) != run.spec.body_size:
                    raise BenchError(f"NATS delivered a {len(body)}-byte body, expected {run.spec.body_size}")
                self.acking.append(int(body[:STAMP_BYTES], 16))
                out.append(nats.pub(event.reply, self.ack_inbox, b"+ACK") + self.next)
                run.reserves += 1
                run.reserves_sent += 1
        if out:
            self.writer.write(b"".join(out))
        if deleted:
            run.on_deleted(deleted)


# ------------------------------------------------------------------ setup per system
class _RabbitMQ:
    """A quorum queue of its own per workload, declared on (and so led by) the first node."""

    def __init__(self, ports: list[int], host: str, spec: LoadSpec) -> None:
        self.host, self.port, self.spec = host, ports[0], spec
        self.queue = f"haqueue-bench-{spec.workload}-{os.urandom(3).hex()}"

    async def setup(self) -> None:
        conn = await amqp_connect(self.host, self.port, SETUP_TIMEOUT)
        try:
            conn.writer.write(amqp.queue_declare(self.queue, {"x-queue-type": "quorum"}))
            await conn.expect(amqp.QUEUE_DECLARE_OK, SETUP_TIMEOUT)
        finally:
            conn.close()

    async def teardown(self) -> None:
        conn = await amqp_connect(self.host, self.port, SETUP_TIMEOUT)
        try:
            conn.writer.write(amqp.queue_delete(self.queue))
            await conn.expect(amqp.QUEUE_DELETE_OK, SETUP_TIMEOUT)
        finally:
            conn.close()

    async def producer(self, run: _Run) -> tuple[_Stream, _Producer]:
        conn = await amqp_connect(self.host, self.port, self.spec.timeout, confirms=True)
        head, tail = amqp.publish_parts(self.queue, self.spec.body_size)
        return conn, _producer(run, conn.writer, _Confirms(), head, tail)

    async def worker(self, run: _Run) -> tuple[_Stream, _AmqpWorker]:
        conn = await amqp_connect(self.host, self.port, self.spec.timeout)
        return conn, _AmqpWorker(run, conn.writer, self.queue)


class _Nats:
    """A JetStream R3 file stream with WorkQueue retention and a durable pull consumer per
    workload; clients connect to the server that leads the stream."""

    def __init__(self, ports: list[int], host: str, spec: LoadSpec) -> None:
        self.ports, self.host, self.spec = ports, host, spec
        tag = os.urandom(3).hex()
        self.stream, self.subject = f"bench-{spec.workload}-{tag}", f"bench.{spec.workload}.{tag}"
        self.consumer = "workers"
        self.port = ports[0]

    async def _api(self, conn: NatsConnection, subject: str, doc: dict | None, deadline: float) -> dict:
        """A JetStream API request, asked again while JetStream is still electing its leaders."""
        payload = json.dumps(doc).encode() if doc is not None else b""
        while True:
            # Before JetStream has elected its leaders a request may go unanswered: ask again.
            reply = await conn.request(subject.encode(), payload, API_TIMEOUT)
            try:
                if reply is None:
                    raise nats.NatsError(f"no reply within {API_TIMEOUT:g} s")
                if reply.status == 503:
                    raise nats.NatsError("no responders: JetStream not ready")
                return nats.api_reply(reply.payload)
            except nats.NatsError as exc:
                if asyncio.get_running_loop().time() > deadline:
                    raise BenchError(f"NATS {subject}: {exc}") from None
                await asyncio.sleep(0.25)  # JetStream elects leaders; asked again until the deadline

    async def _leader(self, conn: NatsConnection, info_subject: str, deadline: float) -> str:
        """The server name (n1..n3) leading the stream or consumer, once it has a leader."""
        while True:
            info = await self._api(conn, info_subject, None, deadline)
            leader = (info.get("cluster") or {}).get("leader", "")
            if leader.startswith("n") and leader[1:].isdigit() and int(leader[1:]) <= len(self.ports):
                return leader
            if asyncio.get_running_loop().time() > deadline:
                raise BenchError(f"NATS: {info_subject} shows no leader after {SETUP_TIMEOUT:g} s")
            await asyncio.sleep(0.05)  # polling for a leader, bounded by the deadline

    async def setup(self) -> None:
        conn = await nats_connect(self.host, self.port, SETUP_TIMEOUT)
        deadline = asyncio.get_running_loop().time() + SETUP_TIMEOUT
        try:
            await self._api(conn, f"$JS.API.STREAM.CREATE.{self.stream}", {
                "name": self.stream, "subjects": [self.subject], "retention": "workqueue",
                "storage": "file", "num_replicas": 3, "discard": "old"}, deadline)
            await self._api(conn, f"$JS.API.CONSUMER.DURABLE.CREATE.{self.stream}.{self.consumer}", {
                "stream_name": self.stream, "config": {
                    "durable_name": self.consumer, "ack_policy": "explicit", "deliver_policy": "all",
                    "ack_wait": 60_000_000_000, "max_ack_pending": 10_000}}, deadline)
            # Requests reach a stream or consumer only once it has a leader: wait for both.
            leader = await self._leader(conn, f"$JS.API.STREAM.INFO.{self.stream}", deadline)
            self.port = self.ports[int(leader[1:]) - 1]
            await self._leader(conn, f"$JS.API.CONSUMER.INFO.{self.stream}.{self.consumer}", deadline)
        finally:
            conn.close()

    async def teardown(self) -> None:
        conn = await nats_connect(self.host, self.port, SETUP_TIMEOUT)
        try:
            await self._api(conn, f"$JS.API.STREAM.DELETE.{self.stream}", None,
                            asyncio.get_running_loop().time() + SETUP_TIMEOUT)
        finally:
            conn.close()

    async def producer(self, run: _Run) -> tuple[_Stream, _Producer]:
        conn = await nats_connect(self.host, self.port, self.spec.timeout)
        conn.writer.write(nats.sub(conn.inbox + b"p", 2))
        head, tail = nats.pub_parts(self.subject.encode(), conn.inbox + b"p", self.spec.body_size)
        return conn, _producer(run, conn.writer, _PubAcks(conn.writer), head, tail)

    async def worker(self, run: _Run) -> tuple[_Stream, _NatsWorker]:
        conn = await nats_connect(self.host, self.port, self.spec.timeout)
        worker = _NatsWorker(run, conn.writer, self.stream, self.consumer)
        conn.writer.write(worker.subscribe)
        return conn, worker


SYSTEMS: dict[str, Callable] = {"rabbitmq": _RabbitMQ, "nats": _Nats}


async def run_peer(system: str, ports: list[int], spec: LoadSpec,
                   around: Callable[[str], None] = lambda _: None) -> ShareResult:
    """One workload against a started peer, in this process; `around("start")` and
    `around("stop")` bracket the run itself, the queue's or stream's setup and teardown outside."""
    peer = SYSTEMS[system](ports, spec.host, spec)
    await peer.setup()
    around("start")
    try:
        result = await _run(peer, spec)
    except BaseException:
        around("stop")
        try:
            await peer.teardown()
        except BenchError:
            pass  # the run's own error is the one to report
        raise
    around("stop")
    await peer.teardown()
    return result


async def _run(peer, spec: LoadSpec) -> ShareResult:
    cycle = spec.workload == "cycle"
    n_producers = spec.producers if cycle else spec.connections
    n_workers = spec.consumers if cycle else 0
    opened: list[_Stream] = []
    tasks: list[asyncio.Task] = []

    # keep() makes the setup coroutine itself, as in load.py: one made outside it
    # would never be awaited if the run were cancelled before keep's task started.
    async def keep(setup: Callable[[_Run], Awaitable[tuple[_Stream, object]]]):
        conn, role = await setup(run)
        opened.append(conn)
        return conn, role

    try:
        # The run's clock starts once every connection is ready, as in load.py.
        t_start = monotonic_ns()
        run = _Run(spec, t_start)
        producers = await asyncio.gather(*(keep(peer.producer) for _ in range(n_producers)))
        workers = await asyncio.gather(*(keep(peer.worker) for _ in range(n_workers)))
        run.t_start = t_start = monotonic_ns()
        run.t0 = t_start + int(spec.warmup * 1e9)
        run.t1 = run.t0 + int(spec.duration * 1e9) if spec.duration is not None else run.t1
        run.last_put = run.last_cycle = run.t0
        run.last_activity = t_start
        run.producers_left = len(producers)
        for conn, role in producers + workers:
            leftover = getattr(conn, "pending", None)
            if leftover:
                raise BenchError("the server sent more than the handshake asked for")
            tasks.append(asyncio.create_task(_read_loop(run, conn.reader, role.on_data)))
        tasks.append(asyncio.create_task(_watchdog(run, spec.timeout)))
        roles = [role for _, role in producers]
        if spec.workload == "openloop":
            tasks.append(asyncio.create_task(_schedule(run, roles)))
        else:
            tasks.append(asyncio.create_task(_at_t1(run, roles)))
        for _, worker in workers:
            worker.start()
        for producer in roles:
            producer.top_up()
        await run.done
        return run.result()
    finally:
        await close_run(tasks, opened)
