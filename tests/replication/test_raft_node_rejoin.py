"""A follower that hears nobody does not campaign, so healing it deposes no one (issue 3, pre-vote).

pysyncobj has no pre-vote: a follower cut off from the others keeps
campaigning while its links still look open, raising its term, and when the
partition heals its higher term deposes a healthy leader, which drops every
client connection. ReplicatedQueue campaigns only while it hears a majority
(itself included), and on hearing one again waits a fresh election timeout,
in which a live leader's heartbeat reaches it first.

The partition here drops every message between the victim and the others
where pysyncobj receives it, while the TCP links stay up: the first second of
a real partition, for as long as the test likes.
"""

from __future__ import annotations

import time

from haqueue.replication.raft_node import RaftTiming
from tests.replication.raft_nodes import make_nodes, wait_for


def _cut(nodes, victim) -> list:
    """Drop every message to or from `victim`; returns what heal() needs."""
    saved = []
    for node in nodes:
        transport = node._SyncObj__transport
        deliver = transport._onMessageReceivedCallback

        def filtered(sender, message, deliver=deliver, me=node):
            if me is victim or sender.address == victim.selfNode.address:
                return
            deliver(sender, message)

        transport._onMessageReceivedCallback = filtered
        saved.append((transport, deliver))
    return saved


def _heal(saved) -> None:
    for transport, deliver in saved:
        transport._onMessageReceivedCallback = deliver


def test_healed_follower_rejoins_without_raising_its_term_or_deposing_the_leader():
    timing = RaftTiming()
    nodes = make_nodes(timing)
    try:
        for node in nodes:
            node.start()
        assert wait_for(lambda: sum(n._isLeader() for n in nodes) == 1
                     and all(n._getLeader() is not None for n in nodes), 10)
        leader = next(n for n in nodes if n._isLeader())
        victim = next(n for n in nodes if not n._isLeader())
        term = leader.raftCurrentTerm

        saved = _cut(nodes, victim)
        time.sleep(timing.election_max * 4)  # several election timeouts alone
        assert victim.raftCurrentTerm == term, "the cut-off follower campaigned"
        _heal(saved)

        assert wait_for(lambda: victim._getLeader() == leader.selfNode, 3), "the healed follower did not rejoin"
        time.sleep(timing.election_max * 2)
        assert leader._isLeader() and leader.raftCurrentTerm == term, "the healed follower deposed the leader"
    finally:
        for node in nodes:
            node.stop()


def test_a_cut_off_leader_loses_its_read_lease_before_anyone_can_replace_it():
    timing = RaftTiming()
    nodes = make_nodes(timing)
    try:
        for node in nodes:
            node.start()
        assert wait_for(lambda: sum(n._isLeader() for n in nodes) == 1, 10)
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
            _heal(saved)
    finally:
        for node in nodes:
            node.stop()
