"""Sans-I/O codec for beanstalkd 1.12's text protocol: bytes in, commands out, replies to bytes.

Owns the exact wire grammar, byte for byte as beanstalkd 1.12 answers it, and nothing else: no
sockets, no clock, no queue state. The server feeds bytes with `BeanstalkParser.receive_data`
(b"" = the peer closed) and pulls events with `next_event` until it gets `NEED_DATA`, in the
manner of h11. Events are a `Command` (verb and typed arguments), a `ProtocolError` (the
reply beanstalkd writes for that input; the stream goes on), `NEED_DATA`, or `EOF`.

Theory of operation. The parser is a small state machine over one bytearray with a read
offset (compacted at most once per `receive_data`, so a 64 KiB read of pipelined puts costs
linear time): LINE (looking for a command line), DISCARD (a line longer than the line buffer
is being thrown away), BODY (a put's body and its CRLF trailer) and SKIP (a too-big body is
being thrown away).

Rules, from prot.c (1.12: `conn_process_io`, `scan_line_end`, `which_cmd`, `dispatch_cmd`,
`read_u32`/`read_u64`/`read_duration`, `read_tube_name`, `is_valid_tube`, `_skip`,
`enqueue_incoming_job`) and checked against the real 1.12 server (the server wins):

Framing
 1. A command line ends at the FIRST '\\r' of the line, and only if '\\n' follows it. A '\\r'
    followed by anything else poisons the line: later CRLFs do not end it (`scan_line_end`
    looks at the first '\\r' only). A bare '\\n' is an ordinary byte ("stats\\nstats\\r\\n" is
    one line, and gets BAD_FORMAT).
 2. The line buffer is LINE_BUF_SIZE = 224 bytes, CRLF included. The CRLF must lie within the
    first 224 bytes from the line start ('\\r' at offset <= 222). Otherwise beanstalkd discards
    the input in consecutive 224-byte blocks, each scanned by rule 1 from its own start, until
    a block holds a CRLF; it then answers BAD_FORMAT once and parses what follows that CRLF as
    a new command. So a CRLF straddling a block boundary is missed, and e.g. a 225-byte line
    swallows the next command too.
 3. A NUL byte anywhere in the line: BAD_FORMAT ("check for possible maliciousness").
 4. The verb is found by prefix, in `which_cmd`'s order: "put ", "peek ", "peek-ready",
    "peek-delayed", "peek-buried", "reserve-with-timeout ", "reserve-job ", "reserve",
    "delete ", "release ", "bury ", "kick ", "kick-job ", "touch ", "stats-job ",
    "stats-tube ", "stats", "use ", "watch ", "ignore ", "list-tubes-watched",
    "list-tube-used", "list-tubes", "quit", "pause-tube"; then haqueue's one extension,
    "haqueue-operator NAME" (a console or the status page names itself; NAME is a tube-like
    name; answered NOTED; beanstalkd answers it UNKNOWN_COMMAND). No prefix: UNKNOWN_COMMAND (so
    "use", "delete", "peek" without the space are unknown, and verbs are case-sensitive).
    But "stats-job" without its space matches "stats", and "reserve-job" matches "reserve".
 5. Commands without arguments must be exactly the verb; anything after it is BAD_FORMAT
    ("statsx", "stats ", "list-tubesx", "reserve-with-timeout" without its space).
 6. Anything starting with "quit" is quit ("quitx" closes the connection too).

Numbers (`read_u32`/`read_u64`: skip ' ' only, then a digit must follow (no sign, no tab),
then decimal digits; more than UINT64_MAX or, for 32-bit fields, UINT32_MAX is BAD_FORMAT)
 7. 64-bit: job ids (peek, reserve-job, delete, release, bury, touch, kick-job, stats-job).
    32-bit: pri, delay, ttr, body size, pause-tube delay. Durations are whole seconds.
 8. Arguments are separated by one or more spaces; leading spaces after the verb's own space
    are allowed ("delete  1"); nothing may follow the last one, not even a space
    ("delete 1 " is BAD_FORMAT).
 9. put: the size is checked against the max job size (-z) BEFORE trailing garbage is: a
    too-big size skips size+2 bytes even when junk follows it. A put rejected with
    BAD_FORMAT reads no body, so its body bytes are parsed as a command line next.
10. put body: exactly size+2 bytes are consumed; if the last two are not CRLF the reply is
    EXPECTED_CRLF and parsing goes on after those bytes. A size of 0 is valid. ttr < 1 is
    raised to 1 by the server (not here: args keep what was sent).
11. JOB_TOO_BIG is written only after the size+2 discarded bytes have all arrived.
12. reserve-with-timeout reads its timeout with strtol, unlike everything else: leading C
    whitespace (space, \\t, \\n, \\v, \\f), an optional sign, and junk after the digits are
    all accepted; no digits at all means 0. Only a long overflow (beyond +-2**63) is
    BAD_FORMAT. The long is then stored in a C int, so it wraps to 32 bits: 4294967297 is a
    one-second timeout, and any value that ends up negative (-1, 2147483648) waits forever.
    The codec reports that wrapped int.
13. kick reads its bound with strtoul: whitespace, a sign ('-' negates modulo 2**64) and junk
    after the digits are accepted; no digits is BAD_FORMAT, beyond 2**64-1 is BAD_FORMAT. The
    result is stored in an unsigned int: the codec reports it modulo 2**32 ("kick 4294967296"
    kicks 0 jobs). "kick 0" is valid and kicks nothing.

Tube names (`is_valid_tube`: 1..200 bytes of A-Za-z0-9 and -+/;.$_(), not starting with '-')
14. use, watch, ignore and stats-tube take the rest of the line verbatim as the name: an extra
    space before or after it is BAD_FORMAT.
15. pause-tube's verb has no trailing space: its name starts after any spaces
    ("pause-tubedefault 1" pauses "default"; "pause-tubes 1" names tube "s"). The name is the
    longest run of name characters, then one or more spaces and a 32-bit number of seconds
    must end the line. A name longer than 200 or starting with '-' is BAD_FORMAT. Delay 0 is
    raised to 1 by the server (not here).

No protocol error closes the connection in 1.12: every `ProtocolError` has close=False.
Some errors still count in beanstalkd's cmd-* stats (`ProtocolError.counts_as`): put's
JOB_TOO_BIG, junk after put's size and EXPECTED_CRLF count as a put; pause-tube with a name
over 200 bytes or starting with '-' counts as a pause-tube. Every other error counts nowhere.
"""

