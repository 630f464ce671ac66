"""The status page's operations: look into a tube or a job, and change the queue.

Routes (admin.py hands them here; all behind the admin token when one is set):
GET  /session     {"csrf": TOKEN}, and a session cookie (HttpOnly, SameSite=Strict)
GET  /tube/NAME   a tube's stats-tube fields and the next ready, delayed and buried
                  job, each with a safe preview of its body (haqueue/preview.py)
GET  /job/ID      a job's stats-job fields and a preview of its body
POST /op          one change, as JSON: {"csrf": TOKEN, "op": OP, ...} where OP is
                  put (tube, body, pri, delay, ttr), kick (tube, count),
                  kick-job (job), delete (job), pause (tube, seconds), resume (tube)

Rules.
- GET changes nothing. A change is a POST carrying the CSRF token of the
  session its cookie names; without both it is refused (403) before it is
  acted on. The token is an HMAC of the session id under a key made at
  start-up, so no session table grows; a forged cross-site POST has the
  cookie but cannot read /session to learn the token.
- A change runs on the leader exactly as a client's command does: through an
  in-memory beanstalkd connection (a real Session on a transport that keeps
  what is written), so it is parsed, batched, committed through Raft and
  answered only once applied (docs/design.md I1), with beanstalkd's own
  replies. That connection names itself `haqueue-operator status-page`, so
  each change is an event naming the browser's address, the operation and
  the job (operator_events.py). On a follower a change answers 503 and names
  the leader's page.
- Reads come from this node's replicated state under its lock (followers hold
  the same), and are bounded: a peek is the head of a heap or a list, stats
  are counters, a body preview at most preview.PAGE_LIMIT characters. A tube
  with 100,000 jobs answers as fast as one with 10.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import os
import re

from haqueue.preview import preview
from haqueue.protocol.beanstalk_replies import Reply, ReplyReader, yaml_fields
from haqueue.server.batcher import wall_ms
from haqueue.server.beanstalk.stats import job_stats, tube_stats

COOKIE = "haqueue-session"
OPERATOR_NAME = "status-page"
REPLY_TIMEOUT = 10.0  # a commit takes milliseconds; past this the outcome is unknown
_TUBE = re.compile(r"[A-Za-z0-9+/;.$_()][A-Za-z0-9\-+/;.$_()]{0,199}")  # protocol/beanstalk.py
_U32 = 2**32 - 1
STATUS_OF_REPLY = {"NOT_FOUND": 404, "DRAINING": 409, "OUT_OF_MEMORY": 409, "JOB_TOO_BIG": 409,
                   "BAD_FORMAT": 400, "EXPECTED_CRLF": 400, "INTERNAL_ERROR": 500}
SUCCESS = {"put": "INSERTED", "kick": "KICKED", "kick-job": "KICKED", "delete": "DELETED",
           "pause": "PAUSED", "resume": "PAUSED"}


class Answer(Exception):
    """An HTTP answer other than 200: status and a JSON body."""

    def __init__(self, status: int, message: str, **more) -> None:
        super().__init__(message)
        self.status = status
        self.body = {"ok": False, "error": message, **more}


class Sessions:
    """Per-session CSRF tokens without a table: HMAC(key, session id)."""

    def __init__(self) -> None:
        self._key = os.urandom(32)

    def new_id(self) -> str:
        return os.urandom(16).hex()

    def csrf(self, session_id: str) -> str:
        return hmac.new(self._key, session_id.encode(), hashlib.sha256).hexdigest()

    def valid(self, session_id: str | None, token) -> bool:
        if not session_id or not isinstance(token, str) or not token:
            return False
        return hmac.compare_digest(self.csrf(session_id), token)


def cookie_value(cookie_header: str | None, name: str = COOKIE) -> str | None:
    for part in (cookie_header or "").split(";"):
        key, _, value = part.strip().partition("=")
        if key == name and re.fullmatch(r"[0-9a-f]{32}", value):
            return value
    return None


# ------------------------------------------------------------------ reads
def tube_view(server, name: str) -> dict:
    if not _TUBE.fullmatch(name):
        raise Answer(400, f"{name!r} is not a tube name")
    now = wall_ms()
    state = server.state  # the loop's thread applies entries: a read here sees whole ones
    if not server.directory.exists(name, state):
        raise Answer(404, f"tube {name} not found")
    stats = yaml_fields(tube_stats(name, state, server.directory, server.waiting_on(name), now))
    heads = {"ready": state.peek_ready(name), "delayed": state.peek_delayed(name),
             "buried": state.peek_buried(name)}
    peeks = {kind: None if job is None else _job_summary(job) for kind, job in heads.items()}
    return {"tube": name, "stats": stats, "peek": peeks, "leader": bool(server.serving)}


def job_view(server, job_id: int) -> dict:
    state = server.state
    job = state.job(job_id)
    if job is None:
        raise Answer(404, f"job {job_id} not found")
    stats = yaml_fields(job_stats(job, state, wall_ms()))
    summary = _job_summary(job)
    return {**summary, "stats": stats}


def _job_summary(job) -> dict:
    return {"id": job.id, "pri": job.pri, "tube": job.tube.name, "preview": preview(job.body).as_dict()}


# ---------------------------------------------------------------- changes
def _script(request: dict) -> tuple[str, bytes, int, dict]:
    """(op, protocol bytes, replies expected, facts for the answer); Answer(400) if malformed."""
    op = request.get("op")

    def tube() -> str:
        name = request.get("tube")
        if not isinstance(name, str) or not _TUBE.fullmatch(name):
            raise Answer(400, f"{op}: 'tube' must be a tube name")
        return name

    def number(key: str, default=None, low: int = 0, high: int = _U32) -> int:
        value = request.get(key, default)
        if isinstance(value, str) and value.strip().isdigit():
            value = int(value)
        if type(value) is not int or not low <= value <= high:
            raise Answer(400, f"{op}: '{key}' must be a whole number from {low} to {high}")
        return value

    if op == "put":
        name, body = tube(), request.get("body")
        if not isinstance(body, str):
            raise Answer(400, "put: 'body' must be text")
        data = body.encode("utf-8")
        pri, delay, ttr = number("pri", 0), number("delay", 0), number("ttr", 60)
        return op, (f"use {name}\r\nput {pri} {delay} {ttr} {len(data)}\r\n".encode() + data + b"\r\n"), 2, \
            {"tube": name}
    if op == "kick":
        name, count = tube(), number("count", 1)
        return op, f"use {name}\r\nkick {count}\r\n".encode(), 2, {"tube": name}
    if op in ("kick-job", "delete"):
        job_id = number("job", None, 1, 2**64 - 1)
        return op, f"{op} {job_id}\r\n".encode(), 1, {"job": job_id}
    if op == "pause":
        name, seconds = tube(), number("seconds", None)
        return op, f"pause-tube {name} {seconds}\r\n".encode(), 1, {"tube": name, "seconds": seconds}
    if op == "resume":
        name = tube()
        return op, f"pause-tube {name} 0\r\n".encode(), 1, {"tube": name}
    raise Answer(400, f"unknown operation {op!r}; one of {', '.join(sorted(SUCCESS))}")


async def perform(server, peer, request: dict, leader_page: str | None) -> dict:
    """Run one change on this node if it leads; the answer's JSON, or Answer."""
    op, script, expected, facts = _script(request)
    if not server.serving:
        raise Answer(503, "this node is not the leader: changes are made on the leader's page",
                     leader_page=leader_page)
    reply = (await converse(server, peer, script, expected))[-1]
    if reply.word != SUCCESS[op]:
        raise Answer(STATUS_OF_REPLY.get(reply.word, 409), f"{op}: {' '.join((reply.word, *reply.args))}",
                     reply=reply.word, **facts)
    if op == "put":
        facts["job"] = int(reply.args[0])
    elif op == "kick":
        facts["kicked"] = int(reply.args[0])
    return {"ok": True, "op": op, "reply": " ".join((reply.word, *reply.args)), **facts}


