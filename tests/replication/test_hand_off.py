"""A leader's hand-off under continuous submissions, in virtual time (tests/support/ticked.py).

The leader holds new entries back until a follower holds its whole log, then
steps down and tells it to campaign (replication/membership.py). Under a load
that keeps followers behind, the first request must succeed, with one leader
per term, no read lease overlapping another, and every acknowledged entry kept.
"""

from __future__ import annotations

import pytest

from haqueue.config.replication import RaftTiming
from haqueue.core import commands as C
from haqueue.replication.raft_node import FAIL_SUCCESS
from haqueue.replication.replica import MembershipRefused
from tests.support.ticked import filter_at, ticked_cluster


def _put(n: int) -> bytes:
    return C.encode_batch(1_000 + n, [(C.PUT, "default", 0, 0, 60_000, b"job %d" % n)])


class Load:
    """A client that submits one entry to whoever leads, every round, as the batcher
    does (several in flight), and remembers each entry's outcome."""

    def __init__(self, cluster) -> None:
        self.cluster = cluster
        self.sent = 0
        self.acked: list[bytes] = []  # bodies of entries whose success was reported
        self.failed: list[bytes] = []

    def submit(self) -> None:
        leaders = [n for n in self.cluster.nodes if n._isLeader()]
        if len(leaders) != 1:
            return
        body = b"job %d" % self.sent
        self.sent += 1

        def done(applied, error, body=body) -> None:
            (self.acked if error == FAIL_SUCCESS and applied is not None else self.failed).append(body)

        leaders[0].submit(_put(self.sent - 1), done)


class Watch:
    """After every round: one leader per term, and at most one node whose read lease holds."""

    def __init__(self, cluster) -> None:
        self.cluster = cluster
        self.leaders: dict[int, set] = {}
        self.lease_holders: list[str] = []  # who held the lease, round by round (changes only)

    def __call__(self) -> bool:
        holders = [n.selfNode.address for n in self.cluster.nodes if n.read_lease_valid()]
        for node in self.cluster.nodes:
            if node._isLeader():
                self.leaders.setdefault(node.raftCurrentTerm, set()).add(node.selfNode.address)
        if holders and (not self.lease_holders or self.lease_holders[-1] != holders[0]):
            self.lease_holders.append(holders[0])
        return len(holders) <= 1 and all(len(leaders) == 1 for leaders in self.leaders.values())


def _bodies(node) -> set[bytes]:
    return {job.body for job in node.state.jobs.values()}


def test_hand_off_under_continuous_submissions_succeeds_at_the_first_request():
    with ticked_cluster() as cluster:
        old = cluster.leader()
        load, watch = Load(cluster), Watch(cluster)
        for _ in range(40):  # a steady load: every round a new entry, followers a round or two behind
            load.submit()
            cluster.round()
            assert watch()
        match = old.peer_match_indexes()
        last = old._SyncObj__getCurrentLogIndex()
        assert all(index < last for index in match.values()), "the load should keep followers behind"
        outcome: list = []
        old.hand_off(lambda target, error: outcome.append((target, error)))

        def handed_off() -> bool:
            load.submit()
            assert watch(), "two leaders of one term, or two read leases at once"
            return bool(outcome)

        cluster.run_until(handed_off, seconds=cluster.timing.election_max, what="the hand-off")
        target, error = outcome[0]
        assert error is None and target is not None
        assert not old._isLeader() and not old.read_lease_valid()

        def new_leader_serves() -> bool:
            load.submit()
            cluster.round()
            assert watch(), "two leaders of one term, or two read leases at once"
            return cluster.settled() and cluster.leader() is not old and cluster.leader().read_lease_valid()

        cluster.run_until(new_leader_serves, seconds=3.0, what="the successor leading with its lease")
        new = cluster.leader()
        assert new.selfNode.address == target and new.raftCurrentTerm > max(t for t in watch.leaders if old.selfNode.address in watch.leaders[t])
        assert watch.lease_holders == [old.selfNode.address, new.selfNode.address]
        for _ in range(20):  # the load goes on against the new leader
            load.submit()
            cluster.round()
            assert watch()
        cluster.run_until(lambda: cluster.caught_up() and len(load.acked) + len(load.failed) == load.sent,
                          seconds=2.0, what="every entry's outcome")
        bodies = _bodies(new)
        assert set(load.acked) <= bodies, "an acknowledged entry was lost"
        assert not set(load.failed) & bodies, "an entry reported failed was applied anyway"
        assert load.failed, "entries submitted while the old leader held them fail with its leadership"


def test_hand_off_that_no_follower_can_finish_in_time_gives_up_and_serves_on():
    # The followers' acknowledgements never reach the leader (its fallback is
    # longer than the hand-off's bound, so it stays leader meanwhile).
    with ticked_cluster(RaftTiming(leader_fallback=3.0)) as cluster:
        leader = cluster.leader()
        load = Load(cluster)
        heal = filter_at(leader, lambda sender, message: message.get("type") != "next_node_idx")
        try:
            load.submit()
            cluster.round()
            outcome: list = []
            leader.hand_off(lambda target, error: outcome.append((target, error)))
            with pytest.raises(MembershipRefused, match="under way"):
                leader.hand_off(lambda target, error: None)

            def ended() -> bool:
                load.submit()
                return bool(outcome)

            took = cluster.run_until(ended, seconds=2 * cluster.timing.election_max, what="the hand-off's end")
            assert took >= cluster.timing.election_max
            target, error = outcome[0]
            assert target is None and "no follower caught up" in error and "retry" in error
            assert leader._isLeader()
            assert not load.acked and not load.failed  # held, then appended: not answered yet
        finally:
            heal()
        cluster.run_until(lambda: len(load.acked) == load.sent, seconds=2.0, what="the held entries committed")
        assert cluster.leader() is leader
        assert _bodies(leader) == set(load.acked)


def test_membership_change_is_refused_during_a_hand_off():
    with ticked_cluster(RaftTiming(leader_fallback=3.0)) as cluster:
        leader = cluster.leader()
        cluster.commit(leader, _put(0))
        heal = filter_at(leader, lambda sender, message: message.get("type") != "next_node_idx")
        try:
            cluster.submit(leader, _put(1))
            cluster.round()
            leader.hand_off(lambda target, error: None)
            with pytest.raises(MembershipRefused, match="handing leadership off"):
                leader.change("add", "127.0.0.1:1", lambda error: None)
        finally:
            heal()