from __future__ import annotations

import re
from typing import Iterable, NamedTuple

__all__ = [
    "NEED_DATA", "EOF", "Command", "ProtocolError", "BeanstalkParser",
    "LINE_BUF_SIZE", "MAX_TUBE_NAME_LEN", "DEFAULT_MAX_JOB_SIZE",
    "inserted", "buried", "reserved", "found", "using", "watching", "kicked", "ok",
    "yaml_dict", "yaml_list",
]


class _Sentinel:
    __slots__ = ("_name",)

    def __init__(self, name: str) -> None:
        self._name = name

    def __repr__(self) -> str:
        return self._name


NEED_DATA = _Sentinel("NEED_DATA")
EOF = _Sentinel("EOF")

# dat.h: big enough for the longest command, "pause-tube <200 chars> 4294967295\r\n",
# and the longest reply line, "USING <200 chars>\r\n".
LINE_BUF_SIZE = 224
# dat.h MAX_TUBE_NAME_LEN is 201 including the NUL.
MAX_TUBE_NAME_LEN = 200
# dat.h JOB_DATA_SIZE_LIMIT_DEFAULT ((1 << 16) - 1); overridden by -z.
DEFAULT_MAX_JOB_SIZE = 65535

_U32_MAX = 2**32 - 1
_U64_MAX = 2**64 - 1
_LONG_MAX = 2**63 - 1


