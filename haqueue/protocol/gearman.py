"""The Gearman wire protocol, sans I/O: bytes in, packets and admin lines out; packets in, bytes out.

As seed 002 (the Gearman protocol document) describes it, with the packet
numbers gearmand added after it (37-42). On one port, two protocols: a
stream whose next byte is NUL carries binary packets, anything else is a line
of the text admin protocol (`status`, `workers`, ...), decided per message as
gearmand does.

A binary packet is a 12-byte header, "\\0REQ" (to the server) or "\\0RES"
(from it), a big-endian u32 type and a big-endian u32 size, then `size` bytes
of arguments separated by NUL; the last argument runs to the end of the data,
so it may hold NULs (a job's workload). Each type has a fixed number of
arguments (FIELDS); framing is by the size field only, never by scanning.

Bad input gets an event, never an exception: `ProtocolError` names the
problem, the ERROR code and text gearmand 1.1.20 answers it with (if any),
and whether the stream can go on, as gearmand decides:
- "\\0RES" (a response's magic) is answered INVALID_MAGIC and the packet,
  framed by its size, skipped; any other magic closes the stream unanswered;
- a type gearmand numbers but does not serve (5) is INVALID_COMMAND; a type
  beyond its numbering (0, 43 and up) closes the stream unanswered;
- a wrong argument count is INVALID_COMMAND (gearmand closes: haqueue says
  why), an oversized packet an ERROR and a close.
A packet bigger than `max_packet` is refused from its header alone, before its
data is buffered, so a client cannot make the server hold an arbitrary
amount of memory; an admin line is bounded by MAX_LINE the same way.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

REQ = b"\0REQ"
RES = b"\0RES"
HEADER = struct.Struct(">4sII")
MAX_LINE = 8192  # an admin command line, newline included
DEFAULT_MAX_PACKET = 64 << 20

# type -> (name, number of NUL-separated arguments, the last one running to the end)
PACKETS: dict[int, tuple[str, int]] = {
    1: ("CAN_DO", 1),
    2: ("CANT_DO", 1),
    3: ("RESET_ABILITIES", 0),
    4: ("PRE_SLEEP", 0),
    6: ("NOOP", 0),
    7: ("SUBMIT_JOB", 3),
    8: ("JOB_CREATED", 1),
    9: ("GRAB_JOB", 0),
    10: ("NO_JOB", 0),
    11: ("JOB_ASSIGN", 3),
    12: ("WORK_STATUS", 3),
    13: ("WORK_COMPLETE", 2),
    14: ("WORK_FAIL", 1),
    15: ("GET_STATUS", 1),
    16: ("ECHO_REQ", 1),
    17: ("ECHO_RES", 1),
    18: ("SUBMIT_JOB_BG", 3),
    19: ("ERROR", 2),
    20: ("STATUS_RES", 5),
    21: ("SUBMIT_JOB_HIGH", 3),
    22: ("SET_CLIENT_ID", 1),
    23: ("CAN_DO_TIMEOUT", 2),
    24: ("ALL_YOURS", 0),
    25: ("WORK_EXCEPTION", 2),
    26: ("OPTION_REQ", 1),
    27: ("OPTION_RES", 1),
    28: ("WORK_DATA", 2),
    29: ("WORK_WARNING", 2),
    30: ("GRAB_JOB_UNIQ", 0),
    31: ("JOB_ASSIGN_UNIQ", 4),
    32: ("SUBMIT_JOB_HIGH_BG", 3),
    33: ("SUBMIT_JOB_LOW", 3),
    34: ("SUBMIT_JOB_LOW_BG", 3),
    35: ("SUBMIT_JOB_SCHED", 8),
    36: ("SUBMIT_JOB_EPOCH", 4),
    37: ("SUBMIT_REDUCE_JOB", 5),
    38: ("SUBMIT_REDUCE_JOB_BACKGROUND", 5),
    39: ("GRAB_JOB_ALL", 0),
    40: ("JOB_ASSIGN_ALL", 5),
    41: ("GET_STATUS_UNIQUE", 1),
    42: ("STATUS_RES_UNIQUE", 6),
}
TYPES: dict[str, int] = {name: number for number, (name, _) in PACKETS.items()}


@dataclass(frozen=True)
class Packet:
    magic: bytes  # REQ or RES
    type: int
    args: tuple[bytes, ...]

    @property
    def name(self) -> str:
        return PACKETS[self.type][0]


@dataclass(frozen=True)
class AdminLine:
    """One line of the text admin protocol, without its line ending."""

    line: bytes


@dataclass(frozen=True)
class ProtocolError:
    reason: str
    fatal: bool  # the stream's framing is lost: answer (if answered), then close
    code: bytes = b"INVALID_COMMAND"  # the ERROR packet's code
    text: bytes | None = None  # the ERROR packet's text (None: the reason)
    answered: bool = True  # False: gearmand closes without a word, and so does haqueue

    @property
    def error_text(self) -> bytes:
        return self.reason.encode() if self.text is None else self.text


NOT_EXPECTED = b"Command not expected"  # gearmand's text for a type it does not serve
LAST_TYPE = max(PACKETS)  # gearmand's numbering ends here (GEARMAN_COMMAND_MAX - 1)


NEED_DATA = object()  # sentinel: feed more bytes


def encode(magic: bytes, type_: int, *args: bytes) -> bytes:
    """One packet's bytes. The number of arguments must be the type's (ValueError otherwise)."""
    name, fields = PACKETS[type_]
    if len(args) != fields:
        raise ValueError(f"{name} takes {fields} argument(s), got {len(args)}")
    for arg in args[:-1]:
        if b"\0" in arg:
            raise ValueError(f"{name}: only the last argument may contain NUL")
    data = b"\0".join(args)
    return HEADER.pack(magic, type_, len(data)) + data


def response(name: str, *args: bytes) -> bytes:
    return encode(RES, TYPES[name], *args)


def request(name: str, *args: bytes) -> bytes:
    return encode(REQ, TYPES[name], *args)


class GearmanDecoder:
    """Feed bytes with `receive_data`; take events with `next_event` until NEED_DATA."""

    def __init__(self, max_packet: int = DEFAULT_MAX_PACKET, magic: bytes = REQ) -> None:
        self.max_packet = max_packet
        self.magic = magic  # what the other side must send (REQ: we are the server)
        self._buffer = bytearray()
        self._broken = False

    @property
    def buffered(self) -> int:
        return len(self._buffer)

    @property
    def request_size(self) -> int:
        """The size of the packet being received, header included, once its header has
        arrived and until the whole packet has; 0 otherwise. A server that holds many
        connections bounds their sum with it."""
        buffer = self._buffer
        if self._broken or len(buffer) < HEADER.size or buffer[0] != 0:
            return 0
        end = HEADER.size + HEADER.unpack_from(buffer)[2]
        return end if len(buffer) < end else 0

    def receive_data(self, data: bytes) -> None:
        if not self._broken:
            self._buffer += data

    def next_event(self):
        buffer = self._buffer
        if self._broken or not buffer:
            return NEED_DATA
        if buffer[0] != 0:
            return self._admin_line()
        reversed_magic = RES if self.magic == REQ else REQ
        if len(buffer) >= 4 and buffer[:4] != self.magic and buffer[:4] != reversed_magic:
            # Known from its first four bytes, however the header arrives: not Gearman.
            return self._fail(f"bad magic {bytes(buffer[:4])!r} (expected {self.magic!r})", answered=False)
        if len(buffer) < HEADER.size:
            return NEED_DATA
        magic, type_, size = HEADER.unpack_from(buffer)
        if size > self.max_packet:
            return self._fail(f"packet of {size} bytes, more than the {self.max_packet} allowed")
        if type_ == 0 or type_ > LAST_TYPE:
            return self._fail(f"unknown packet type {type_}", answered=False)
        end = HEADER.size + size
        if len(buffer) < end:
            return NEED_DATA
        data = bytes(buffer[HEADER.size:end])
        del buffer[:end]
        if magic != self.magic:
            # The other side's magic, framed as a packet: answered, skipped, the stream goes on.
            return ProtocolError(f"bad magic {magic!r} (expected {self.magic!r})", fatal=False,
                                 code=b"INVALID_MAGIC",
                                 text=b"Request magic expected" if self.magic == REQ else None)
        spec = PACKETS.get(type_)
        if spec is None:
            return ProtocolError(f"unassigned packet type {type_}", fatal=False, text=NOT_EXPECTED)
        name, fields = spec
        if fields == 0:
            if data:
                return ProtocolError(f"{name} takes no arguments, got {size} bytes", fatal=False)
            return Packet(magic, type_, ())
        args = tuple(data.split(b"\0", fields - 1))
        if len(args) != fields:
            return ProtocolError(f"{name} takes {fields} arguments, got {len(args)}", fatal=False)
        return Packet(magic, type_, args)

    def _admin_line(self):
        buffer = self._buffer
        end = buffer.find(b"\n", 0, MAX_LINE)
        if end < 0:
            if len(buffer) >= MAX_LINE:
                return self._fail(f"admin line longer than {MAX_LINE} bytes")
            return NEED_DATA
        line = bytes(buffer[:end]).rstrip(b"\r")
        del buffer[:end + 1]
        return AdminLine(line)

    def stop(self) -> None:
        """Read nothing more: what is buffered and what arrives is dropped (the session
        closes the connection, as gearmand does on some well-framed requests)."""
        self._broken = True
        self._buffer.clear()

    def _fail(self, reason: str, answered: bool = True) -> ProtocolError:
        self._broken = True
        self._buffer.clear()
        return ProtocolError(reason, fatal=True, code=b"INVALID_PACKET", answered=answered)