class _PageTransport(asyncio.Transport):
    """What the in-memory connection writes, read into replies as it arrives."""

    def __init__(self, loop: asyncio.AbstractEventLoop, peer, expected: int) -> None:
        super().__init__()
        self.loop = loop
        self.peer = peer
        self.session = None
        self.reader = ReplyReader()
        self.replies: list[Reply] = []
        self.expected = expected
        self.answered: asyncio.Future = loop.create_future()
        self.closing = False

    def write(self, data) -> None:
        self.replies += self.reader.feed(bytes(data))
        if len(self.replies) >= self.expected and not self.answered.done():
            self.answered.set_result(self.replies)

    def close(self) -> None:
        if not self.closing:
            self.closing = True
            self.loop.call_soon(self.session.connection_lost, None)
        if not self.answered.done():
            self.answered.set_exception(Answer(503, "outcome unknown: leadership changed before the "
                                                    "reply; look at the job or tube again"))

    def abort(self) -> None:
        self.close()

    def is_closing(self) -> bool:
        return self.closing

    def get_extra_info(self, name, default=None):
        return self.peer if name == "peername" else default

    def get_write_buffer_size(self) -> int:
        return 0

    def set_write_buffer_limits(self, high=None, low=None) -> None:
        pass

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


async def converse(server, peer, script: bytes, expected: int) -> list[Reply]:
    """`script` through a beanstalkd Session on this leader; its `expected` replies."""
    from haqueue.server.beanstalk.session import Session  # the leader's own command path

    transport = _PageTransport(server.loop, peer, expected + 1)
    session = Session(server, server.next_conn_id())
    transport.session = session
    session.connection_made(transport)
    session.data_received(f"haqueue-operator {OPERATOR_NAME}\r\n".encode() + script)
    try:
        replies = await asyncio.wait_for(asyncio.shield(transport.answered), REPLY_TIMEOUT)
    except asyncio.TimeoutError:
        raise Answer(503, f"outcome unknown: no reply within {REPLY_TIMEOUT:g} s") from None
    finally:
        transport.close()
        if transport.answered.done():
            transport.answered.exception()  # seen: an abort after the reply is not an error
    return replies[1:]


def parse_request(body: bytes) -> dict:
    try:
        request = json.loads(body)
    except ValueError:
        raise Answer(400, "the request body must be JSON") from None
    if not isinstance(request, dict):
        raise Answer(400, "the request body must be a JSON object")
    return request