class Command(NamedTuple):
    """One parsed command: the protocol verb exactly, and typed arguments.

    put -> (pri, delay, ttr, body); delay/ttr/timeouts are whole seconds as sent.
    reserve-with-timeout -> (timeout,), a signed 32-bit int, negative meaning no timeout.
    Tube names are str; ids, counts and priorities are int.
    """

    name: str
    args: tuple = ()


class ProtocolError(NamedTuple):
    """An input that beanstalkd answers with an error reply (and keeps the connection).

    counts_as names the command whose cmd-* stats counter beanstalkd still increments for
    this input (prot.c bumps op_ct as soon as the arguments parse, before later checks):
    "put" for JOB_TOO_BIG, junk after the size, and EXPECTED_CRLF; "pause-tube" for a name
    over 200 bytes or starting with '-'. None: the error is not counted anywhere.
    """

    reply: bytes
    close: bool = False
    counts_as: str | None = None


# --- Replies (prot.c MSG_*): fixed ones as constants -------------------------------------

NOT_FOUND = b"NOT_FOUND\r\n"
DELETED = b"DELETED\r\n"
RELEASED = b"RELEASED\r\n"
BURIED = b"BURIED\r\n"  # bury / release answer; put's "BURIED <id>" is buried(id)
TOUCHED = b"TOUCHED\r\n"
KICKED = b"KICKED\r\n"  # kick-job; kick's "KICKED <n>" is kicked(n)
PAUSED = b"PAUSED\r\n"
TIMED_OUT = b"TIMED_OUT\r\n"
DEADLINE_SOON = b"DEADLINE_SOON\r\n"
NOT_IGNORED = b"NOT_IGNORED\r\n"
DRAINING = b"DRAINING\r\n"
OUT_OF_MEMORY = b"OUT_OF_MEMORY\r\n"
INTERNAL_ERROR = b"INTERNAL_ERROR\r\n"
BAD_FORMAT = b"BAD_FORMAT\r\n"
UNKNOWN_COMMAND = b"UNKNOWN_COMMAND\r\n"
NOTED = b"NOTED\r\n"  # haqueue-operator's answer (haqueue's extension; beanstalkd: UNKNOWN_COMMAND)
EXPECTED_CRLF = b"EXPECTED_CRLF\r\n"
JOB_TOO_BIG = b"JOB_TOO_BIG\r\n"

_E_BAD_FORMAT = ProtocolError(BAD_FORMAT)
_E_UNKNOWN_COMMAND = ProtocolError(UNKNOWN_COMMAND)
_E_PUT_BAD_FORMAT = ProtocolError(BAD_FORMAT, False, "put")
_E_EXPECTED_CRLF = ProtocolError(EXPECTED_CRLF, False, "put")
_E_JOB_TOO_BIG = ProtocolError(JOB_TOO_BIG, False, "put")
_E_PAUSE_BAD_FORMAT = ProtocolError(BAD_FORMAT, False, "pause-tube")


def inserted(job_id: int) -> bytes:
    return b"INSERTED %d\r\n" % job_id


def buried(job_id: int) -> bytes:
    """put's reply when the job could not be queued and was buried instead."""
    return b"BURIED %d\r\n" % job_id


def reserved(job_id: int, body: bytes) -> bytes:
    return b"RESERVED %d %d\r\n%b\r\n" % (job_id, len(body), body)


def found(job_id: int, body: bytes) -> bytes:
    return b"FOUND %d %d\r\n%b\r\n" % (job_id, len(body), body)


def using(tube: str) -> bytes:
    return b"USING %b\r\n" % tube.encode("ascii")


def watching(count: int) -> bytes:
    return b"WATCHING %d\r\n" % count


def kicked(count: int) -> bytes:
    return b"KICKED %d\r\n" % count


def ok(body: bytes) -> bytes:
    """The envelope of stats and list replies: OK <bytes>\\r\\n<data>\\r\\n."""
    return b"OK %d\r\n%b\r\n" % (len(body), body)


