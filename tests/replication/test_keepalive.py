"""Keepalives go only over links that carry nothing else, and only as often as
their purpose needs (docs/pysyncobj.md D8, D35; haqueue/replication/keepalives.py).

A link pysyncobj reads nothing from for connectionTimeout is dropped, and a node
campaigns only if it heard a majority lately (D9). While the leader is heard, its
links are busy with appends and acknowledgements, and the followers' own link
needs a keepalive only before its connection timeout; once the leader falls
quiet, every link gets one each heartbeat, long before anyone's election timeout.
Nodes are ticked by hand in virtual time (tests/support/ticked.py) and every
message counted.
"""

from __future__ import annotations

from collections import Counter

from haqueue.core import commands as C
from haqueue.core.commands import encode_batch
from haqueue.replication.keepalives import KeepalivePeriods
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


def _periods(cluster) -> KeepalivePeriods:
    return KeepalivePeriods.for_timing(cluster.timing.heartbeat, cluster.timing.connection_timeout,
                                       cluster.timing.hear_window)


def test_while_the_leader_is_heard_only_the_followers_link_gets_keepalives_and_only_for_its_timeout():
    with ticked_cluster() as cluster:
        leader, (a, b) = cluster.leader(), cluster.followers()
        periods = _periods(cluster)
        counts, restores = _count_keepalives(cluster)
        try:
            for i in range(200):  # entries back to back: the leader's links are never idle
                applied, _ = cluster.commit(leader, encode_batch(i, [(C.PUT, "default", 1, 0, 60_000, b"x")]))
                assert applied is not None
            busy = dict(counts)
            counts.clear()
            idle = 3.0
            cluster.run(seconds=idle)  # idle: every link quiet but for heartbeats and keepalives
        finally:
            for restore in restores:
                restore()
        me, fa, fb = leader.selfNode.address, a.selfNode.address, b.selfNode.address
        # Busy: appends one way, acknowledgements the other; no keepalive on those links.
        assert busy.get((me, fa), 0) == busy.get((me, fb), 0) == 0, busy
        assert busy.get((fa, me), 0) == busy.get((fb, me), 0) == 0, busy
        # Idle, the leader's heartbeats and their acknowledgements keep its links busy.
        assert counts[(me, fa)] == counts[(me, fb)] == counts[(fa, me)] == counts[(fb, me)] == 0, counts
        # The followers' own link carries nothing else: kept alive both ways, once a quiet
        # period (within the hear window and the connection timeout; sent with the
        # heartbeat before it ends, so up to a heartbeat early), not once a heartbeat.
        fewest, most = idle / periods.quiet - 1, idle / (periods.quiet - cluster.timing.heartbeat) + 1
        for link in ((fa, fb), (fb, fa)):
            assert fewest <= counts[link] <= most, (link, counts, fewest, most)
        assert periods.quiet < cluster.timing.hear_window and periods.quiet * 2 < cluster.timing.connection_timeout
        assert counts[(fa, fb)] <= 0.6 * idle / cluster.timing.heartbeat, counts


def test_once_the_leader_falls_quiet_the_followers_keep_each_other_heard_every_heartbeat():
    # The leader stops (its loop is stuck): within two heartbeats the followers'
    # link wakes to the heartbeat's pace, so each still hears a majority (the other
    # and itself) when its election timeout runs out, and a campaign can start.
    with ticked_cluster() as cluster:
        leader, (a, b) = cluster.leader(), cluster.followers()
        timing, periods = cluster.timing, _periods(cluster)
        cluster.run(seconds=1.0)
        counts, restores = _count_keepalives(cluster)
        try:
            cluster.paused.add(leader)
            stopped_at = cluster.clock()
            first = cluster.run_until(lambda: counts[(a.selfNode.address, b.selfNode.address)] > 0
                                      and counts[(b.selfNode.address, a.selfNode.address)] > 0,
                                      seconds=timing.election_min, what="keepalives between the followers")
            assert first <= periods.leader_quiet_after + periods.busy + cluster.step, first
        finally:
            for restore in restores:
                restore()

        def hear_each_other() -> bool:
            since = cluster.clock() - timing.hear_window
            return (a.transport.last_heard[b.selfNode] > since and b.transport.last_heard[a.selfNode] > since
                    and a._hears_majority and b._hears_majority)

        # Until the first election timeout can run out (election_min after the last
        # heartbeat either heard), each hears the other all along.
        last_heartbeat = min(a.transport.leader_heard_at, b.transport.leader_heard_at)
        assert last_heartbeat <= stopped_at
        cluster.run_while(hear_each_other, seconds=last_heartbeat + timing.election_min - cluster.clock(),
                          what="the followers hearing each other")
        assert not (a._isLeader() or b._isLeader())
        # Hearing each other, they elected one of them.
        cluster.run_until(lambda: a._isLeader() or b._isLeader(), seconds=2 * timing.election_max,
                          what="a new leader among the followers")


def test_a_follower_that_hears_its_leader_sets_no_timer_before_the_leader_falls_quiet():
    """After the tick a heartbeat brought, a follower's timer is set (on_loop.py asks
    timer_wait as the tick ends) past the next heartbeat: the heartbeat, not the timer,
    wakes it. Only once the leader has been quiet for two heartbeats is anything due:
    the keepalives to the other follower."""
    with ticked_cluster() as cluster:
        leader, (a, b) = cluster.leader(), cluster.followers()
        heartbeat = cluster.timing.heartbeat
        periods = _periods(cluster)
        cluster.run(seconds=1.0)
        # Just after a heartbeat's tick, with the followers' own keepalive not due for a while.
        cluster.run_until(lambda: a.transport.leader_heard() == cluster.clock()
                          and a._next_keepalive.latest > cluster.clock() + periods.leader_quiet_after,
                          seconds=1.0, what="a heartbeat's tick")
        heard = a.transport.leader_heard()
        armed = a.timer_wait()
        assert armed > heartbeat * 1.5, armed  # past the next heartbeat, by more than any lateness
        assert cluster.clock() + armed >= heard + periods.leader_quiet_after
        cluster.paused.add(leader)  # no heartbeat comes
        counts, restores = _count_keepalives(cluster)
        try:
            cluster.clock.advance(armed)
            assert a.timer_wait() == 0
            a.tick(0)  # the timer's tick: the leader is quiet, the keepalives are due
            b.tick(0)  # b reads what a sent
        finally:
            for restore in restores:
                restore()
        assert counts[(a.selfNode.address, b.selfNode.address)] == 1, counts
        assert a.timer_wait() <= periods.busy + cluster.timing.heartbeat / 5, a.timer_wait()
