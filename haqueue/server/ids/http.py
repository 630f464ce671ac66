"""GET /id/RULE/APP[?salt=S&seq=Q] and GET /id/RULE/APP/monitor: the id service on the admin port.

The admin endpoint (server/admin.py) hands a path under /id/ here. The request
is checked as a datagram's fields are (protocol/idjson.py), answered by the same
IdRequests as the UDP port (udp.py), and the reply is the UDP reply's JSON body
with an HTTP status for its outcome (ID_STATUS; docs/id-service.md). A follower's
503 carries the leader's address (admin.py adds Retry-After and Location).
"""

from __future__ import annotations

import asyncio
from typing import Callable
from urllib.parse import parse_qs, unquote

from haqueue.protocol import idjson
from haqueue.protocol.idjson import Outcome
from haqueue.server.ids.udp import IdRequests

# The id service's outcomes as HTTP statuses; None (outcome unknown) and anything else: 503.
ID_STATUS = {Outcome.OK: 200, Outcome.BAD_REQUEST: 400, Outcome.UNKNOWN_ACTION: 400, Outcome.UNKNOWN_RULE: 404,
             Outcome.NOT_EXIST: 404, Outcome.EXHAUSTED: 409, Outcome.TOO_MANY_APPS: 409, Outcome.NOT_LEADER: 503,
             Outcome.DISK_FULL: 507}  # Insufficient Storage: below the disk reserve (disk_reserve.py)


async def answer(path: str, journaled: bool, requests: Callable[[], IdRequests]) -> tuple[int, str, bytes]:
    """(status, content type, body) for a path under /id/. `journaled`: the node keeps a
    data directory; `requests()` gives the node's IdRequests (made when first asked)."""
    if not journaled:
        # In memory a restart starts the counters again (docs/id-service.md, "Durability").
        return 503, "application/json", idjson.error(None, Outcome.NO_JOURNAL, "ids need -b DIR") + b"\n"
    route, _, query = path.partition("?")
    try:
        parts = [unquote(p, errors="strict") for p in route.split("/")[2:]]
        fields = {k: v[0] for k, v in parse_qs(query, errors="strict").items()}
    except UnicodeDecodeError:
        parts, fields = [], {}
    if len(parts) == 3 and parts[2] == "monitor":
        action = "monitor"
    elif len(parts) == 2:
        action = "get"
    else:
        return 400, "application/json", idjson.error(None, Outcome.BAD_REQUEST, "expected /id/RULE/APP")
    seq = fields.get("seq", idjson.NO_SEQ)
    if seq is idjson.NO_SEQ or idjson.seq_fits(seq):
        request = idjson.check_fields(action, parts[0], parts[1], fields.get("salt"), seq)
    else:
        request = idjson.BadRequest(Outcome.BAD_REQUEST, "bad seq")
    answered = asyncio.get_running_loop().create_future()
    requests().handle(request, lambda outcome, body: answered.done() or answered.set_result((outcome, body)))
    outcome, body = await answered
    if body is None:
        body = idjson.error(request, Outcome.UNAVAILABLE, "outcome unknown, retry")
    return ID_STATUS.get(outcome, 503), "application/json", body + b"\n"
