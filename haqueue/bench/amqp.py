"""Just enough AMQP 0-9-1 for bench to drive RabbitMQ: a sans-I/O frame codec.

Rules: bytes in, frames out (`Frames.feed`); encoders return bytes to write. Only
what the bench's publisher and worker say is encoded: the connection handshake
(PLAIN guest/guest, no heartbeats), a channel, Queue.Declare with arguments,
Confirm.Select, Basic.Publish with its content, Basic.Get and Basic.Ack. A raw
codec rather than a client library: the load must never be what limits the
broker, and a publish here is a precomputed byte string (the same 3 frames every
time; confirms carry implicit sequence numbers), parsed replies cost a slice each.
Anything the broker sends that the bench did not ask for is the caller's error.
"""

from __future__ import annotations

import struct

from haqueue.bench.load import BenchError

PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"
FRAME_END = 0xCE
METHOD, HEADER, BODY, HEARTBEAT = 1, 2, 3, 8
_FRAME = struct.Struct(">BHI")

# (class, method) ids from the 0-9-1 specification
CONNECTION_START, CONNECTION_START_OK = (10, 10), (10, 11)
CONNECTION_TUNE, CONNECTION_TUNE_OK = (10, 30), (10, 31)
CONNECTION_OPEN, CONNECTION_OPEN_OK = (10, 40), (10, 41)
CONNECTION_CLOSE, CONNECTION_CLOSE_OK = (10, 50), (10, 51)
CHANNEL_OPEN, CHANNEL_OPEN_OK = (20, 10), (20, 11)
CHANNEL_CLOSE = (20, 40)
QUEUE_DECLARE, QUEUE_DECLARE_OK = (50, 10), (50, 11)
QUEUE_DELETE, QUEUE_DELETE_OK = (50, 40), (50, 41)
BASIC_PUBLISH, BASIC_ACK, BASIC_NACK = (60, 40), (60, 80), (60, 120)
BASIC_GET, BASIC_GET_OK, BASIC_GET_EMPTY = (60, 70), (60, 71), (60, 72)
CONFIRM_SELECT, CONFIRM_SELECT_OK = (85, 10), (85, 11)

CHANNEL = 1  # the one channel each bench connection opens


class AmqpError(BenchError):
    """The broker said something the bench cannot go on from (its message, one line)."""


def frame(kind: int, channel: int, payload: bytes) -> bytes:
    return _FRAME.pack(kind, channel, len(payload)) + payload + b"\xce"


def shortstr(text: str | bytes) -> bytes:
    data = text.encode() if isinstance(text, str) else text
    return bytes([len(data)]) + data


def longstr(data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + data


def table(entries: dict[str, object]) -> bytes:
    """A field table of str ('S'), bool ('t') and int ('l', 64-bit) values."""
    out = b""
    for name, value in entries.items():
        out += shortstr(name)
        if isinstance(value, bool):
            out += b"t" + bytes([value])
        elif isinstance(value, int):
            out += b"l" + struct.pack(">q", value)
        else:
            out += b"S" + longstr(str(value).encode())
    return longstr(out)


def method(ids: tuple[int, int], args: bytes = b"", channel: int = CHANNEL) -> bytes:
    return frame(METHOD, channel, struct.pack(">HH", *ids) + args)


def start_ok(user: str = "guest", password: str = "guest") -> bytes:
    return method(CONNECTION_START_OK, table({}) + shortstr("PLAIN")
                  + longstr(f"\0{user}\0{password}".encode()) + shortstr("en_US"), channel=0)


def tune_ok(channel_max: int, frame_max: int) -> bytes:
    # heartbeat 0: none; a bench run is short and every connection is busy.
    return method(CONNECTION_TUNE_OK, struct.pack(">HIH", channel_max, frame_max, 0), channel=0)


def connection_open(vhost: str = "/") -> bytes:
    return method(CONNECTION_OPEN, shortstr(vhost) + shortstr("") + b"\0", channel=0)


def channel_open() -> bytes:
    return method(CHANNEL_OPEN, shortstr(""))


def queue_declare(queue: str, arguments: dict[str, object]) -> bytes:
    durable = 0b10  # bits: passive, durable, exclusive, auto-delete, no-wait
    return method(QUEUE_DECLARE, struct.pack(">H", 0) + shortstr(queue) + bytes([durable]) + table(arguments))


def queue_delete(queue: str) -> bytes:
    return method(QUEUE_DELETE, struct.pack(">H", 0) + shortstr(queue) + b"\0")


def confirm_select() -> bytes:
    return method(CONFIRM_SELECT, b"\0")


def publish_parts(queue: str, body_size: int) -> tuple[bytes, bytes]:
    """Basic.Publish to `queue` through the default exchange, persistent, split around the
    body: (everything before the body's bytes, everything after). Publish = head + body + tail."""
    head = method(BASIC_PUBLISH, struct.pack(">H", 0) + shortstr("") + shortstr(queue) + b"\0")
    # content header: class 60, weight 0, body size, property flags (delivery-mode) and delivery-mode 2
    head += frame(HEADER, CHANNEL, struct.pack(">HHQH", 60, 0, body_size, 0x1000) + b"\x02")
    head += _FRAME.pack(BODY, CHANNEL, body_size)
    return head, b"\xce"


def basic_get(queue: str) -> bytes:
    return method(BASIC_GET, struct.pack(">H", 0) + shortstr(queue) + b"\0")  # no-ack off: we ack


def basic_ack(delivery_tag: bytes) -> bytes:
    """Basic.Ack of one delivery; `delivery_tag` as the 8 bytes GetOk carried."""
    return method(BASIC_ACK, delivery_tag + b"\0")


class Frames:
    """Incremental frame parser: feed bytes, get (kind, channel, payload) for each whole frame."""

    __slots__ = ("buf",)

    def __init__(self) -> None:
        self.buf = b""

    def feed(self, data: bytes) -> list[tuple[int, int, bytes]]:
        buf = self.buf + data if self.buf else data
        out = []
        pos, end = 0, len(buf)
        while end - pos >= 7:
            kind, channel, size = _FRAME.unpack_from(buf, pos)
            stop = pos + 7 + size
            if stop >= end:
                break
            if buf[stop] != FRAME_END:
                raise AmqpError(f"bad frame end 0x{buf[stop]:02x} after a {size}-byte frame")
            out.append((kind, channel, buf[pos + 7:stop]))
            pos = stop + 1
        self.buf = buf[pos:]
        return out


def method_ids(payload: bytes) -> tuple[int, int]:
    return struct.unpack_from(">HH", payload)


def close_reason(payload: bytes) -> str:
    """Connection.Close / Channel.Close: 'CODE text'."""
    code, = struct.unpack_from(">H", payload, 4)
    text = payload[7:7 + payload[6]].decode("utf-8", "replace")
    return f"{code} {text}"


def confirmed(payload: bytes) -> tuple[int, bool]:
    """Basic.Ack from the broker (a publisher confirm): (delivery tag, multiple)."""
    tag, multiple = struct.unpack_from(">QB", payload, 4)
    return tag, bool(multiple & 1)


def get_ok_tag(payload: bytes) -> bytes:
    """Basic.GetOk: its delivery tag, as the 8 bytes Basic.Ack sends back."""
    return payload[4:12]