def _yaml_value(value: object) -> str:
    if value is True or value is False:  # before int: bool is an int
        return "true" if value else "false"
    if type(value) is bytes:
        return value.decode("utf-8", "surrogateescape")  # written back byte for byte
    return str(value)


def yaml_dict(pairs: Iterable[tuple[str, object]]) -> bytes:
    """beanstalkd's stats body: "---\\n" then "key: value\\n" per pair, in the given order.

    Values are written verbatim, as prot.c's printf formats do: ints in decimal, bools as
    true/false, str/bytes unquoted. beanstalkd quotes only `version` ("1.12" with its double
    quotes); pass that value already quoted. Tube names are not quoted.
    """
    # One str, encoded once: a `stats` body has ~70 pairs, and a flood of stats
    # spent most of its time here formatting bytes pair by pair (profiled).
    text = "".join([f"{key}: {_yaml_value(value)}\n" for key, value in pairs])
    return ("---\n" + text).encode("utf-8", "surrogateescape")


def yaml_list(items: Iterable[str]) -> bytes:
    """beanstalkd's list-tubes body: "---\\n" then "- name\\n" per item, names unquoted."""
    parts = [b"---\n"]
    for item in items:
        parts.append(b"- %b\n" % item.encode("ascii"))
    return b"".join(parts)


# --- Parsing -----------------------------------------------------------------------------

_NAME = rb"A-Za-z0-9\-+/;.$_()"
_VALID_TUBE = re.compile(rb"[A-Za-z0-9+/;.$_()][%b]{0,%d}" % (_NAME, MAX_TUBE_NAME_LEN - 1))
# Each number is a maximal digit run, so consecutive fields need at least one space between
# them (" +"), which also stops the regex from splitting one digit run into two fields.
_PUT = re.compile(rb" *(\d+) +(\d+) +(\d+) +(\d+)")
_ID = re.compile(rb" *(\d+)")
_RELEASE = re.compile(rb" *(\d+) +(\d+) +(\d+)")
_BURY = re.compile(rb" *(\d+) +(\d+)")
_PAUSE = re.compile(rb" *([%b]+) +(\d+)" % _NAME)
# strtol/strtoul: C isspace, optional sign, digits (none is allowed by the regex; callers
# decide). '\r' cannot occur inside a line (rule 1).
_STRTOL = re.compile(rb"[ \t\n\v\f\r]*([+-]?)(\d*)")

# Which-cmd prefixes in prot.c's order, mapped to this codec's handler key.
_PREFIXES: tuple[tuple[bytes, str], ...] = (
    (b"put ", "put"),
    (b"peek ", "peek"),
    (b"peek-ready", "peek-ready"),
    (b"peek-delayed", "peek-delayed"),
    (b"peek-buried", "peek-buried"),
    (b"reserve-with-timeout ", "reserve-with-timeout"),
    (b"reserve-job ", "reserve-job"),
    (b"reserve", "reserve"),
    (b"delete ", "delete"),
    (b"release ", "release"),
    (b"bury ", "bury"),
    (b"kick ", "kick"),
    (b"kick-job ", "kick-job"),
    (b"touch ", "touch"),
    (b"stats-job ", "stats-job"),
    (b"stats-tube ", "stats-tube"),
    (b"stats", "stats"),
    (b"use ", "use"),
    (b"watch ", "watch"),
    (b"ignore ", "ignore"),
    (b"list-tubes-watched", "list-tubes-watched"),
    (b"list-tube-used", "list-tube-used"),
    (b"list-tubes", "list-tubes"),
    (b"quit", "quit"),
    (b"pause-tube", "pause-tube"),
    # haqueue's one extension, after every beanstalkd verb (none starts with "h", so
    # beanstalkd's dispatch of every other line is unchanged): an operator's tool names
    # itself, and the node records what that connection changes as events.
    (b"haqueue-operator ", "haqueue-operator"),
)
_PREFIX_LEN = {name: len(prefix) for prefix, name in _PREFIXES}
_NO_ARGS = frozenset(
    ["peek-ready", "peek-delayed", "peek-buried", "reserve", "stats", "list-tubes-watched",
     "list-tube-used", "list-tubes"]
)
# Fast paths, equivalent to the ordered prefix scan: no earlier prefix in _PREFIXES matches
# any of these lines (checked in the tests against the slow scan).
_EXACT = {prefix: Command(name) for prefix, name in _PREFIXES if name in _NO_ARGS}
_EXACT[b"quit"] = Command("quit")
_SPACED = {prefix[:-1]: name for prefix, name in _PREFIXES if prefix.endswith(b" ")}


