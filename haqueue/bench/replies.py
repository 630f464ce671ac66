"""Sans-I/O parsers for the replies a load generator expects (beanstalkd protocol.txt).

Rules: bytes go in through `feed`; counts or events come out; nothing here touches a
socket or a clock. A reply the bench did not ask for raises `UnexpectedReply`
naming it, because the bench checks every reply: a server that answers a put with
anything but `INSERTED <id>` is not being measured, it is failing.

Two parsers, one per connection role:
- `PutReplies` counts `INSERTED <id>` lines. It validates whole chunks with one
  regular expression so that checking every reply costs C time, not Python time.
- `ConsumerReplies` turns `RESERVED <id> <bytes>\\r\\n<body>\\r\\n` and `DELETED` into
  events; the consumer checks their order and the body length.
"""

from __future__ import annotations

import re

# The longest reply line either parser accepts: "RESERVED <id> <bytes>" with two
# 20-digit numbers is 50 bytes; anything much longer without CRLF is garbage.
MAX_REPLY_LINE = 256

_INSERTED_LINE = re.compile(rb"INSERTED \d+")
_INSERTED_RUN = re.compile(rb"(?:INSERTED \d+\r\n)*")
_RESERVED_LINE = re.compile(rb"RESERVED (\d+) (\d+)")

DELETED = b"DELETED"


class UnexpectedReply(Exception):
    """The server sent something the bench did not expect; `line` is what it sent."""

    def __init__(self, context: str, line: bytes) -> None:
        self.context = context
        self.line = line
        shown = line[:80].decode("ascii", "backslashreplace")
        more = "..." if len(line) > 80 else ""
        super().__init__(f"unexpected reply to {context}: {shown!r}{more}")


def _check_partial(rest: bytes, context: str) -> None:
    if len(rest) > MAX_REPLY_LINE:
        raise UnexpectedReply(context, rest)


class PutReplies:
    """Counts `INSERTED <id>` replies in a stream of bytes."""

    def __init__(self) -> None:
        self._rest = b""

    def feed(self, data: bytes) -> int:
        """Consume `data`; return how many complete `INSERTED` replies it finished."""
        buf = self._rest + data if self._rest else data
        end = buf.rfind(b"\r\n")
        if end < 0:
            self._rest = buf
            _check_partial(buf, "put")
            return 0
        end += 2
        whole = buf[:end] if end < len(buf) else buf
        self._rest = buf[end:]
        if _INSERTED_RUN.fullmatch(whole) is None:
            for line in whole.split(b"\r\n"):
                if _INSERTED_LINE.fullmatch(line) is None:
                    raise UnexpectedReply("put", line)
        _check_partial(self._rest, "put")
        return whole.count(b"\r\n")


class ConsumerReplies:
    """Splits a consumer's stream into `(job_id, body)` for RESERVED and `DELETED`."""

    def __init__(self) -> None:
        self._buf = b""

    def feed(self, data: bytes) -> list[tuple[bytes, bytes] | bytes]:
        """Consume `data`; return the complete replies in order.

        A RESERVED reply is a tuple `(job_id, body)`; a DELETED reply is `DELETED`.
        """
        buf = self._buf + data if self._buf else data
        events: list[tuple[bytes, bytes] | bytes] = []
        pos = 0
        size = len(buf)
        while True:
            eol = buf.find(b"\r\n", pos)
            if eol < 0:
                _check_partial(buf[pos:], "reserve/delete")
                break
            line = buf[pos:eol]
            if line == DELETED:
                events.append(DELETED)
                pos = eol + 2
                continue
            m = _RESERVED_LINE.fullmatch(line)
            if m is None:
                raise UnexpectedReply("reserve/delete", line)
            start = eol + 2
            stop = start + int(m.group(2))
            if stop + 2 > size:
                break  # the body has not all arrived yet
            if buf[stop : stop + 2] != b"\r\n":
                raise UnexpectedReply(
                    "reserve (body longer than its byte count)", buf[pos : stop + 2]
                )
            events.append((m.group(1), buf[start:stop]))
            pos = stop + 2
        self._buf = buf[pos:]
        return events
