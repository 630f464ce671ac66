"""Differential scripts: the same bytes to two servers, replies compared after normalising.

Owns the script format, running a script against one server, normalising what came back,
and rendering two transcripts as a readable diff. Expected replies are never stored: the
reference is a real beanstalkd 1.12 run in the same test.

Script format (tests/differential/scripts/*.txt), one directive per line:

    # comment (whole lines only)           @args -z 100   (server flags; before any step)
    a> put 0 0 1 5      send the text and CRLF on connection a (opened on first use)
    a> hello
    a>> stats\\r\\nsta    send exactly the text, no CRLF appended
    a< 2                read 2 replies on a (default: 1 reply, 3 s)
    b< 1 within 4       read 1 reply, waiting at most 4 s (for delays, ttr, timeouts)
    b< 1 within 4 nudging a
                        the same, sending "peek 0" on a every 0.1 s meanwhile (its
                        NOT_FOUND replies are swallowed). beanstalkd 1.12 sometimes never
                        expires the reservation of a connection that stays idle (seen in
                        about 1 run in 5 here); activity on that connection makes it fire.
    a< closed           expect the server to close a
    a~ close            close a from the client side
    a~ half-close       shut down a's sending side (shutdown(SHUT_WR)); replies can still be read
    ~ waiting default 1 wait (bounded) until tube default has 1 connection waiting to reserve
    ~ drain             send the server SIGUSR1 (drain mode) and wait (bounded) until its
                        stats say "draining: true"

The connection name may be omitted (it is then "a"). In text: \\r \\n \\t \\0 \\\\ \\xHH
escapes; {TEXT*N} repeats TEXT N times (e.g. use {a*200}); #N stands for the job id this
server gave the N-th job to appear in its replies (ids are normalised the same way), so
"delete #1" deletes whatever the first job is called on each server. Write a trailing space
as \\x20: lines ending in whitespace are rejected, since editors strip it.

Normalising: job ids become #1, #2... in order of appearance; in stats bodies the values of
timing- and host-dependent keys (age, time-left, uptime, rusage-*, pid, hostname, os,
platform, id of the server, version, binlog-*, pause-time-left) become "*", keys and their
order are kept, and the OK byte count is recomputed. `~ waiting` polls with stats-tube on
its own connection, so scripts using it also mask cmd-stats-tube in global stats; scripts
that nudge mask cmd-peek, and scripts that drain mask cmd-stats, for the same reason.

A run never raises for a server's misbehaviour: a timeout or an early close is recorded in
the transcript (a line starting with "!!") and the run stops there, so the diff shows where
the two servers parted. Every script ends by checking each open connection is in step:
"peek 0" must be the next reply (NOT_FOUND) there.
"""

from __future__ import annotations

import difflib
import os
import re
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.servers import ConnectionClosed, RawConn, ServerProcess, split_replies

DEFAULT_TIMEOUT = 3.0
MAX_TIMEOUT = 10.0
VOLATILE_KEYS = frozenset({
    "age", "time-left", "uptime", "rusage-utime", "rusage-stime", "pid", "hostname", "os",
    "platform", "version", "binlog-oldest-index", "binlog-current-index",
    "binlog-records-migrated", "binlog-records-written", "binlog-max-size", "pause-time-left",
})
SYNC_POLL = 0.01
NUDGE_EVERY = 0.1


class ScriptError(ValueError):
    """A malformed script (the script's fault, not a server's)."""


@dataclass
class Step:
    lineno: int
    source: str  # the script line, for transcripts
    conn: str
    op: str  # send | recv | closed | close | half-close | drain | waiting
    data: bytes = b""
    count: int = 1
    timeout: float = DEFAULT_TIMEOUT
    tube: bytes = b""
    nudge: str = ""  # a connection to keep active while waiting


@dataclass
class Script:
    name: str
    server_args: list[str] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)


_LINE = re.compile(r"(?P<conn>[a-z][a-z0-9]*)?(?P<op>>>|>|<|~)(?: (?P<rest>.*))?")
_RECV = re.compile(r"(?P<what>\d+|closed)?(?: within (?P<secs>\d+(?:\.\d+)?))?"
                   r"(?: nudging (?P<nudge>[a-z][a-z0-9]*))?")
_REPEAT = re.compile(r"\{(.*?)\*(\d+)\}")
_ESCAPE = re.compile(r"\\(x[0-9a-fA-F]{2}|.)")
_SIMPLE_ESCAPES = {"r": "\r", "n": "\n", "t": "\t", "0": "\0", "\\": "\\"}