def which_cmd(line: bytes) -> str | None:
    """The command a line is dispatched to by prot.c's prefix scan, or None (unknown)."""
    for prefix, name in _PREFIXES:
        if line.startswith(prefix):
            return name
    return None


def _id_arg(rest: bytes) -> int | None:
    m = _ID.fullmatch(rest)
    if m is None:
        return None
    value = int(m[1])
    return value if value <= _U64_MAX else None


def _tube_arg(rest: bytes) -> str | None:
    if _VALID_TUBE.fullmatch(rest) is None:
        return None
    return rest.decode("ascii")


class _ReadBody(NamedTuple):
    """A valid put line: its body (size bytes, then CRLF) comes next."""

    pri: int
    delay: int
    ttr: int
    size: int


class _Skip(NamedTuple):
    """A put whose size is over the limit: discard count bytes, then answer JOB_TOO_BIG."""

    count: int


def _parse_line(line: bytes, max_job_size: int) -> Command | ProtocolError | _ReadBody | _Skip:
    """Dispatch one command line (CRLF removed) as prot.c's dispatch_cmd does."""
    if b"\x00" in line:
        return _E_BAD_FORMAT
    cmd = _EXACT.get(line)
    if cmd is not None:
        return cmd
    space = line.find(b" ")
    name = _SPACED.get(line[:space]) if space > 0 else None
    if name is None:
        name = which_cmd(line)
        if name is None:
            return _E_UNKNOWN_COMMAND
    if name in _NO_ARGS:
        return _E_BAD_FORMAT  # exact matches were taken above: this one has trailing bytes
    if name == "quit":
        return Command("quit")
    rest = line[_PREFIX_LEN[name]:]

    if name == "put":
        m = _PUT.match(rest)
        if m is None:
            return _E_BAD_FORMAT
        pri, delay, ttr, size = int(m[1]), int(m[2]), int(m[3]), int(m[4])
        if pri > _U32_MAX or delay > _U32_MAX or ttr > _U32_MAX or size > _U32_MAX:
            return _E_BAD_FORMAT
        if size > max_job_size:
            return _Skip(size + 2)
        if m.end() != len(rest):
            return _E_PUT_BAD_FORMAT
        return _ReadBody(pri, delay, ttr, size)

    if name in ("delete", "reserve-job", "touch", "peek", "kick-job", "stats-job"):
        job_id = _id_arg(rest)
        return _E_BAD_FORMAT if job_id is None else Command(name, (job_id,))

    if name in ("use", "watch", "ignore", "stats-tube", "haqueue-operator"):
        tube = _tube_arg(rest)
        return _E_BAD_FORMAT if tube is None else Command(name, (tube,))

    if name == "release":
        m = _RELEASE.fullmatch(rest)
        if m is None:
            return _E_BAD_FORMAT
        job_id, pri, delay = int(m[1]), int(m[2]), int(m[3])
        if job_id > _U64_MAX or pri > _U32_MAX or delay > _U32_MAX:
            return _E_BAD_FORMAT
        return Command(name, (job_id, pri, delay))

    if name == "bury":
        m = _BURY.fullmatch(rest)
        if m is None:
            return _E_BAD_FORMAT
        job_id, pri = int(m[1]), int(m[2])
        if job_id > _U64_MAX or pri > _U32_MAX:
            return _E_BAD_FORMAT
        return Command(name, (job_id, pri))

    if name == "reserve-with-timeout":
        m = _STRTOL.match(rest)
        value = int(m[2]) if m[2] else 0
        if m[1] == b"-":
            value = -value
        if not -_LONG_MAX - 1 <= value <= _LONG_MAX:
            return _E_BAD_FORMAT
        value &= 0xFFFFFFFF  # stored in a C int
        if value > 0x7FFFFFFF:
            value -= 0x100000000
        return Command(name, (value,))

    if name == "kick":
        m = _STRTOL.match(rest)
        if not m[2]:
            return _E_BAD_FORMAT
        value = int(m[2])
        if value > _U64_MAX:
            return _E_BAD_FORMAT
        if m[1] == b"-":
            value = -value
        return Command(name, (value & 0xFFFFFFFF,))  # strtoul into an unsigned int

    # pause-tube
    m = _PAUSE.fullmatch(rest)
    if m is None:
        return _E_BAD_FORMAT
    tube, delay = m[1], int(m[2])
    if delay > _U32_MAX:
        return _E_BAD_FORMAT
    if len(tube) > MAX_TUBE_NAME_LEN or tube[:1] == b"-":
        return _E_PAUSE_BAD_FORMAT  # checked after op_ct++ in prot.c
    return Command(name, (tube.decode("ascii"), delay))


