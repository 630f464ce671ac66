"""Just enough of the NATS client protocol for bench to drive JetStream: a sans-I/O parser.

Rules: the protocol is text lines (INFO, MSG, HMSG, PING, PONG, +OK, -ERR) with
sized payloads; `Messages.feed` turns bytes into events and answers nothing
itself: a PING is an event the caller answers with PONG. JetStream is reached
through plain subjects: a publish to a stream's subject with a reply inbox is
answered with a PubAck (JSON) on that inbox; a pull consumer's next message is a
request to `$JS.API.CONSUMER.MSG.NEXT.<stream>.<consumer>`, and a message is
acknowledged by publishing `+ACK` to the reply subject it came with (with a
reply inbox of our own for AckSync: the server answers once the ack is stored).
Status messages (HMSG with `NATS/1.0 408 ...`) carry their code in the event.
A raw parser rather than a client library: the load must never be what limits
the servers (a publish is one precomputed byte string).
"""

from __future__ import annotations

import json

from haqueue.bench.load import BenchError

CONNECT = (b'CONNECT {"verbose":false,"pedantic":false,"headers":true,"no_responders":true,'
           b'"protocol":1,"name":"haqueue-bench","lang":"python","version":"0"}\r\n')
PING, PONG = b"PING\r\n", b"PONG\r\n"

# event kinds
MSG, PING_EVENT, PONG_EVENT, INFO, ERR = "MSG", "PING", "PONG", "INFO", "-ERR"


class NatsError(BenchError):
    """The server said something the bench cannot go on from (one line)."""


def sub(subject: bytes, sid: int) -> bytes:
    return b"SUB %s %d\r\n" % (subject, sid)


def pub(subject: bytes, reply: bytes, payload: bytes) -> bytes:
    return b"PUB %s %s %d\r\n%s\r\n" % (subject, reply, len(payload), payload)


def pub_parts(subject: bytes, reply: bytes, body_size: int) -> tuple[bytes, bytes]:
    """A publish split around its body: (before the body's bytes, after them)."""
    return b"PUB %s %s %d\r\n" % (subject, reply, body_size), b"\r\n"


class Message:
    """One MSG or HMSG: subject, reply subject (b"" if none), status code (0 if none), payload."""

    __slots__ = ("subject", "sid", "reply", "status", "payload")

    def __init__(self, subject: bytes, sid: bytes, reply: bytes, status: int, payload: bytes) -> None:
        self.subject, self.sid, self.reply, self.status, self.payload = subject, sid, reply, status, payload


class Messages:
    """Incremental parser: feed bytes, get events: Message, or (kind, line) for the rest."""

    __slots__ = ("buf",)

    def __init__(self) -> None:
        self.buf = b""

    def feed(self, data: bytes) -> list:
        buf = self.buf + data if self.buf else data
        out: list = []
        pos, end = 0, len(buf)
        while pos < end:
            eol = buf.find(b"\r\n", pos)
            if eol < 0:
                break
            line = buf[pos:eol]
            op = line[:4]
            if op == b"MSG ":
                parts = line.split(b" ")
                size = int(parts[-1])
                stop = eol + 2 + size
                if stop + 2 > end:
                    break
                reply = parts[3] if len(parts) == 5 else b""
                out.append(Message(parts[1], parts[2], reply, 0, buf[eol + 2:stop]))
                pos = stop + 2
            elif op == b"HMSG":
                parts = line.split(b" ")
                header_size, size = int(parts[-2]), int(parts[-1])
                stop = eol + 2 + size
                if stop + 2 > end:
                    break
                reply = parts[3] if len(parts) == 6 else b""
                headers = buf[eol + 2:eol + 2 + header_size]
                status = 0
                first = headers.split(b"\r\n", 1)[0]  # "NATS/1.0 408 Request Timeout"
                if first.startswith(b"NATS/1.0 ") and first[9:12].isdigit():
                    status = int(first[9:12])
                out.append(Message(parts[1], parts[2], reply, status, buf[eol + 2 + header_size:stop]))
                pos = stop + 2
            else:
                pos = eol + 2
                if line == b"PING":
                    out.append((PING_EVENT, line))
                elif line == b"PONG":
                    out.append((PONG_EVENT, line))
                elif line == b"+OK":
                    continue
                elif op == b"INFO":
                    out.append((INFO, line))
                elif line.startswith(b"-ERR"):
                    raise NatsError(f"server error: {line[5:].decode('utf-8', 'replace').strip()}")
                else:
                    raise NatsError(f"unexpected line from the server: {line[:80]!r}")
        self.buf = buf[pos:]
        return out


def api_reply(payload: bytes) -> dict:
    """A JetStream API reply as a dict; NatsError when it reports an error."""
    try:
        doc = json.loads(payload)
    except ValueError:
        raise NatsError(f"JetStream replied with something not JSON: {payload[:80]!r}") from None
    if "error" in doc:
        err = doc["error"]
        raise NatsError(f"JetStream error {err.get('code')}: {err.get('description')}")
    return doc
