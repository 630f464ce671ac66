"""What the fuzz targets check, without atheris: so the corpus and every regression replay in
plain pytest too.

`check_codec(data)`: the first bytes choose a max job size and how the stream is cut into
reads; the rest is the stream. The codec must give only events, the same events however the
stream is cut, and the same as the transliterated C read loop of beanstalkd 1.12
(tests/protocol/test_beanstalk_fuzz.py's reference).

`check_session(data)`: the session loop. Two client connections share one real
`QueueServer`, `Session`, `Batcher` and core `QueueState`; only the Raft log (`InstantLog`
applies each entry at once, in this thread) and the sockets (`ScriptedTransport`, whose
peer reads only when the script says so) are stood in for, since a fuzzer needs thousands
of runs a second. The input is a script of steps (`steps()`): bytes to a connection, the
peer draining its replies, loop turns, a close. Checked: nothing raises; the core never
counts an internal error; every byte written is a whole number of beanstalk replies of
known kinds; a connection never holds more than the flow-control bounds promise
(limits.py); once both close, every tube reference and reservation is gone.
"""

from __future__ import annotations

import asyncio

from haqueue.core.commands import decode_batch
from haqueue.protocol.gearman import NEED_DATA as GEARMAN_NEED_DATA
from haqueue.protocol.gearman import AdminLine as GearmanAdminLine
from haqueue.protocol.gearman import GearmanDecoder
from haqueue.protocol.gearman import Packet as GearmanPacket
from haqueue.protocol.gearman import ProtocolError as GearmanProtocolError
from haqueue.protocol.gearman import encode as gearman_encode
from haqueue.core.state import QueueState
from haqueue.replication.observed import RaftObservations
from haqueue.config.replication import ReplicationSettings
from haqueue.server.app import NodeOptions, QueueServer
from haqueue.server.listeners import Listen
from haqueue.server.batcher import Batcher
from haqueue.server.disk_reserve import DiskReserve
from haqueue.server.limits import COMMANDS_PER_TURN, INPUT_HIGH, OUTPUT_HIGH, MemoryGauge
from haqueue.server.beanstalk.session import Session
from haqueue.server.beanstalk.tubes import DEFAULT_TUBE, TubeDirectory
from tests.protocol.test_beanstalk_fuzz import assert_only_events, codec_events, reference_events
from tests.support.servers import split_replies

JOB_LIMITS = (0, 1, 5, 40, 65535)
MAX_JOB_SIZE = 300  # the session target's -z: small, so JOB_TOO_BIG is reachable


def split_input(data: bytes, limits: tuple[int, ...]) -> tuple[int, list[int], bytes] | None:
    """A codec target's input: its first byte picks a size limit, its second how many of the
    next bytes say where the stream is cut into reads; the rest is the stream."""
    if len(data) < 2:
        return None
    ncuts = data[1] % 8
    return limits[data[0] % len(limits)], [b + 1 for b in data[2:2 + ncuts]], data[2 + ncuts:]


def check_codec(data: bytes) -> None:
    split = split_input(data, JOB_LIMITS)
    if split is None:
        return
    limit, cuts, stream = split
    whole = codec_events(stream, [], limit)
    assert_only_events(whole)
    assert codec_events(stream, cuts, limit) == whole
    assert reference_events(stream, cuts, limit) == whole


# --- the Gearman codec -----------------------------------------------------------------------

GEARMAN_LIMITS = (64, 256, 4096)


def gearman_events(stream: bytes, cuts: list[int], max_packet: int) -> list:
    decoder = GearmanDecoder(max_packet=max_packet)
    out, pos = [], 0
    for cut in cuts + [len(stream)]:
        decoder.receive_data(stream[pos:pos + cut] if cut < len(stream) else stream[pos:])
        pos = min(len(stream), pos + cut)
        while (event := decoder.next_event()) is not GEARMAN_NEED_DATA:
            out.append(event)
    return out


