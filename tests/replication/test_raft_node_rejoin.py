"""Elections only when they help: campaign while hearing a majority, after a pre-vote (issue 3).

pysyncobj has no pre-vote: a follower cut off from the others keeps
campaigning while its links still look open, raising its term, and when the
partition heals its higher term deposes a healthy leader, which drops every
client connection; a follower cut off from the leader alone (still hearing the
other follower) took leadership away for as long as the cut lasted.
ReplicatedQueue campaigns only while it hears a majority (itself included),
waits a fresh election timeout on hearing one again, and asks for a pre-vote
first, which peers that still hear a leader refuse (raft_node point 9).

The partitions here drop messages where pysyncobj receives them, while the TCP
links stay up: the first second of a real partition, for as long as the test
likes. The chaos lab's cut-follower scenario does the same with real routes.
"""

from __future__ import annotations

import time

from haqueue.replication.raft_node import RaftTiming
from tests.replication.raft_nodes import drop_messages, heal, running_cluster, wait_for


def _cut(nodes, victim) -> list:
    """Drop every message to or from `victim`."""
    others = [n for n in nodes if n is not victim]
    return drop_messages(others, [victim]) + drop_messages([victim], others)


def _cut_between(a, b) -> list:
    """Drop every message between `a` and `b` only: a partial partition."""
    return drop_messages([a], [b]) + drop_messages([b], [a])


def test_healed_follower_rejoins_without_raising_its_term_or_deposing_the_leader():
    timing = RaftTiming()
    with running_cluster(timing) as nodes:
        leader = next(n for n in nodes if n._isLeader())
        victim = next(n for n in nodes if not n._isLeader())
        term = leader.raftCurrentTerm

        saved = _cut(nodes, victim)
        time.sleep(timing.election_max * 4)  # the cut is the fault: several election timeouts alone
        assert victim.raftCurrentTerm == term, "the cut-off follower campaigned"
        heal(saved)

        assert wait_for(lambda: victim._getLeader() == leader.selfNode, 3), "the healed follower did not rejoin"
        time.sleep(timing.election_max * 2)  # time in which a deposition would show
        assert leader._isLeader() and leader.raftCurrentTerm == term, "the healed follower deposed the leader"


def test_a_cut_off_leader_loses_its_read_lease_before_anyone_can_replace_it():
    timing = RaftTiming()
    with running_cluster(timing) as nodes:
        leader = next(n for n in nodes if n._isLeader())
        assert wait_for(leader.read_lease_valid, 2)
        saved = _cut(nodes, leader)
        try:
            cut_at = time.monotonic()
            assert wait_for(lambda: not leader.read_lease_valid(), 2)
            lost_after = time.monotonic() - cut_at
            # Gone before the followers may even start an election.
            assert lost_after < timing.election_min, lost_after
        finally:
            heal(saved)


def test_a_follower_cut_off_from_the_leader_alone_does_not_depose_it():
    # The follower still hears the other follower, so it hears a majority and
    # its election timer runs out: it asks the others first (pre-vote), and the
    # one that still hears the leader says no. Without pre-vote it campaigned,
    # the other follower took its higher term and stopped acknowledging the
    # leader, and leadership moved (or flapped) for as long as the cut lasted.
    timing = RaftTiming()
    with running_cluster(timing) as nodes:
        leader = next(n for n in nodes if n._isLeader())
        victim, bystander = [n for n in nodes if not n._isLeader()]
        term = leader.raftCurrentTerm

        saved = _cut_between(leader, victim)
        deadline = time.monotonic() + timing.election_max * 5
        while time.monotonic() < deadline:
            assert leader._isLeader() and bystander._getLeader() == leader.selfNode, "leadership moved"
            time.sleep(0.01)
        assert {n.raftCurrentTerm for n in nodes} == {term}, "someone campaigned"
        heal(saved)

        assert wait_for(lambda: victim._getLeader() == leader.selfNode, 3), "the healed follower did not rejoin"
        assert leader._isLeader() and leader.raftCurrentTerm == term


def test_a_node_whose_term_outran_the_leader_rejoins_through_one_election():
    # Its term rose while it was cut off (say it won a pre-vote, then lost the
    # link before its request_vote arrived). pysyncobj ignores append_entries
    # of a lower term, and peers that hear their leader refuse it a pre-vote:
    # only an election at its higher term can bring it back, so it holds one.
    with running_cluster(RaftTiming()) as nodes:
        victim = next(n for n in nodes if not n._isLeader())
        term = victim.raftCurrentTerm
        saved = _cut(nodes, victim)
        with victim.state_lock:
            victim._SyncObj__setCurrentTerm(term + 1, None)
        heal(saved)

        def whole() -> bool:
            leaders = [n for n in nodes if n._isLeader()]
            return (len(leaders) == 1 and all(n._getLeader() == leaders[0].selfNode for n in nodes)
                    and len({n.raftCurrentTerm for n in nodes}) == 1)

        assert wait_for(whole, 5), [(n.raftCurrentTerm, n._getLeader()) for n in nodes]
        assert victim.raftCurrentTerm > term + 1
