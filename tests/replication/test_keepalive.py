"""Keepalives go only over links that carry nothing else (docs/pysyncobj.md D8).

Followers never talk to each other while the leader is healthy, and a link
pysyncobj reads nothing from for connectionTimeout is dropped: so every node
sends a peer a keepalive when it has sent that peer nothing for a heartbeat.
A link busy with appends and acknowledgements needs none. Nodes are ticked by
hand in virtual time (tests/support/ticked.py) and every message counted.
"""

from __future__ import annotations

from collections import Counter

from haqueue.core import commands as C
from haqueue.core.commands import encode_batch
from haqueue.replication.transport import KEEPALIVE
from tests.support.ticked import filter_at, ticked_cluster


def _count_keepalives(cluster) -> tuple[Counter, list]:
    counts: Counter = Counter()  # (sender address, receiver address) -> keepalives
    restores = []
    for node in cluster.nodes:
        def keep(sender, message, node=node):
            if message.get("type") == KEEPALIVE["type"]:
                counts[(sender.address, node.selfNode.address)] += 1
            return True
        restores.append(filter_at(node, keep))
    return counts, restores


def test_idle_links_get_keepalives_and_busy_ones_none():
    with ticked_cluster() as cluster:
        leader, (a, b) = cluster.leader(), cluster.followers()
        heartbeat = cluster.timing.heartbeat
        counts, restores = _count_keepalives(cluster)
        try:
            for i in range(200):  # entries back to back: the leader's links are never idle
                applied, _ = cluster.commit(leader, encode_batch(i, [(C.PUT, "default", 1, 0, 60_000, b"x")]))
                assert applied is not None
            busy = dict(counts)
            counts.clear()
            cluster.run(seconds=1.0)  # idle: every link quiet but for heartbeats and keepalives
        finally:
            for restore in restores:
                restore()
        me, fa, fb = leader.selfNode.address, a.selfNode.address, b.selfNode.address
        # Busy: appends one way, acknowledgements the other; no keepalive on those links.
        assert busy.get((me, fa), 0) == busy.get((me, fb), 0) == 0, busy
        assert busy.get((fa, me), 0) == busy.get((fb, me), 0) == 0, busy
        # The followers' own link carries nothing else: it is kept alive both ways, all along.
        assert busy.get((fa, fb), 0) > 0 and busy.get((fb, fa), 0) > 0, busy
        # Idle for a second: the followers still keep their link alive every heartbeat or so...
        assert counts[(fa, fb)] >= 0.5 / heartbeat and counts[(fb, fa)] >= 0.5 / heartbeat, counts
        # ...and the leader's heartbeats keep its links busy: a keepalive only when a
        # heartbeat came a little late (both run once a heartbeat period).
        assert counts[(me, fa)] <= counts[(fa, fb)] / 4 and counts[(me, fb)] <= counts[(fb, fa)] / 4, counts


def test_a_follower_s_timer_leaves_the_next_heartbeat_time_to_wake_it():
    """After the tick a heartbeat brought (and the keepalives it sent), a follower's
    timer is set (on_loop.py asks timer_wait as the tick ends) a little past the next
    heartbeat: the heartbeat, not the timer, wakes it. Capped at a heartbeat from that
    tick, the timer fired as the heartbeat was due, and when it won the race it found
    nothing to do (4-5 wake-ups a second for nothing on an idle follower)."""
    with ticked_cluster() as cluster:
        a = cluster.followers()[0]
        heartbeat = cluster.timing.heartbeat
        a._next_keepalive = 0.0  # this tick is the one that sends its keepalives
        a.tick(0)
        assert a._next_keepalive == cluster.clock() + heartbeat
        armed = a.timer_wait()
        assert heartbeat < armed <= heartbeat * 6 / 5, armed  # past the heartbeat, within the slack
        cluster.clock.advance(armed)
        assert a.timer_wait() == 0
        a.tick(0)  # no heartbeat came: the timer's tick sends the keepalives itself
        assert a._next_keepalive == cluster.clock() + heartbeat