def check_gearman_codec(data: bytes) -> None:
    """Only events; the same however the stream is cut; every packet re-encodes to itself."""
    split = split_input(data, GEARMAN_LIMITS)
    if split is None:
        return
    limit, cuts, stream = split
    whole = gearman_events(stream, [], limit)
    assert gearman_events(stream, cuts, limit) == whole
    for event in whole:
        assert isinstance(event, (GearmanPacket, GearmanAdminLine, GearmanProtocolError)), event
        if isinstance(event, GearmanPacket):
            again = gearman_events(gearman_encode(event.magic, event.type, *event.args), [], limit)
            assert again == [event]


# --- the session loop ------------------------------------------------------------------------

REPLY_WORDS = {
    b"INSERTED", b"BURIED", b"RESERVED", b"FOUND", b"OK", b"USING", b"WATCHING", b"KICKED",
    b"DELETED", b"RELEASED", b"TOUCHED", b"PAUSED", b"TIMED_OUT", b"DEADLINE_SOON",
    b"NOT_FOUND", b"NOT_IGNORED", b"DRAINING", b"OUT_OF_MEMORY", b"BAD_FORMAT",
    b"UNKNOWN_COMMAND", b"EXPECTED_CRLF", b"JOB_TOO_BIG",
}
# Commands the session script draws from, so the fuzzer reaches deep states quickly; it
# mutates them and adds its own bytes as well.
VOCABULARY = (
    b"put 0 0 60 3\r\nabc\r\n", b"put 5 1 1 0\r\n\r\n", b"reserve-with-timeout 0\r\n",
    b"reserve\r\n", b"delete 1\r\n", b"release 1 0 0\r\n", b"bury 1 0\r\n", b"touch 1\r\n",
    b"kick 5\r\n", b"kick-job 1\r\n", b"peek 1\r\n", b"peek-ready\r\n", b"stats\r\n",
    b"stats-job 1\r\n", b"stats-tube default\r\n", b"list-tubes\r\n", b"use a\r\n",
    b"watch a\r\n", b"ignore default\r\n", b"ignore a\r\n", b"pause-tube a 1\r\n",
    b"list-tubes-watched\r\n", b"reserve-job 1\r\n", b"quit\r\n",
    b"put 0 0 60 400\r\n" + b"x" * 400 + b"\r\n",
)


class InstantLog:
    """Stands in for the Replica: a committed log of one, applied at once."""

    def __init__(self) -> None:
        self.state = QueueState()
        self.journal = None
        self.stamp = 1_000_000
        self.observations = RaftObservations()  # the batcher records entry sizes there
        self.ticked_at = float("inf")  # its "tick" is every submit: never overdue (server/turns.py)

    def submit(self, data: bytes, callback) -> None:
        _, commands = decode_batch(data)
        self.stamp += 7  # the log's own clock: deterministic, moving forward
        applied = self.state.apply_batch(self.stamp, commands)
        callback(applied)

    def read_lease_valid(self) -> bool:
        return True

    def status(self) -> dict:
        return {}


class ScriptedTransport(asyncio.Transport):
    """The socket: keeps what the session writes until the peer `drain`s it, and calls
    pause_writing/resume_writing at the marks the session set, as asyncio's would."""

    def __init__(self, protocol: Session) -> None:
        super().__init__()
        self.protocol = protocol
        self.unsent = bytearray()
        self.received = bytearray()
        self.high = 65536
        self.low = 16384
        self.writing_paused = False
        self.reading = True
        self.closing = False
        self.lost = False
        self.eof = False  # the peer shut its sending side

    def set_write_buffer_limits(self, high=None, low=None) -> None:
        self.high, self.low = high, low

    def get_write_buffer_size(self) -> int:
        return len(self.unsent)

    def get_extra_info(self, name, default=None):
        return ("127.0.0.1", 1) if name == "peername" else default

    def write(self, data) -> None:
        assert not self.lost, "write after connection_lost"
        if self.closing:
            return
        self.unsent += data
        if not self.writing_paused and len(self.unsent) > self.high:
            self.writing_paused = True
            self.protocol.pause_writing()

    def drain(self, count: int) -> None:
        taken = self.unsent[:count]
        del self.unsent[:count]
        self.received += taken
        if self.writing_paused and len(self.unsent) <= self.low:
            self.writing_paused = False
            self.protocol.resume_writing()

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True

    def is_reading(self) -> bool:
        return self.reading

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        if not self.closing:
            self.closing = True
            self.protocol.server.loop.call_soon(self._lose)

    abort = close

    def _lose(self) -> None:
        if not self.lost:
            self.received += self.unsent
            self.unsent.clear()
            self.lost = True
            self.protocol.connection_lost(None)