def decode_text(text: str, lineno: int = 0) -> bytes:
    def escape(m: re.Match) -> str:
        code = m[1]
        if code in _SIMPLE_ESCAPES:
            return _SIMPLE_ESCAPES[code]
        if code.startswith("x") and len(code) == 3:
            return chr(int(code[1:], 16))
        raise ScriptError(f"line {lineno}: unknown escape \\{code}")

    expanded = _REPEAT.sub(lambda m: m[1] * int(m[2]), text)
    return _ESCAPE.sub(escape, expanded).encode("latin-1")


def parse_script(text: str, name: str = "<script>") -> Script:
    script = Script(name)
    for lineno, raw in enumerate(text.splitlines(), 1):
        if not raw.strip() or raw.lstrip().startswith("#"):
            continue
        if raw != raw.rstrip():
            raise ScriptError(f"{name}:{lineno}: trailing whitespace (write it as \\x20)")
        if raw.startswith("@args"):
            if script.steps:
                raise ScriptError(f"{name}:{lineno}: @args must come before any step")
            script.server_args += raw.split()[1:]
            continue
        m = _LINE.fullmatch(raw)
        if m is None:
            raise ScriptError(f"{name}:{lineno}: not a step: {raw!r}")
        conn, op, rest = m["conn"] or "a", m["op"], m["rest"] or ""
        step = Step(lineno, raw, conn, op)
        if op in (">", ">>"):
            step.op = "send"
            step.data = decode_text(rest, lineno) + (b"\r\n" if op == ">" else b"")
        elif op == "<":
            r = _RECV.fullmatch(rest)
            if r is None:
                raise ScriptError(f"{name}:{lineno}: expected '< N [within S]' or '< closed'")
            step.op = "closed" if r["what"] == "closed" else "recv"
            step.count = int(r["what"]) if r["what"] and r["what"] != "closed" else 1
            step.timeout = min(float(r["secs"] or DEFAULT_TIMEOUT), MAX_TIMEOUT)
            step.nudge = r["nudge"] or ""
            if step.nudge and (step.op != "recv" or step.nudge == conn):
                raise ScriptError(f"{name}:{lineno}: nudge another connection while reading")
        else:
            words = rest.split()
            if words == ["close"]:
                step.op = "close"
            elif words == ["half-close"]:
                step.op = "half-close"
            elif words == ["drain"]:
                step.op = "drain"
            elif len(words) == 3 and words[0] == "waiting" and words[2].isdigit():
                step.op, step.tube, step.count = "waiting", words[1].encode(), int(words[2])
            else:
                raise ScriptError(f"{name}:{lineno}: expected '~ close', '~ half-close', "
                                  "'~ drain' or '~ waiting TUBE N'")
        script.steps.append(step)
    return script


def load_script(path: Path) -> Script:
    return parse_script(path.read_text(), path.name)


# --- normalising -------------------------------------------------------------------------------

class IdMap:
    """One server's job ids, numbered in order of appearance."""

    def __init__(self) -> None:
        self.to_norm: dict[bytes, int] = {}
        self.to_real: dict[int, bytes] = {}

    def norm(self, real: bytes) -> bytes:
        if real not in self.to_norm:
            n = len(self.to_norm) + 1
            self.to_norm[real] = n
            self.to_real[n] = real
        return b"#%d" % self.to_norm[real]


_ID_REPLY = re.compile(rb"(INSERTED|BURIED|RESERVED|FOUND) (\d+)((?: \d+)?\r\n)")


HAQUEUE_STATS_PREFIXES = ("haqueue-", "raft-")


def normalise_yaml(body: bytes, ids: IdMap, mask: frozenset[str]) -> bytes:
    lines = body.split(b"\n")
    job_stats = len(lines) > 1 and lines[1].startswith(b"id: ") and b"\ntube: " in body
    out = []
    for line in lines:
        key, sep, value = line.partition(b": ")
        name = key.decode("latin-1")
        if sep and name.startswith(HAQUEUE_STATS_PREFIXES):
            continue  # haqueue may add keys after beanstalkd's (issue 2); compare the rest
        if sep and name in mask:
            line = key + b": *"
        elif sep and name == "id":
            line = key + b": " + (ids.norm(value) if job_stats else b"*")
        out.append(line)
    return b"\n".join(out)


