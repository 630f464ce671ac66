"""beanstalkd's replies as a client reads them: sans-I/O, bytes in, replies out.

`ReplyReader.feed(data)` returns the replies `data` completed, in order; a reply
is its first word, the words after it, and its body (only FOUND, RESERVED and
OK carry one: `<word> ... <bytes>\\r\\n<body>\\r\\n`, protocol.txt). Nothing here
touches a socket: the console reads a socket into it, the status page the
bytes its in-memory connection wrote.

`yaml_fields` and `yaml_items` read the two YAML shapes beanstalkd sends
(stats-* dicts of scalars, list-tubes lists), and nothing more general.
"""

from __future__ import annotations

from typing import NamedTuple

WITH_BODY = frozenset([b"FOUND", b"RESERVED", b"OK"])
# The longest reply line is "USING <200-byte name>" (beanstalkd's LINE_BUF_SIZE
# comment); anything much longer without CRLF is not beanstalkd talking.
MAX_LINE = 256


class ReplyError(ValueError):
    """The peer sent something that is not a beanstalkd reply."""


class Reply(NamedTuple):
    word: str
    args: tuple[str, ...] = ()
    body: bytes | None = None


class ReplyReader:
    def __init__(self) -> None:
        self._buf = b""

    def feed(self, data: bytes) -> list[Reply]:
        buf = self._buf + data if self._buf else data
        replies = []
        pos = 0
        while True:
            eol = buf.find(b"\r\n", pos)
            if eol < 0:
                if len(buf) - pos > MAX_LINE:
                    raise ReplyError(f"reply line longer than {MAX_LINE} bytes")
                break
            words = buf[pos:eol].split(b" ")
            if words[0] in WITH_BODY:
                try:
                    size = int(words[-1])
                except ValueError:
                    raise ReplyError(f"bad reply line {buf[pos:eol][:80]!r}") from None
                start = eol + 2
                if len(buf) < start + size + 2:
                    break  # the body has not all arrived
                if buf[start + size:start + size + 2] != b"\r\n":
                    raise ReplyError("reply body not followed by CRLF")
                body = buf[start:start + size]
                replies.append(Reply(words[0].decode("ascii", "replace"),
                                     tuple(w.decode("ascii", "replace") for w in words[1:-1]), body))
                pos = start + size + 2
            else:
                replies.append(Reply(words[0].decode("ascii", "replace"),
                                     tuple(w.decode("ascii", "replace") for w in words[1:])))
                pos = eol + 2
        self._buf = buf[pos:]
        return replies


def _scalar(text: str):
    if text.lstrip("-").isdigit():
        return int(text)
    try:
        return float(text) if any(c.isdigit() for c in text) and text.count(".") == 1 else text
    except ValueError:
        return text


def yaml_fields(body: bytes) -> dict:
    """A stats body ("---\\nkey: value\\n...") as a dict; numbers as numbers."""
    fields = {}
    for line in body.decode("utf-8", "replace").splitlines():
        if line == "---" or ": " not in line:
            continue
        key, _, value = line.partition(": ")
        value = value.strip()
        if key == "name":  # a tube's name, unquoted, may look like a number
            fields[key] = value
        elif len(value) >= 2 and value[0] == value[-1] == '"':
            fields[key] = value[1:-1]
        else:
            fields[key] = _scalar(value)
    return fields


def yaml_items(body: bytes) -> list[str]:
    """A list body ("---\\n- a\\n- b\\n") as a list of strings."""
    return [line[2:] for line in body.decode("utf-8", "replace").splitlines() if line.startswith("- ")]
