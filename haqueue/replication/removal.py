"""Has this node been removed from the Raft group? (etcd's "the member has been removed")

A leader that commits "remove X" stops talking to X at once (pysyncobj takes a
change into force when it appends it, so the entry itself never reaches X),
and the other members refuse X's connections. X would run on, believing
itself a member, unless it learns what happened. It learns it in one of two
ways, and then stops for good (server/removal_watch.py: an event, a one-line
message, exit status REMOVED_EXIT):

- it applies a committed entry removing itself (membership.py notes it:
  `removed_by_entry`); rare, since the entry is not sent to it, but a log that
  holds one (restored or replayed) says so for certain;
- or, cut off from its leader, it asks the nodes it can name for their
  /status (`removed_by`): a serving leader whose members are settled and
  exclude this node shows the committed membership, so this node was removed.
  Serving means the leader applied its own term's first entry (server/app.py),
  so every change an earlier leader logged is committed; settled
  (membership.py `members_settled`) means the change this leader proposed, if
  any, is committed too.

`removed_by` refuses to conclude for a node that holds nothing of the log
(applied index 0): that is a node started before `cluster add-node` commits
its addition (docs/operations.md, a group of one growing), which must wait to
be added, not stop. Pure: the caller fetches the answers.
"""

from __future__ import annotations

REMOVED_EXIT = 78  # sysexits' EX_CONFIG: the node's cluster file names a group that no longer has it


def removed_by(me: str, applied_index: int, answers) -> dict | None:
    """The /status answer of the serving leader that shows `me` (a Raft address) removed,
    or None while nothing says so for certain."""
    if applied_index <= 0:
        return None
    for answer in answers:
        if not answer or answer.get("role") != "leader" or not answer.get("serving"):
            continue
        members = answer.get("members")
        if members and answer.get("members_settled") is True and me not in members:
            return answer
    return None


def operator_of(me: str, answer: dict) -> str | None:
    """Who asked for this node's removal, if the leader's recent events still say
    (server/membership_http.py records "remove-node ID (RAFT_ADDRESS)" with the operator)."""
    for event in reversed(answer.get("events") or []):
        if event.get("event") == "membership_committed" and str(event.get("action", "")).startswith(
                "remove-node ") and str(event.get("action", "")).endswith(f"({me})"):
            return str(event.get("operator"))
    return None


def message(me_id: str, leader_id: str, operator: str | None, answer: dict) -> str:
    """The one line a removed node stops with (and its event's)."""
    by = f"by {operator} through leader {leader_id}" if operator else f"by leader {leader_id}"
    return (f"{me_id} was removed from the cluster {by} (term {answer.get('term', '?')}; members now "
            f"{', '.join(answer.get('members') or [])}): stopped for good; do not restart it with this "
            f"cluster file")
