"""A new entry goes at once to the followers its commit needs (fanout.py, docs/pysyncobj.md D38).

The choice is pure and tested first; then a ticked cluster shows what it does:
one follower gets each entry at once and the other a heartbeat later, a stuck
follower does not hold commits back beyond a heartbeat, and every follower
ends up holding and applying the whole log."""

from __future__ import annotations

from collections import namedtuple

from haqueue.core.commands import PUT, encode_batch
from haqueue.replication import fanout
from tests.support.ticked import filter_at, ticked_cluster

Node = namedtuple("Node", "address")
A, B, C, D = (Node(f"10.0.0.{n}:1") for n in (1, 2, 3, 4))


def put(n: int) -> bytes:
    return encode_batch(2000 + n, [(PUT, "default", 0, 0, 60_000, b"job %d" % n)])


def choose(others, *, busy=(), down=(), round_trip=None):
    connected = {node for node in others if node not in down}
    next_index = {node: 11 for node in others}
    match = {node: (5 if node in busy else 10) for node in others}
    return fanout.followers_now(others, connected, next_index, match, round_trip or {})


# ------------------------------------------------------------ the choice
def test_of_two_idle_followers_the_quicker_gets_the_entry():
    assert choose({A, B}, round_trip={A: 0.004, B: 0.001}) == [B]
    assert choose({A, B}, round_trip={A: 0.001, B: 0.004}) == [A]


def test_a_follower_never_measured_comes_after_a_measured_one_and_ties_go_by_address():
    assert choose({A, B}, round_trip={B: 0.5}) == [B]
    assert choose({A, B}) == [A]


def test_a_busy_follower_is_passed_over_for_an_idle_one():
    assert choose({A, B}, busy={A}, round_trip={A: 0.001, B: 0.9}) == [B]


def test_a_follower_whose_link_is_down_is_not_chosen():
    assert choose({A, B}, down={A}, round_trip={A: 0.001}) == [B]


def test_when_too_few_followers_are_idle_everyone_gets_it():
    assert choose({A, B}, busy={A, B}) is None
    assert choose({A, B}, busy={A}, down={B}) is None


def test_five_nodes_need_two_followers():
    assert choose({A, B, C, D}, round_trip={A: 0.3, B: 0.1, C: 0.2, D: 0.4}) == [B, C]
    assert choose({A, B, C, D}, busy={A, B, C}) is None


def test_a_lone_node_sends_to_nobody_in_particular():
    assert fanout.followers_now(set(), set(), {}, {}, {}) is None


# ------------------------------------------------------------ in a cluster
def test_each_entry_goes_to_one_follower_at_once_and_to_the_other_with_the_heartbeat():
    with ticked_cluster() as cluster:
        cluster.light = True
        leader = cluster.leader()
        cluster.run(seconds=0.2)  # the election's no-op everywhere, round trips measured
        got: dict = {node.selfNode.address: 0 for node in cluster.followers()}

        def count(node):
            def keep(sender, message):
                if message.get("type") == "append_entries" and message.get("entries"):
                    got[node.selfNode.address] += 1
                return True
            return keep

        restores = [filter_at(node, count(node)) for node in cluster.followers()]
        try:
            for n in range(10):
                applied, error = cluster.commit(leader, put(n), seconds=0.02)  # well within a heartbeat
                assert applied is not None, error
            sends = sorted(got.values())
            assert sends[1] >= 9, got  # the chosen one got (nearly) every entry at once
            assert sends[0] <= 3, got  # the other one at most with the heartbeats meanwhile
            cluster.run_until(cluster.caught_up, seconds=cluster.timing.heartbeat * 2,
                              what="the follower left out caught up within a heartbeat or two")
            commit = leader.raftCommitIndex
            assert all(node.raftLastApplied == commit for node in cluster.nodes)
            assert len({tuple(sorted(node.state.counts().items())) for node in cluster.nodes}) == 1
        finally:
            for restore in restores:
                restore()


def test_a_stuck_follower_holds_a_commit_back_by_a_heartbeat_at_most_and_then_not_at_all():
    with ticked_cluster() as cluster:
        cluster.light = True
        leader = cluster.leader()
        cluster.run(seconds=0.2)
        first, second = cluster.followers()
        # The follower the leader would choose now stops answering (its loop is stuck).
        chosen = fanout.followers_now(leader._SyncObj__otherNodes, leader._SyncObj__connectedNodes,
                                      leader._SyncObj__raftNextIndex, leader._SyncObj__raftMatchIndex,
                                      leader.transport.round_trip)[0]
        stuck = first if first.selfNode == chosen else second
        cluster.paused.add(stuck)
        started = cluster.clock.now
        applied, error = cluster.commit(leader, put(0), seconds=cluster.timing.heartbeat + 0.02)
        assert applied is not None, error
        assert cluster.clock.now - started <= cluster.timing.heartbeat + 0.02
        for n in range(1, 6):  # the stuck one is busy now: the other gets the entries at once
            started = cluster.clock.now
            applied, error = cluster.commit(leader, put(n), seconds=0.02)
            assert applied is not None, error
        cluster.paused.clear()
        cluster.run_until(cluster.caught_up, seconds=1.0, what="the stuck follower caught up")


def test_followers_busy_with_earlier_entries_get_a_new_one_at_once():
    with ticked_cluster() as cluster:
        cluster.light = True
        leader = cluster.leader()
        cluster.run(seconds=0.2)
        others = leader._SyncObj__otherNodes
        cluster.submit(leader, put(0))
        leader.tick(0, light=True)  # the first entry leaves for one follower
        cluster.submit(leader, put(1))
        leader.tick(0, light=True)  # the second for the other, the idle one
        cluster.submit(leader, put(2))
        leader.tick(0, light=True)  # the third: nobody idle, so everyone
        last = leader._SyncObj__getCurrentLogIndex()
        assert all(leader._SyncObj__raftNextIndex[node] == last + 1 for node in others)
        cluster.run_until(cluster.caught_up, seconds=0.05, what="all three entries everywhere")