# The hot lines, matched whole on the receive buffer where they lie (no copy of the line,
# no dispatch): a put whose four numbers are plain digit runs, and a delete of one id.
# Each is the line _parse_line would read the same way ("put " then _PUT, "delete "
# then _ID; no earlier prefix of _PREFIXES matches either, and neither can hold a NUL);
# a line they do not take whole, or whose numbers are out of range, goes the general
# way. tests/protocol/test_beanstalk_fuzz.py holds them to _parse_line.
_FAST_PUT = re.compile(rb"put +(\d+) +(\d+) +(\d+) +(\d+)")
_FAST_DELETE = re.compile(rb"delete +(\d+)")
_P, _D = ord("p"), ord("d")
# Bodies up to this size are copied out of the buffer with a slice (two small copies
# beat a memoryview's set-up); bigger ones through a memoryview (one copy).
_SLICE_BODY = 4096
_new_tuple = tuple.__new__  # Command(name, args) without NamedTuple's Python-level __new__


def _fast_line(buf: bytearray, pos: int, end: int, max_job_size: int) -> Command | _ReadBody | None:
    """The event _parse_line makes of the line buf[pos:end], for the hot lines; None: another line."""
    first = buf[pos]
    if first == _P:
        m = _FAST_PUT.fullmatch(buf, pos, end)
        if m is not None:
            pri, delay, ttr, size = map(int, m.groups())
            if pri <= _U32_MAX and delay <= _U32_MAX and ttr <= _U32_MAX and size <= _U32_MAX \
                    and size <= max_job_size:
                return _new_tuple(_ReadBody, (pri, delay, ttr, size))
    elif first == _D:
        m = _FAST_DELETE.fullmatch(buf, pos, end)
        if m is not None:
            job_id = int(m[1])
            if job_id <= _U64_MAX:
                return _new_tuple(Command, ("delete", (job_id,)))
    return None


_LINE, _DISCARD, _BODY, _SKIP = range(4)
# Compact the buffer once the consumed prefix is at least this big (and always when empty).
_COMPACT_AT = 1 << 16


