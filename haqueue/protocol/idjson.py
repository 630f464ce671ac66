"""The id service's JSON/UDP codec (id_server compatible), sans-I/O.

One JSON object per datagram (docs/id-service.md, "Wire protocol (UDP)"). `parse` turns a
datagram into a GetId, a Monitor, a BadRequest (the reply is an error) or
None (no reply at all); the reply builders turn results into bytes. No
socket, no clock: the UDP and HTTP front ends (server/ids/udp.py,
server/admin.py) own the I/O.

Bounds, and why:
- a request is 47..1,400 bytes: 47 is the smallest valid request
  (`{"action":"get","rule_name":"x","app_name":"y"}`), 1,400 never fragments
  on a 1,500-byte MTU. Outside them, and for bytes that are not a JSON
  object, there is no reply: junk is not reflected.
- every reply is at most 256 bytes, because id_server's own client reads 256
  bytes (`fread($sock, 256)`). `code`, `message`, `data`, `error`, `leader`
  and `seq` always fit (an id is at most 64 characters, a seq at most 64
  bytes serialized); `action`, `rule_name`, `app_name` and `salt` are echoed,
  in that order, while the reply stays within 256 bytes. So a reply is at
  most 256/47 ≈ 5.4 times its request: the amplification bound.
- `code == 0` means success and nothing else does (id_server's clients test
  exactly that); every failure is code -1 with a machine-readable `error`.

Deviations from id_server, each deliberate: an unknown action is an error
(id_server treated it as monitor); a missing or mistyped field gets a
bad_request reply (id_server 2017 stayed silent); app_name also refuses
backslash and DEL; seq is echoed only when sent, and only a JSON scalar.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from haqueue.core.idrules import civil

MIN_REQUEST = 47
MAX_REQUEST = 1400
MAX_REPLY = 256
MAX_NAME = 64  # rule_name and app_name, bytes of UTF-8
MAX_SALT = 64
MAX_SEQ = 64  # bytes of the seq as serialized in the reply

CREATE_ACTIONS = ("get", "create")
# Bytes an app_name may not hold: id_server's set (0-32 and ! " # % & ' < >)
# plus backslash and DEL.
_FORBIDDEN_APP_BYTES = frozenset(range(33)) | frozenset(b"!\"#%&'<>\\\x7f")


class Outcome(StrEnum):
    """What an id request came to: OK, or the error its reply names (`"error": ...`), in the
    wire's words. The server's front ends hand it on with the reply's bytes (the admin port
    maps it to an HTTP status) and compare outcomes by these names, never as literals."""

    OK = "ok"
    BAD_REQUEST = "bad_request"
    UNKNOWN_ACTION = "unknown_action"
    UNKNOWN_RULE = "unknown_rule"
    NOT_EXIST = "not_exist"
    EXHAUSTED = "exhausted"
    TOO_MANY_APPS = "too_many_apps"
    NOT_LEADER = "not_leader"
    DISK_FULL = "disk_full"  # below the leader's disk reserve (server/disk_reserve.py)
    NO_JOURNAL = "no_journal"  # GET /id/ on a node without a data directory
    UNAVAILABLE = "unavailable"  # GET /id/ whose outcome is unknown: retry


NO_SEQ = object()  # the request carried no seq: none is echoed


@dataclass(frozen=True)
class GetId:
    action: str  # "get" or "create", echoed
    rule: str
    app: str
    salt: str | None = None
    seq: Any = NO_SEQ


@dataclass(frozen=True)
class Monitor:
    rule: str
    app: str
    seq: Any = NO_SEQ
    action: str = "monitor"


@dataclass(frozen=True)
class BadRequest:
    error: Outcome  # BAD_REQUEST or UNKNOWN_ACTION
    message: str
    seq: Any = NO_SEQ


Request = GetId | Monitor | BadRequest


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")  # NaN, Infinity: Python's json accepts them


_DECODE = json.JSONDecoder(parse_constant=_reject_constant).decode  # one decoder, not one per datagram


def _decode(datagram: bytes) -> dict | None:
    if not MIN_REQUEST <= len(datagram) <= MAX_REQUEST:
        return None
    try:
        obj = _DECODE(datagram.decode("utf-8"))
    except (ValueError, RecursionError):  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        return None
    return obj if type(obj) is dict else None


def _seq_of(obj: dict) -> tuple[Any, bool]:
    """(seq, ok): a JSON scalar at most MAX_SEQ bytes serialized, or absent."""
    if "seq" not in obj:
        return NO_SEQ, True
    seq = obj["seq"]
    return (seq, True) if seq_fits(seq) else (NO_SEQ, False)


def seq_fits(seq: Any) -> bool:
    if seq is not None and type(seq) not in (str, int, float, bool):
        return False
    try:
        return len(_dumps(seq)) <= MAX_SEQ
    except ValueError:  # an int too long to print, or a float that overflowed (1e999)
        return False


def _name_ok(name: Any) -> bool:
    if type(name) is not str:
        return False
    try:
        raw = name.encode()
    except UnicodeEncodeError:  # a lone surrogate ("\ud800")
        return False
    return 1 <= len(raw) <= MAX_NAME


def app_name_ok(app: Any) -> bool:
    return _name_ok(app) and not _FORBIDDEN_APP_BYTES.intersection(app.encode())


@functools.lru_cache(maxsize=1024)
def parse(datagram: bytes) -> Request | None:
    """A request, an error to reply, or None: no reply (see the module docstring).

    Cached by the datagram's bytes: a client asks with the same bytes again and
    again (id_server's client sends one fixed request per key), and a request is
    an immutable value. Decoding and checking it was a fifth of a segment-mode
    get's cost on the leader. The cache is bounded (at most 1,024 datagrams of
    at most MAX_REQUEST bytes), so junk or ever-changing seqs only evict."""
    obj = _decode(datagram)
    if obj is None:
        return None
    seq, seq_ok = _seq_of(obj)
    if not seq_ok:
        return BadRequest(Outcome.BAD_REQUEST, "bad seq")
    action = obj.get("action")
    if type(action) is not str:
        return BadRequest(Outcome.BAD_REQUEST, "need action", seq)
    if action not in CREATE_ACTIONS and action != "monitor":
        return BadRequest(Outcome.UNKNOWN_ACTION, "unknown action", seq)
    return check_fields(action, obj.get("rule_name"), obj.get("app_name"), obj.get("salt"), seq)


def check_fields(action: str, rule: Any, app: Any, salt: Any = None, seq: Any = NO_SEQ) -> Request:
    """The field rules shared by UDP and the HTTP form (`GET /id/{rule}/{app}`)."""
    if rule is None:
        return BadRequest(Outcome.BAD_REQUEST, "need rule_name", seq)
    if not _name_ok(rule):
        return BadRequest(Outcome.BAD_REQUEST, "bad rule_name", seq)
    if app is None:
        return BadRequest(Outcome.BAD_REQUEST, "need app_name", seq)
    if not app_name_ok(app):
        return BadRequest(Outcome.BAD_REQUEST, "bad app_name", seq)
    if action == "monitor":
        return Monitor(rule, app, seq)
    if salt is not None and (type(salt) is not str or not salt.isascii() or len(salt) > MAX_SALT):
        return BadRequest(Outcome.BAD_REQUEST, "bad salt", seq)
    return GetId(action, rule, app, salt, seq)


def salt_fits(salt: str | None, salt_max_len: int) -> bool:
    """Whether a rule takes this salt: only a rule with {salt} takes one, at most
    its salt_max_len of [A-Za-z0-9] (the salt lands inside the id, and a rule's
    injectivity check counted on that alphabet's fixed meaning)."""
    if not salt:
        return True
    return 0 < salt_max_len and len(salt) <= salt_max_len and salt.isascii() and salt.isalnum()


# ----------------------------------------------------------------- replies
# ASCII only: a lone surrogate in a seq stays printable, and bytes are counted
# exactly as the client will read them. One encoder for every reply: json.dumps
# with options builds a new one per call, which was most of a reply's cost.
_ENCODE = json.JSONEncoder(ensure_ascii=True, separators=(",", ":"), allow_nan=False).encode


def _dumps(value: Any) -> bytes:
    return _ENCODE(value).encode()


@functools.lru_cache(maxsize=64)
def _key(name: str) -> bytes:
    return _dumps(name) + b":"


def _echoed(request: Request | None) -> tuple[bytes, ...]:
    if isinstance(request, GetId):
        return _echo_parts(request.action, request.rule, request.app, request.salt)
    if isinstance(request, Monitor):
        return _echo_parts("monitor", request.rule, request.app, None)
    return ()


@functools.lru_cache(maxsize=4096)
def _echo_parts(action: str, rule: str, app: str, salt: str | None) -> tuple[bytes, ...]:
    """The echoed fields, encoded: a client asks for the same rule and app again and again,
    so each key's echo is encoded once (a third of a reply's cost)."""
    echo = [("action", action), ("rule_name", rule), ("app_name", app)]
    if salt is not None:
        echo.append(("salt", salt))
    return tuple(_key(key) + _dumps(value) for key, value in echo)


def _bounded(head: list[bytes], request: Request | None) -> bytes:
    """head's fields (encoded), seq if sent, then the echoed fields while the reply fits."""
    seq = getattr(request, "seq", NO_SEQ)
    parts = list(head)
    if seq is not NO_SEQ:
        parts.append(b'"seq":' + _dumps(seq))
    size = 1 + sum(len(p) + 1 for p in parts)  # braces and commas
    for part in _echoed(request):
        if size + len(part) + 1 > MAX_REPLY:
            break
        parts.append(part)
        size += len(part) + 1
    return b"{" + b",".join(parts) + b"}"


def _encoded(head: list[tuple[str, Any]]) -> list[bytes]:
    return [_key(k) + _dumps(v) for k, v in head]


_SUCCESS_HEAD = (b'"code":0', b'"message":"success"')


def success(request: GetId, id_text: str) -> bytes:
    if id_text.isascii() and id_text.isprintable() and '"' not in id_text and "\\" not in id_text:
        # Nothing to escape (the usual id: digits, letters, a dash): the reply is
        # the request's cached frame around the id, as _bounded would build it.
        head, tail = _success_frame(request, len(id_text))
        return head + id_text.encode() + tail
    return _bounded([*_SUCCESS_HEAD, b'"data":' + _dumps(id_text)], request)


@functools.lru_cache(maxsize=4096)
def _success_frame(request: GetId, id_length: int) -> tuple[bytes, bytes]:
    """The bytes of a success reply before and after an id of `id_length` plain characters."""
    placeholder = b"@" * id_length  # the same length as the id: the same echoed fields fit
    reply = _bounded([*_SUCCESS_HEAD, b'"data":"' + placeholder + b'"'], request)
    at = reply.index(b'"data":"') + len(b'"data":"')
    return reply[:at], reply[at + id_length:]


def monitor_reply(request: Monitor, report: dict) -> bytes:
    """`data` keeps counter and node_offset; later keys go if the reply would pass 256 bytes."""
    data = dict(report)
    while True:
        head = [("code", 0), ("message", "ok"), ("data", data)]
        reply = _bounded(_encoded(head), request)
        if len(reply) <= MAX_REPLY or len(data) <= 2:
            return reply
        data.popitem()


def error(request: Request | None, error_name: Outcome, message: str, leader: str | None = None) -> bytes:
    head = [("code", -1), ("message", message), ("error", error_name)]
    if leader is not None and len(leader) <= 64:
        head.append(("leader", leader))
    return _bounded(_encoded(head), request)


def bad_request(request: BadRequest) -> bytes:
    return error(request, request.error, request.message)


def unknown_rule(request: Request) -> bytes:
    return error(request, Outcome.UNKNOWN_RULE, "unknown rule")


def not_exist(request: Request) -> bytes:
    return error(request, Outcome.NOT_EXIST, "not exist")


def too_many_apps(request: Request) -> bytes:
    return error(request, Outcome.TOO_MANY_APPS, "app limit reached")


def disk_full(request: Request) -> bytes:
    """The leader's disk is below its reserve (server/disk_reserve.py): retry later."""
    return error(request, Outcome.DISK_FULL, "disk reserve reached, retry later")


def not_leader(request: Request, leader: str | None) -> bytes:
    return error(request, Outcome.NOT_LEADER, "not leader", leader)


def exhausted(request: Request, cycle_end_ms: int | None, utc_offset: int = 0) -> bytes:
    """The counter's space is used up until its cycle ends (it never wraps)."""
    if cycle_end_ms is None:
        return error(request, Outcome.EXHAUSTED, "counter exhausted")
    # Integer calendar arithmetic: no year range to overflow (datetime stops at 9999).
    t = civil(cycle_end_ms // 1000, utc_offset)
    sign, offset = ("-", -utc_offset) if utc_offset < 0 else ("+", utc_offset)
    until = (f"{t.year:04}-{t.month:02}-{t.day:02}T{t.hour:02}:{t.minute:02}:{t.second:02}"
             f"{sign}{offset // 3600:02}:{offset % 3600 // 60:02}")
    return error(request, Outcome.EXHAUSTED, f"counter exhausted until {until}")
