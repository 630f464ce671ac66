"""Elections only when they help: campaign while hearing a majority, after a pre-vote (issue 3).

pysyncobj has no pre-vote: a follower cut off from the others keeps
campaigning while its links still look open, raising its term, and when the
partition heals its higher term deposes a healthy leader, which drops every
client connection; a follower cut off from the leader alone (still hearing the
other follower) took leadership away for as long as the cut lasted.
ReplicatedQueue campaigns only while it hears a majority (itself included),
waits a fresh election timeout on hearing one again, and asks for a pre-vote
first, which peers that still hear a leader refuse (docs/pysyncobj.md D9).

The partitions here drop messages where pysyncobj receives them, while the TCP
links stay up: the first second of a real partition, for as long as the test
likes. The chaos lab's cut-follower scenario does the same with real routes.
The nodes are ticked by hand in virtual time (tests/support/ticked.py): "for
several election timeouts" is a number of rounds, run in milliseconds.
"""

from __future__ import annotations

from tests.support.ticked import drop_messages, heal, ticked_cluster


def _cut(nodes, victim) -> list:
    """Drop every message to or from `victim`."""
    others = [n for n in nodes if n is not victim]
    return drop_messages(others, [victim]) + drop_messages([victim], others)


def _cut_between(a, b) -> list:
    """Drop every message between `a` and `b` only: a partial partition."""
    return drop_messages([a], [b]) + drop_messages([b], [a])


def test_healed_follower_rejoins_without_raising_its_term_or_deposing_the_leader():
    with ticked_cluster() as cluster:
        leader, timing = cluster.leader(), cluster.timing
        victim = cluster.followers()[0]
        term = leader.raftCurrentTerm

        saved = _cut(cluster.nodes, victim)
        prevotes_before = victim.campaign.round
        cluster.run_while(lambda: victim.raftCurrentTerm == term, seconds=timing.election_max * 4,
                          what="the cut-off follower's term (it must not campaign)")
        # Hearing no majority, it did not even ask for a pre-vote.
        assert victim.campaign.round == prevotes_before
        heal(saved)

        cluster.run_until(lambda: victim._getLeader() == leader.selfNode, seconds=3,
                          what="the healed follower rejoining")
        cluster.run_while(lambda: leader._isLeader() and leader.raftCurrentTerm == term,
                          seconds=timing.election_max * 2, what="the leader's leadership after the heal")


def test_a_cut_off_leader_loses_its_read_lease_before_anyone_can_replace_it():
    with ticked_cluster() as cluster:
        leader, timing = cluster.leader(), cluster.timing
        cluster.run_until(leader.read_lease_valid, seconds=1, what="the leader's read lease")
        _cut(cluster.nodes, leader)
        lost_after = cluster.run_until(lambda: not leader.read_lease_valid(), seconds=2,
                                       what="the cut-off leader losing its lease")
        # Gone before the followers may even start an election.
        assert lost_after < timing.election_min, lost_after


def test_a_follower_cut_off_from_the_leader_alone_does_not_depose_it():
    # The follower still hears the other follower (which, hearing the leader, sends
    # it a keepalive only every second heartbeat, within the hear window: D35), so it
    # hears a majority and its election timer runs out: it asks the others first
    # (pre-vote), and the one that still hears the leader says no. Without pre-vote
    # it campaigned, the other follower took its higher term and stopped
    # acknowledging the leader, and leadership moved (or flapped) for as long as the
    # cut lasted.
    with ticked_cluster() as cluster:
        leader, timing = cluster.leader(), cluster.timing
        victim, bystander = cluster.followers()
        term = leader.raftCurrentTerm

        saved = _cut_between(leader, victim)
        cut_at = cluster.clock()
        prevotes_before = victim.campaign.round
        cluster.run_while(lambda: leader._isLeader() and bystander._getLeader() == leader.selfNode,
                          seconds=timing.election_max * 5, what="the leadership")
        assert {n.raftCurrentTerm for n in cluster.nodes} == {term}, "someone campaigned"
        assert victim.transport.leader_heard_at <= cut_at, "the victim heard the leader: the test cut nothing"
        assert victim.campaign.round > prevotes_before, "the victim never asked: it did not hear a majority"
        heal(saved)

        cluster.run_until(lambda: victim._getLeader() == leader.selfNode, seconds=3,
                          what="the healed follower rejoining")
        assert leader._isLeader() and leader.raftCurrentTerm == term


def test_a_node_whose_term_outran_the_leader_rejoins_through_one_election():
    # Its term rose while it was cut off (say it won a pre-vote, then lost the
    # link before its request_vote arrived). pysyncobj ignores append_entries
    # of a lower term, and peers that hear their leader ignore its votes and
    # refuse it pre-votes (docs/pysyncobj.md D24): it tells the leader of its
    # term instead, the leader steps down, and one election brings it back.
    with ticked_cluster() as cluster:
        leader = cluster.leader()
        victim = cluster.followers()[0]
        term = victim.raftCurrentTerm
        saved = _cut(cluster.nodes, victim)
        victim._SyncObj__setCurrentTerm(term + 1, None)  # no tick runs meanwhile: no lock needed
        heal(saved)

        cluster.run_until(lambda: not leader._isLeader(), seconds=1, what="the leader stepping down")
        assert leader.raftCurrentTerm == term + 1  # the victim's term, from its notice
        cluster.run_until(cluster.settled, seconds=5, what="one leader of one term again")
        assert victim.raftCurrentTerm > term + 1