class BeanstalkParser:
    """Turns a client's byte stream into Command / ProtocolError events, as beanstalkd 1.12.

    Feed with receive_data (b"" for EOF); call next_event until NEED_DATA. After EOF is fed,
    complete buffered commands are still returned, then EOF (a partial command is dropped,
    as beanstalkd drops it when read() returns 0).
    """

    def __init__(self, max_job_size: int = DEFAULT_MAX_JOB_SIZE) -> None:
        self.max_job_size = max_job_size
        self._buf = bytearray()
        self._pos = 0
        self._state = _LINE
        self._eof = False
        self._put: _ReadBody | None = None  # the put whose body is awaited
        self._skip = 0  # bytes still to discard in _SKIP

    def receive_data(self, data: bytes) -> None:
        if self._eof:
            raise RuntimeError("receive_data after EOF")
        if not data:
            self._eof = True
            return
        buf = self._buf
        if self._pos:
            if self._pos == len(buf):
                buf.clear()
                self._pos = 0
            elif self._pos >= _COMPACT_AT:
                del buf[: self._pos]
                self._pos = 0
        buf += data

    @property
    def put_pending(self) -> bool:
        """A put's command line was read and its body (or the bytes a too-big one skips) was
        not: beanstalkd has counted that put already (cmd-put), even if the body never comes."""
        return self._state == _BODY or self._state == _SKIP

    @property
    def buffered(self) -> int:
        """Bytes received and not yet consumed (a server can bound its memory with this)."""
        return len(self._buf) - self._pos

    @property
    def request_size(self) -> int:
        """The size of the request being received, once known and until it has all
        arrived: a put's body and its CRLF. 0 otherwise (a command line is at most
        LINE_BUF_SIZE). A server that holds many connections bounds their sum with it."""
        return self._put.size + 2 if self._state == _BODY else 0

    def next_event(self):
        buf = self._buf
        while True:
            pos = self._pos
            avail = len(buf) - pos
            state = self._state

            if state == _BODY:
                put = self._put
                if avail < put.size + 2:
                    return EOF if self._eof else NEED_DATA
                self._state = _LINE
                self._put = None
                return self._take_body(buf, pos, put)

            if state == _SKIP:
                take = min(avail, self._skip)
                self._pos = pos + take
                self._skip -= take
                if self._skip:
                    return EOF if self._eof else NEED_DATA
                self._state = _LINE
                return _E_JOB_TOO_BIG

            # _LINE or _DISCARD: the window is one line buffer from the line (block) start.
            if not avail:
                return EOF if self._eof else NEED_DATA
            window = avail if avail < LINE_BUF_SIZE else LINE_BUF_SIZE
            cr = buf.find(b"\r", pos, pos + window - 1) if window > 1 else -1
            if cr >= 0 and buf[cr + 1] == 10:
                self._pos = cr + 2
                if state == _DISCARD:
                    self._state = _LINE
                    return _E_BAD_FORMAT
                result = _fast_line(buf, pos, cr, self.max_job_size) if cr > pos else None
                if result is None:
                    result = _parse_line(bytes(buf[pos:cr]), self.max_job_size)
                kind = type(result)
                if kind is _ReadBody:
                    if avail - (cr + 2 - pos) >= result.size + 2:
                        return self._take_body(buf, cr + 2, result)  # the body is here: no detour
                    self._state = _BODY
                    self._put = result
                    continue
                if kind is _Skip:
                    self._state = _SKIP
                    self._skip = result.count
                    continue
                return result
            if window == LINE_BUF_SIZE:
                # No CRLF where beanstalkd would look: the buffer is full, throw it away.
                self._pos = pos + LINE_BUF_SIZE
                self._state = _DISCARD
                continue
            return EOF if self._eof else NEED_DATA

    def _take_body(self, buf: bytearray, pos: int, put: _ReadBody):
        """The put whose body (and its CRLF) starts at buf[pos] and has all arrived."""
        end = pos + put.size
        self._pos = end + 2
        if buf[end] != 13 or buf[end + 1] != 10:
            return _E_EXPECTED_CRLF
        if put.size <= _SLICE_BODY:
            body = bytes(buf[pos:end])
        else:
            with memoryview(buf) as view:  # one copy of the body, not two
                body = bytes(view[pos:end])
        return _new_tuple(Command, ("put", (put.pri, put.delay, put.ttr, body)))