def make_server(loop: asyncio.AbstractEventLoop) -> QueueServer:
    server = QueueServer(NodeOptions(listen=Listen(port=0), replication=ReplicationSettings("127.0.0.1:0", []),
                                     max_job_size=MAX_JOB_SIZE))
    server.loop = loop
    server.replica = InstantLog()
    server.memory = MemoryGauge(0)  # no limit: never over
    server.disk = DiskReserve(loop, None, None, None, lambda: (0, 0))  # no data directory: no reserve
    server.batcher = Batcher(server.replica, loop, server._after_entry)
    server.directory = TubeDirectory()
    server.serving = True
    return server


def steps(data: bytes):
    """Decode a fuzz input into (op, connection, argument) steps.

    Each step is one byte: low bit the connection, the rest the op; some ops take the
    next byte(s). 0 send raw bytes (length byte, then that many), 1 send a vocabulary
    command (next byte: low 5 bits which, high 3 bits how many times less one), 2 the peer
    drains its replies (length byte * 64 bytes), 3 loop turns, 4 close, 5 the peer
    half-closes.
    """
    return _decode_steps(data, 2, lambda pick: VOCABULARY[(pick & 31) % len(VOCABULARY)] * (1 + (pick >> 5)))


def _decode_steps(data: bytes, connections: int, word):
    """The step decoder both session targets share: the head byte's value modulo
    `connections` is the connection, the rest the op; `word(pick)` is op 1's bytes."""
    i = 0
    while i < len(data):
        head = data[i]
        conn, op = head % connections, (head // connections) % 6
        i += 1
        if op == 0:
            n = data[i] if i < len(data) else 0
            yield "send", conn, data[i + 1 : i + 1 + n]
            i += 1 + n
        elif op == 1:
            pick = data[i] if i < len(data) else 0
            yield "send", conn, word(pick)
            i += 1
        elif op == 2:
            n = data[i] if i < len(data) else 255
            yield "drain", conn, (n + 1) * 64
            i += 1
        elif op == 3:
            yield "turn", conn, None
        elif op == 4:
            yield "close", conn, None
        else:
            yield "eof", conn, None


def _turns(loop: asyncio.AbstractEventLoop, count: int = 3) -> None:
    for _ in range(count):
        loop.run_until_complete(asyncio.sleep(0))


def _check_replies(received: bytes) -> None:
    replies, rest = split_replies(received)
    for reply in replies:
        word = reply.split(b"\r\n", 1)[0].split(b" ", 1)[0]
        assert word in REPLY_WORDS, reply
    assert rest == b"", rest  # replies are written whole


# Replies held back at once: the pipeline stops at OUTPUT_HIGH, plus the one reply that
# crossed it, plus the replies of one turn's writes landing together.
HELD_BOUND = OUTPUT_HIGH + COMMANDS_PER_TURN * (MAX_JOB_SIZE + 64) + 4096


_loop: asyncio.AbstractEventLoop | None = None


def _fresh_loop() -> tuple[asyncio.AbstractEventLoop, list]:
    """The one event loop every fuzz input reuses (made once), with its unhandled
    exceptions collected in the list returned (checked after each step)."""
    global _loop
    if _loop is None:
        _loop = asyncio.new_event_loop()
        asyncio.set_event_loop(_loop)
    errors: list = []
    _loop.set_exception_handler(lambda _loop, context: errors.append(context))
    return _loop, errors


def check_session(data: bytes) -> None:
    loop, errors = _fresh_loop()
    server = make_server(loop)
    sessions, transports = [], []
    for n in range(2):
        session = Session(server, n + 1)
        transport = ScriptedTransport(session)
        session.connection_made(transport)
        sessions.append(session)
        transports.append(transport)
    def eof(session, transport) -> None:
        if not session.eof_received():
            transport.close()

    _play(loop, errors, steps(data), sessions, transports, lambda s: s.parser.buffered, eof)
    for transport in transports:
        transport.drain(1 << 30)
        transport.close()
    _turns(loop, 5)
    server._step_down(graceful=True)  # its timers must not fire into the next input
    assert not errors, errors
    state = server.replica.state
    assert state.internal_errors == 0
    for transport in transports:
        _check_replies(bytes(transport.received))
    assert not server.sessions
    assert server.directory.refs == {DEFAULT_TUBE: 1}
    assert not state._reserved_by, "a closed connection still holds reservations"


def _play(loop, errors: list, steps, sessions: list, transports: list, buffered, eof) -> None:
    """Run the fuzzer's steps (send, drain, turn, eof, close) against the connections, and
    after each check the flow-control promises (limits.py): unparsed input stops being read
    at INPUT_HIGH (`buffered(session)`: what its decoder holds); replies held back stop the
    pipeline at OUTPUT_HIGH; at most one decoded request waits. `eof(session, transport)`
    delivers an end of input as the protocol's server does."""
    for op, conn, arg in steps:
        session, transport = sessions[conn], transports[conn]
        if op == "send":
            if transport.closing or transport.eof or not arg:
                continue
            # A paused transport does not read: the bytes wait in the kernel (here: dropped
            # as a slower sender would not have sent them yet). Bounds are checked below.
            if transport.reading:
                session.data_received(bytes(arg))
        elif op == "drain":
            transport.drain(arg)
        elif op == "turn":
            _turns(loop, 1)
        elif op == "eof":
            if not transport.closing and not transport.eof:
                transport.eof = True
                eof(session, transport)
        else:
            transport.close()
        for s, t in zip(sessions, transports):
            if not t.lost:
                assert t.reading or buffered(s) >= INPUT_HIGH, buffered(s)
                assert s.held_bytes == sum(len(x[0]) for x in s.slots if x[0] is not None)
                assert s.held_bytes < HELD_BOUND, s.held_bytes
                assert len(s.queue) <= 1
        assert not errors, errors


# ---------------------------------------------------------------- the Gearman session
# `check_gearman_session(data)`: the Gearman front end's loop, as check_session does the
# beanstalkd one. Three connections (clients, workers, admins: any may be any) share one real
# QueueServer, GearmanService, GearmanSession each, Batcher and QueueState; the log and the
# sockets are stood in for as above. Checked: nothing raises; the core never counts an
# internal error; every byte written is whole response packets or admin answer lines; the
# flow-control bounds hold; once all close, no job is held by a connection, none runs, no
# foreground job is left, and the service has forgotten every connection and ability; and
# every connection still open has answered all it was sent (the third reads as fast as
# loopback, so its transport never pauses: a pipeline must restart by itself).
def _gearman_vocabulary() -> tuple[bytes, ...]:
    from haqueue.protocol.gearman import request

    handles = [b"H:haqueue:%d" % n for n in (1, 2, 3)]
    words = [
        request("SUBMIT_JOB", b"f", b"", b"data"), request("SUBMIT_JOB_BG", b"f", b"", b"bg"),
        request("SUBMIT_JOB_HIGH", b"g", b"u", b"x"), request("SUBMIT_JOB_LOW_BG", b"f", b"u", b"y"),
        request("SUBMIT_JOB_EPOCH", b"f", b"", b"1", b"e"), request("SUBMIT_JOB_SCHED", b"f", b"", b"", b"", b"", b"", b"", b"s"),
        request("CAN_DO", b"f"), request("CAN_DO", b"g"), request("CAN_DO_TIMEOUT", b"f", b"1"),
        request("CANT_DO", b"f"), request("RESET_ABILITIES"), request("PRE_SLEEP"),
        request("GRAB_JOB"), request("GRAB_JOB_UNIQ"), request("GRAB_JOB_ALL"),
        request("ECHO_REQ", b"e"), request("OPTION_REQ", b"exceptions"), request("SET_CLIENT_ID", b"me"),
        request("GET_STATUS_UNIQUE", b"u"), request("NOOP"),
        b"status\n", b"workers\n", b"maxqueue f 1\n", b"maxqueue f\n", b"version\n", b"bogus\n",
        request("SUBMIT_JOB_BG", b"f", b"", b"z" * 400),
        request("ECHO_REQ", b"E" * 800) * 100,  # one read whose replies pass OUTPUT_HIGH
    ]
    for handle in handles:
        words += [request("WORK_STATUS", handle, b"1", b"2"), request("WORK_DATA", handle, b"d"),
                  request("WORK_COMPLETE", handle, b"r"), request("WORK_FAIL", handle),
                  request("WORK_EXCEPTION", handle, b"x"), request("GET_STATUS", handle)]
    return tuple(words)


GEARMAN_VOCABULARY = _gearman_vocabulary()


class GearmanScriptedTransport(ScriptedTransport):
    """As ScriptedTransport; `eager`: the kernel takes every write at once (a fast reader
    on loopback), so the transport never pauses writing and never resumes a pipeline."""

    eager = False

    def write(self, data) -> None:
        if self.eager and not self.closing:
            assert not self.lost, "write after connection_lost"
            self.received += data
            return
        super().write(data)

    def close(self) -> None:
        if not self.closing:
            self.closing = True
            self.protocol.host.loop.call_soon(self._lose)

    abort = close


def _check_gearman_output(received: bytes) -> None:
    from haqueue.protocol.gearman import HEADER, PACKETS, RES

    pos = 0
    while pos < len(received):
        if received[pos] == 0:
            assert received[pos:pos + 4] == RES, received[pos:pos + 12]
            _, type_, size = HEADER.unpack_from(received, pos)
            assert type_ in PACKETS, type_
            pos += HEADER.size + size
            assert pos <= len(received), "a packet written in part"
        else:
            end = received.find(b"\n", pos)
            assert end >= 0, received[pos:pos + 80]
            pos = end + 1


def check_gearman_session(data: bytes) -> None:
    from haqueue.server.gearman.service import GearmanService
    from haqueue.server.gearman.session import GearmanSession

    loop, errors = _fresh_loop()
    server = make_server(loop)
    server.gearman = service = GearmanService(server, "127.0.0.1", 0)
    service.open_ = True
    sessions, transports = [], []
    for n in range(3):
        session = GearmanSession(service, server.next_conn_id())
        transport = GearmanScriptedTransport(session)
        transport.eager = n == 2  # the third reads as fast as loopback: its writes never pause
        session.connection_made(transport)
        sessions.append(session)
        transports.append(transport)
    _play(loop, errors, _gearman_steps(data), sessions, transports, lambda s: s.decoder.buffered,
          lambda session, transport: session.eof_received())
    # Liveness: with every reply read, a connection still open has answered all it was
    # sent and waits for input (a pipeline that stops must go on by itself).
    for transport in transports:
        transport.eager = True
    for _ in range(20):
        for transport in transports:
            transport.drain(1 << 30)
        _turns(loop, 2)
    for s, t in zip(sessions, transports):
        if not t.lost and not t.closing:
            assert s.starved and not s.queue and not s.slots, (s.starved, len(s.queue), len(s.slots))
    for transport in transports:
        transport.drain(1 << 30)
        transport.close()
    _turns(loop, 5)
    server._step_down(graceful=True)
    assert not errors, errors
    state = server.replica.state
    assert state.internal_errors == 0
    for transport in transports:
        _check_gearman_output(bytes(transport.received))
    assert not service.sessions and not service.workers and not service.sleepers
    gearman = state.gearman
    assert not gearman._held, "a closed connection still holds Gearman jobs"
    assert all(job.state == "queued" and job.background for job in gearman.jobs.values())


def _gearman_steps(data: bytes):
    """As steps(), over three connections (the head byte's value mod 3) and the Gearman
    vocabulary (next byte: which, modulo its size; its top two bits how many times less one)."""
    return _decode_steps(data, 3, lambda pick: GEARMAN_VOCABULARY[pick % len(GEARMAN_VOCABULARY)]
                         * (1 + (pick >> 6)))
