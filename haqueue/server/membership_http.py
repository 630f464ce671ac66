"""POST /membership on the admin port: the leader's side of `cluster add-node` and `remove-node`.

The request is JSON: {"op": "add" | "remove", "id": NODE_ID, "address": RAFT_ADDRESS}
(RAFT_ADDRESS is ADDRESS:RAFT_PORT, the member's identity in Raft), and for
"add" optionally "host", "admin_port" and "client_port": the new node's, carried
in the entry so every node can show and reach it before its cluster file names
it (replication/membership.py, `member_info`). It carries
`X-Haqueue-Operator: NAME` (who asks, for the event; a header a browser form
cannot add, so a page elsewhere cannot make a node's browser change the
cluster) and, when the cluster has an admin token, the bearer token.

Answers (JSON):
- 200 {"members": [...]} once the change is committed;
- 409 {"error": "..."}: refused (a change in flight, a member twice, ...);
- 503 {"error": "not leader", "leader": RAFT_ADDRESS | null}: ask the leader;
- 503 {"error": "...", "handed_off_to": RAFT_ADDRESS}: this leader was asked to
  remove itself, so it held new entries back until a follower held its whole
  log, then handed leadership to it (replication/membership.py); ask the new
  leader again. 409 if no follower caught up within an election timeout (the
  leader serves on).
- 400 for a body that is not such a request, 401 without the token.

Every request that changes something is an event naming the operator and the
action ("membership_requested", then "membership_committed" or
"membership_failed"): events.record.
"""

from __future__ import annotations

import asyncio
import json

from haqueue import events

OPS = {"add": "add", "remove": "rem"}  # the CLI's words, pysyncobj's words
OPERATOR_HEADER = "x-haqueue-operator"
COMMIT_TIMEOUT = 10.0  # seconds to wait for the entry; past it the outcome is unknown


async def _hand_off(replica) -> str:
    """Hand leadership to a follower once it holds this leader's whole log (new entries
    held meanwhile, for at most an election timeout: replication/membership.py); its
    Raft address. Raises MembershipRefused with the leader's one line if it could not."""
    from haqueue.replication.replica import MembershipRefused

    outcome: asyncio.Future = asyncio.get_running_loop().create_future()
    replica.hand_off(lambda target, error: outcome.done() or outcome.set_result((target, error)))
    try:
        target, error = await asyncio.wait_for(outcome, COMMIT_TIMEOUT)
    except asyncio.TimeoutError:
        raise MembershipRefused(f"the hand-off did not end within {COMMIT_TIMEOUT} s: check the leader") from None
    if error is not None:
        raise MembershipRefused(error)
    return target


def _member_info(request: dict, node_id: str) -> dict | None | bool:
    """The added node's addresses the request names ({"id", "host", "admin_port",
    "client_port"}), None when it names none, False when they are malformed."""
    given = {key: request[key] for key in ("host", "admin_port", "client_port") if key in request}
    if not given:
        return None
    ports_ok = all(isinstance(given.get(key, 0), int) and 0 <= given.get(key, 0) < 65536
                   for key in ("admin_port", "client_port"))
    if not ports_ok or not isinstance(given.get("host", ""), str):
        return False
    return {"id": node_id, **given}


def _answer(status: int, body: dict) -> tuple[int, str, bytes]:
    return status, "application/json", json.dumps(body, sort_keys=True).encode() + b"\n"


async def handle(server, headers: dict, body: bytes, authorized: bool) -> tuple[int, str, bytes]:
    """(status, content type, body) for one POST /membership."""
    from haqueue.replication.replica import MembershipRefused

    if not authorized:
        return _answer(401, {"error": "token required"})
    operator = headers.get(OPERATOR_HEADER, "").strip()
    if not operator:
        return _answer(400, {"error": f"the {OPERATOR_HEADER} header is required"})
    try:
        request = json.loads(body)
        op, node_id, address = OPS[request["op"]], str(request["id"]), str(request["address"])
    except (ValueError, KeyError, TypeError):
        return _answer(400, {"error": 'expected {"op": "add"|"remove", "id": ID, "address": HOST:RAFT_PORT}'})
    info = _member_info(request, node_id) if op == "add" else None
    if info is False:
        return _answer(400, {"error": '"host" must be a string, "admin_port" and "client_port" ports'})
    replica = server.replica
    if replica is None or not hasattr(replica, "change_members"):
        return _answer(409, {"error": "this node is not a Raft member (a lone node)"})
    if not replica.is_leader():
        return _answer(503, {"error": "not leader", "leader": replica.status().get("leader")})
    action = f"{request['op']}-node {node_id} ({address})"
    me = server.options.raft_address
    if op == "rem" and address == me:
        try:
            target = await _hand_off(replica)
        except MembershipRefused as exc:
            return _answer(409, {"error": str(exc)})
        events.record("membership_requested", "operator %s: %s: this leader hands leadership to %s first",
                      operator, action, target, operator=operator, action=action, handed_off_to=target)
        return _answer(503, {"error": "this node led; it handed leadership off: ask the new leader",
                             "handed_off_to": target})
    loop = asyncio.get_running_loop()
    outcome: asyncio.Future = loop.create_future()
    try:
        replica.change_members(op, address, lambda error: outcome.done() or outcome.set_result(error), info)
    except MembershipRefused as exc:
        return _answer(409, {"error": str(exc)})
    events.record("membership_requested", "operator %s: %s", operator, action, operator=operator, action=action)
    try:
        error = await asyncio.wait_for(outcome, COMMIT_TIMEOUT)
    except asyncio.TimeoutError:
        error = f"not committed within {COMMIT_TIMEOUT} s: outcome unknown, check the members"
    if error is not None:
        events.record("membership_failed", "operator %s: %s failed: %s", operator, action, error,
                      operator=operator, action=action, error=error)
        return _answer(409, {"error": error})
    members = replica.members()
    events.record("membership_committed", "operator %s: %s committed; members: %s", operator, action,
                  ", ".join(members), operator=operator, action=action, members=members)
    return _answer(200, {"members": members})
