"""A node removed from the Raft group stops for good (replication/removal.py says how it knows).

Every LOOK seconds a Raft member that is not the leader (a leader waits until it
steps down) checks: did it apply a
committed entry removing itself, or, when it has no live link to a leader,
does a serving leader among the nodes it can name (its cluster file, and the
members additions announced: roster.py) show it removed? If so it records the
event "removed_from_cluster", stops serving and exits with
removal.REMOVED_EXIT and the one line `removal.message` (cli/serve.py).

Meanwhile it disturbs nobody: the other members refuse its connections, and a
pysyncobj node connected to nobody never starts an election.
"""

from __future__ import annotations

import asyncio

from haqueue import events
from haqueue.replication.replica import operator_of, removal_message as message, removed_by
from haqueue.roster import FileNode, directory
from haqueue.server.status_page import fetch_json

LOOK = 1.0  # seconds between checks (another process's state: no event to await)


async def watch(server) -> None:
    """Until the node stops: check, and call `server.removed(line)` once removed."""
    options = server.options
    me = options.raft_address
    while True:
        await asyncio.sleep(LOOK)
        replica = server.replica
        if replica.is_leader():
            # A leader is removed only after it stepped down: nothing to look at until then,
            # and no wake-up a second on an idle leader (docs/benchmarks.md, idle nodes).
            await server.not_leading.wait()
            continue
        status = replica.status()
        if replica.removed_by_entry():
            line = (f"{options.node_id or me} was removed from the cluster by a committed entry of its log "
                    f"(term {status.get('term', '?')}; members now {', '.join(status.get('members') or [])}): "
                    f"stopped for good; do not restart it with this cluster file")
            events.record("removed_from_cluster", "%s", line, term=status.get("term"), members=status.get("members"))
            server.removed(line)
            return
        leader = status.get("leader")
        if leader is not None and replica.peers_connected().get(leader):
            continue  # its leader talks to it: a member
        known = directory([FileNode(*m) for m in options.members], status.get("member_info") or {})
        askable = [n for raft, n in known.items() if raft != me and n.admin_port]
        answers = await asyncio.gather(*(_status(n, options.admin_token) for n in askable))
        answer = removed_by(me, status.get("applied_index") or 0, answers)
        if answer is not None:
            names = {raft: n.id for raft, n in known.items()}
            leader_id = next((n.id for n, a in zip(askable, answers) if a is answer), "?")
            line = message(options.node_id or names.get(me, me), leader_id, operator_of(me, answer), answer)
            events.record("removed_from_cluster", "%s", line, leader=leader_id, term=answer.get("term"),
                          members=answer.get("members"))
            server.removed(line)
            return


async def _status(node, token):
    try:
        return await fetch_json(node.host, node.admin_port, "/status", token=token)
    except (OSError, ValueError):
        return None
