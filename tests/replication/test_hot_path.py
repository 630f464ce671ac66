"""Light ticks and the lean append path (hot_path.py; docs/pysyncobj.md D32, D34).

A light tick skips the periodic checks; these tests make sure that a cluster
ticked that way still commits, applies, steps a cut-off leader down and elects
a new one, and that the lean pieces decide exactly as pysyncobj's own code does
on the same state (the commit index, the append_entries messages). A follower
that needs a snapshot gets pysyncobj's own append path: test_received_snapshot.py
and test_snapshot_load.py go through it."""

from __future__ import annotations

import itertools

import pytest

from haqueue.core.commands import PUT, encode_batch
from haqueue.replication.raft_node import FULL_PERIOD, RESTING_FULL_PERIOD
from tests.support.ticked import ticked_cluster


def put(n: int) -> bytes:
    return encode_batch(1000 + n, [(PUT, "default", 0, 0, 60_000, b"job %d" % n)])


@pytest.fixture
def light_cluster():
    with ticked_cluster() as cluster:
        cluster.light = True
        yield cluster


def test_light_ticks_commit_and_apply_on_every_node(light_cluster):
    leader = light_cluster.leader()
    for n in range(20):
        applied, error = light_cluster.commit(leader, put(n))
        assert applied is not None, error
    light_cluster.run_until(light_cluster.caught_up, seconds=0.5, what="every node applied")
    assert {node.raftLastApplied for node in light_cluster.nodes} == {leader.raftCommitIndex}
    assert len({tuple(sorted(node.state.counts().items())) for node in light_cluster.nodes}) == 1


def test_a_light_tick_leaves_the_periodic_checks_to_a_full_tick(light_cluster):
    cluster = light_cluster
    leader = cluster.leader()
    cluster.paused.update(cluster.followers())
    cluster.submit(leader, put(0))  # an entry no follower holds: the leader is not at rest (D36)
    leader.tick(0)
    leader.tick(0)  # full, and what the followers had sent is read
    assert not leader.at_rest()
    responses = leader._SyncObj__lastResponseTime

    def silent_for_ever():  # as if no follower had answered since the clock began
        responses.update({node: 0.0 for node in leader._SyncObj__otherNodes})

    cluster.clock.advance(FULL_PERIOD / 2)
    silent_for_ever()
    leader.tick(0, light=True)
    assert leader._isLeader(), "a light tick within FULL_PERIOD of a full one checks no leader fallback"
    cluster.clock.advance(FULL_PERIOD / 2)
    silent_for_ever()
    leader.tick(0, light=True)  # FULL_PERIOD since the last full tick: this one is full
    assert not leader._isLeader()


def test_a_leader_at_rest_ticks_lightly_until_anything_is_under_way(light_cluster):
    # D36: at rest (everything committed and held by every follower, the lease held a
    # heartbeat ahead) nothing a full tick checks can change, so its light ticks hold
    # for RESTING_FULL_PERIOD; an entry under way brings FULL_PERIOD back.
    cluster = light_cluster
    leader = cluster.leader()
    cluster.run_until(leader.at_rest, seconds=1, what="the leader at rest")
    leader.tick(0)  # full
    full_until = leader._full_until
    assert full_until >= cluster.clock() + RESTING_FULL_PERIOD - 1e-9
    cluster.run(seconds=RESTING_FULL_PERIOD / 2)
    assert leader._full_until == full_until, "a full tick ran while the leader rested"
    cluster.submit(leader, put(1))
    assert not leader.at_rest()  # queued, not yet appended
    cluster.paused.update(cluster.followers())  # nobody acknowledges it
    leader.tick(0)
    assert not leader.at_rest() and leader._full_until <= cluster.clock() + FULL_PERIOD


def test_a_leader_is_not_at_rest_unless_its_lease_holds_a_heartbeat_ahead(light_cluster):
    cluster = light_cluster
    leader = cluster.leader()
    cluster.run_until(leader.at_rest, seconds=1, what="the leader at rest")
    cluster.paused.update(cluster.followers())  # their answers stop
    lapsing = cluster.run_until(lambda: not leader.at_rest(), seconds=1, what="the rest ending")
    assert leader.read_lease_valid(), "the rest must end before the lease lapses, not after"
    assert lapsing < cluster.timing.hear_window


def test_light_ticks_step_a_cut_off_leader_down_and_elect_another(light_cluster):
    cluster = light_cluster
    old = cluster.leader()
    cluster.commit(old, put(1))
    cluster.paused.add(old)  # its loop is stuck: the others hear nothing
    others = [n for n in cluster.nodes if n is not old]
    cluster.run_until(lambda: any(n._isLeader() for n in others) and all(
        n._getLeader() is not None and n._getLeader() != old.selfNode for n in others),
        seconds=3 * cluster.timing.election_max, what="a new leader the others follow")
    new = next(n for n in others if n._isLeader())
    applied, error = cluster.commit(new, put(2))
    assert applied is not None, error
    # The old leader, back, steps down (the new term's messages; its fallback otherwise).
    cluster.paused.discard(old)
    for node in others:
        cluster.paused.add(node)
    cluster.run_until(lambda: not old._isLeader(), seconds=cluster.timing.leader_fallback + 0.1,
                      what="the cut-off leader steps down")