def normalise_reply(reply: bytes, ids: IdMap, mask: frozenset[str]) -> bytes:
    m = _ID_REPLY.match(reply)
    if m:
        return m[1] + b" " + ids.norm(m[2]) + m[3] + reply[m.end():]
    if reply.startswith(b"OK ") and reply.endswith(b"\r\n"):
        header_end = reply.index(b"\r\n") + 2
        body = normalise_yaml(reply[header_end:-2], ids, mask)
        return b"OK %d\r\n%b\r\n" % (len(body), body)
    return reply


def render(reply: bytes) -> list[str]:
    """Reply bytes as readable lines, with \\r and \\n (and other controls) made visible."""
    text = reply.decode("latin-1")
    pieces = re.split(r"(?<=\n)", text)
    out = []
    for piece in pieces:
        if piece:
            out.append("".join(
                {"\r": "\\r", "\n": "\\n", "\t": "\\t", "\\": "\\\\"}.get(ch)
                or (ch if " " <= ch < "\x7f" else "\\x%02x" % ord(ch))
                for ch in piece))
    return out


# --- running -------------------------------------------------------------------------------------

_ID_REF = re.compile(rb"#(\d+)")


class _Stop(Exception):
    pass


class Run:
    """One script against one server; the result is a normalised transcript (list of lines)."""

    def __init__(self, server: ServerProcess, script: Script) -> None:
        self.server = server
        self.script = script
        self.ids = IdMap()
        self.conns: dict[str, RawConn] = {}
        self.closed: set[str] = set()
        self.sync_conn: RawConn | None = None
        self.lines: list[str] = []

    @property
    def mask(self) -> frozenset[str]:
        mask = set(VOLATILE_KEYS)
        if any(step.op == "waiting" for step in self.script.steps):
            mask.add("cmd-stats-tube")
        if any(step.op == "drain" for step in self.script.steps):
            mask.add("cmd-stats")
        if any(step.nudge for step in self.script.steps):
            mask.add("cmd-peek")
        return frozenset(mask)

    def transcript(self) -> list[str]:
        try:
            for step in self.script.steps:
                self._step(step)
            self._check_in_step()
        except _Stop:
            pass
        finally:
            for conn in list(self.conns.values()) + ([self.sync_conn] if self.sync_conn else []):
                conn.close()
        return self.lines

    def _conn(self, name: str) -> RawConn:
        if name not in self.conns:
            self.conns[name] = RawConn(self.server.host, self.server.port, DEFAULT_TIMEOUT)
            self.closed.discard(name)
        return self.conns[name]

    def _record(self, line: str) -> None:
        self.lines.append(line)

    def _record_replies(self, conn: str, replies: list[bytes]) -> None:
        for reply in replies:
            rendered = render(normalise_reply(reply, self.ids, self.mask))
            self._record(f"{conn}< {rendered[0]}")
            for more in rendered[1:]:
                self._record(f"{conn}<   {more}")

    def _fail(self, step: Step | None, what: str) -> None:
        where = f"line {step.lineno}: " if step else ""
        self._record(f"!! {where}{what}")
        raise _Stop

    def _step(self, step: Step) -> None:
        if step.op == "send":
            self._record(step.source if step.source[:1].isalpha() else "a" + step.source)
            data = _ID_REF.sub(lambda m: self._real_id(step, int(m[1])), step.data)
            try:
                self._conn(step.conn).send(data)
            except OSError as exc:
                self._fail(step, f"send on {step.conn} failed: {exc}")
        elif step.op == "recv":
            conn = self._conn(step.conn)
            try:
                if step.nudge:
                    replies = self._recv_nudging(step, conn)
                else:
                    replies = conn.recv_replies(step.count, step.timeout)
            except (TimeoutError, ConnectionClosed) as exc:
                self._record_replies(step.conn, split_replies(conn.buf)[0])  # what did come
                kind = "closed" if isinstance(exc, ConnectionClosed) else "timed out"
                partial = bytes(split_replies(conn.buf)[1])
                self._fail(step, f"{step.conn}: {kind} waiting for {step.count} replies "
                                 f"within {step.timeout:g}s; incomplete reply {partial[:200]!r}")
            self._record_replies(step.conn, replies)
        elif step.op == "closed":
            conn = self._conn(step.conn)
            try:
                before = conn.wait_closed(step.timeout)
            except TimeoutError:
                self._fail(step, f"{step.conn}: still open after {step.timeout:g}s")
            replies, rest = split_replies(before)
            self._record_replies(step.conn, replies)
            self._record(f"{step.conn}< (closed)" + (f" after {rest!r}" if rest else ""))
            self.closed.add(step.conn)
        elif step.op == "close":
            self._record(f"{step.conn}~ close")
            conn = self.conns.pop(step.conn, None)
            if conn is not None:
                conn.close()
            self.closed.discard(step.conn)
        elif step.op == "half-close":
            self._record(f"{step.conn}~ half-close")
            try:
                self._conn(step.conn).half_close()
            except OSError as exc:
                self._fail(step, f"half-close of {step.conn} failed: {exc}")
        elif step.op == "waiting":
            self._wait_waiting(step)
        elif step.op == "drain":
            self._drain(step)

    def _recv_nudging(self, step: Step, conn: RawConn) -> list[bytes]:
        other = self._conn(step.nudge)
        deadline = time.monotonic() + step.timeout
        while True:
            try:
                other.send(b"peek 0\r\n")
                nudged = other.recv_reply(DEFAULT_TIMEOUT)
            except (OSError, TimeoutError, ConnectionClosed) as exc:
                self._fail(step, f"nudging {step.nudge} failed: {exc}")
            if nudged != b"NOT_FOUND\r\n":
                self._record_replies(step.nudge, [nudged])
                self._fail(step, f"nudging {step.nudge} got an unexpected reply")
            remaining = deadline - time.monotonic()
            try:
                return conn.recv_replies(step.count, max(0.0, min(NUDGE_EVERY, remaining)))
            except TimeoutError:
                if remaining <= NUDGE_EVERY:
                    raise

    def _real_id(self, step: Step, n: int) -> bytes:
        if n not in self.ids.to_real:
            self._fail(step, f"#{n} used before job {n} appeared in a reply")
        return self.ids.to_real[n]

    def _wait_waiting(self, step: Step) -> None:
        self._record(f"~ waiting {step.tube.decode()} {step.count}")
        self._poll(step, b"stats-tube " + step.tube, b"\ncurrent-waiting: %d\n" % step.count,
                   f"tube {step.tube.decode()} never had {step.count} waiting")

    def _drain(self, step: Step) -> None:
        self._record("~ drain")
        os.kill(self.server.pid, signal.SIGUSR1)
        self._poll(step, b"stats", b"\ndraining: true\n", "the server never said it was draining")

    def _poll(self, step: Step, command: bytes, want: bytes, failure: str) -> None:
        """Send `command` on the sync connection until its reply holds `want` (bounded)."""
        if self.sync_conn is None:
            self.sync_conn = RawConn(self.server.host, self.server.port, DEFAULT_TIMEOUT)
        deadline = time.monotonic() + step.timeout
        last = b""
        while time.monotonic() < deadline:
            try:
                self.sync_conn.send(command + b"\r\n")
                last = self.sync_conn.recv_reply(max(0.1, deadline - time.monotonic()))
            except (OSError, TimeoutError, ConnectionClosed) as exc:
                self._fail(step, f"{command.decode()} poll failed: {exc}")
            if want in last:
                return
            time.sleep(SYNC_POLL)
        self._fail(step, f"{failure}; last {last[:300]!r}")

    def _check_in_step(self) -> None:
        """Each open connection answers `peek 0` next: no stray replies, no half-read line."""
        for name, conn in self.conns.items():
            if name in self.closed or conn.closed_by_peer:
                continue
            try:
                conn.send(b"peek 0\r\n")
                got = conn.recv_until(lambda buf: buf.endswith(b"NOT_FOUND\r\n"), DEFAULT_TIMEOUT)
            except (OSError, TimeoutError, ConnectionClosed) as exc:
                self._fail(None, f"{name}: not in step at the end of the script: {exc}")
            replies, _ = split_replies(got)
            if len(replies) > 1:
                self._record(f"!! {name}: unexpected replies at the end of the script:")
                self._record_replies(name, replies[:-1])


def run_script(server: ServerProcess, script: Script) -> list[str]:
    return Run(server, script).transcript()


def diff(reference: list[str], candidate: list[str], ref_name: str, cand_name: str) -> str:
    return "\n".join(difflib.unified_diff(reference, candidate, ref_name, cand_name, n=6,
                                          lineterm=""))
