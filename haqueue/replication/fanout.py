"""Which followers a new entry goes to at once (docs/pysyncobj.md D38): pure.

A leader commits an entry once a majority holds it: itself and, of three nodes,
one follower (of five, two). pysyncobj sends every new entry to every follower
at once, so each entry wakes every follower and every follower's
acknowledgement wakes the leader, though the one that comes second decides
nothing. On one shared core those wake-ups are most of an entry's cost
(docs/benchmarks.md, issue 24).

So a new entry goes at once only to as many followers as the commit needs, the
ones with nothing in flight (their acknowledgement is not queued behind an
earlier one) and, of those, the quickest to answer lately. The others get it
with the next heartbeat, which still goes to every follower every heartbeat
period, or with a later entry when they are the ones idle. When too few
followers are idle (a loaded leader: every follower busy with earlier
entries), every follower gets it at once, as before.

Raft's rules are untouched: the commit index is still the highest index a
majority holds (hot_path.advance_commit), elections still go to the most
complete log, and a follower left out holds a prefix of the log, as any
follower that lags does. What a follower left out costs is its own catch-up,
a heartbeat later.
"""

from __future__ import annotations

UNMEASURED = float("inf")


def followers_now(others, connected, next_index: dict, match_index: dict, round_trip: dict):
    """The followers new entries go to now, or None for every one of them.

    `others` the followers (pysyncobj's node objects, with `.address`); `connected`
    those with a link up; `next_index` and `match_index` the leader's Raft
    bookkeeping; `round_trip` the latest append round trip each follower answered
    in, in seconds (missing: never measured)."""
    needed = (len(others) + 1) // 2
    if needed == 0:
        return None
    idle = [node for node in others
            if node in connected and match_index.get(node, 0) + 1 >= next_index.get(node, 0)]
    if len(idle) < needed:
        return None
    if len(idle) > needed:
        idle.sort(key=lambda node: (round_trip.get(node, UNMEASURED), node.address))
    return idle[:needed]