def _pysyncobj_commit(leader) -> int:
    """The commit index pysyncobj's own tick computes from the leader's state (its loop, verbatim)."""
    commit_idx = next_commit = leader._SyncObj__raftCommitIndex
    others = leader._SyncObj__otherNodes
    log = leader._SyncObj__raftLog
    while commit_idx < log[-1][1]:
        commit_idx += 1
        count = 1 + sum(1 for node in others if leader._SyncObj__raftMatchIndex[node] >= commit_idx)
        if count <= (len(others) + 1) / 2:
            break
        entries = leader._SyncObj__getEntries(commit_idx, 1)
        if not entries or entries[0][2] != leader._SyncObj__raftCurrentTerm:
            continue
        next_commit = commit_idx
    return next_commit


def test_the_commit_index_is_pysyncobjs_for_every_match_index():
    with ticked_cluster() as cluster:
        first = cluster.leader()
        for n in range(3):
            cluster.commit(first, put(n))
        # A second leader: its log holds the first term's entries, then its own.
        cluster.paused.add(first)
        others = [n for n in cluster.nodes if n is not first]
        cluster.run_until(lambda: any(n._isLeader() for n in others), seconds=3 * cluster.timing.election_max,
                          what="a second leader")
        leader = next(n for n in others if n._isLeader())
        cluster.commit(leader, put(10))
        cluster.commit(leader, put(11))
        cluster.paused.update(cluster.nodes)  # nobody ticks: the state below is all there is
        log = leader._SyncObj__raftLog
        first_index, last = log[0][1], log[-1][1]
        terms = {log[i][2] for i in range(len(log))}
        assert len(terms) >= 2, "the log should hold entries of two terms"
        start_of_term = next(log[i][1] for i in range(len(log)) if log[i][2] == leader.raftCurrentTerm)
        matches = leader._SyncObj__raftMatchIndex
        nodes = list(leader._SyncObj__otherNodes)
        saved, saved_commit = dict(matches), leader._SyncObj__raftCommitIndex
        candidates = sorted({first_index - 1, first_index, start_of_term - 1, start_of_term, last - 1, last, last + 1})
        try:
            for commit_from in (first_index - 1, start_of_term - 2, start_of_term - 1):
                for values in itertools.product(candidates, repeat=len(nodes)):
                    matches.update(zip(nodes, values))
                    leader._SyncObj__raftCommitIndex = commit_from
                    expected = _pysyncobj_commit(leader)
                    leader.advance_commit()
                    assert leader._SyncObj__raftCommitIndex == expected, (commit_from, values)
                    assert leader._SyncObj__leaderCommitIndex == expected
        finally:
            matches.update(saved)
            leader._SyncObj__raftCommitIndex = saved_commit


def _sent_by(leader, send) -> list:
    """The messages `send()` makes the leader's transport send, by peer address."""
    sent = []
    transport = leader._SyncObj__transport
    original = transport.send
    transport.send = lambda node, message: sent.append((node.address, dict(message)))
    try:
        send()
    finally:
        del transport.send
        assert transport.send == original
    return sorted(sent, key=lambda item: item[0])


@pytest.mark.parametrize("behind", [0, 1, 5])
def test_the_lean_append_sends_what_pysyncobj_would(behind):
    from pysyncobj.syncobj import SyncObj

    with ticked_cluster() as cluster:
        leader = cluster.leader()
        for n in range(8):
            cluster.commit(leader, put(n))
        cluster.paused.update(cluster.nodes)
        next_index = leader._SyncObj__raftNextIndex
        last = leader._SyncObj__raftLog[-1][1]
        nodes = sorted(leader._SyncObj__otherNodes, key=lambda node: node.address)
        next_index[nodes[0]] = last + 1 - behind
        next_index[nodes[1]] = last + 1
        saved = dict(next_index)

        lean = _sent_by(leader, leader._SyncObj__sendAppendEntries)
        after_lean = dict(next_index)
        next_index.update(saved)
        theirs = _sent_by(leader, lambda: SyncObj._SyncObj__sendAppendEntries(leader))
        assert lean == theirs
        assert after_lean == dict(next_index)
        assert [len(message["entries"]) for _, message in lean] == [behind, 0]


def test_a_timer_left_after_a_light_tick_fires_no_later_than_the_node_polls():
    # on_loop leaves a timer due within ARMED_SOON after a light tick because whatever a
    # light tick changes is polled at POLLED_PERIOD or later (on_loop.py): keep it so.
    from haqueue.replication.on_loop import ARMED_SOON
    from haqueue.replication.raft_node import POLLED_PERIOD

    assert ARMED_SOON <= POLLED_PERIOD
