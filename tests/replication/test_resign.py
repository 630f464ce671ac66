"""A leader that must stop says so, and its successor leads at once (docs/pysyncobj.md D37).

Without the word, a leader whose journal fails (or that is shut down) just
goes quiet, and its followers, sticky to it for election_min after they last
heard it, elect a successor only after an election timeout (0.3-0.6 s). In
virtual time (tests/support/ticked.py): the successor must lead, with its
read lease, well within election_min, nothing acknowledged may be missing from
it, and a resignation that does not come from the leader a node follows, in
its term, must change nothing. A leader that exits with answers unread resets
its links; what it said before the reset must still be read.
"""

from __future__ import annotations

import logging
import os
import resource

import pytest

from haqueue import events
from haqueue.core import commands as C
from haqueue.replication.raft_node import FAIL_SUCCESS
from haqueue.replication.transport import KEEPALIVE, RESIGN
from tests.support.ticked import ticked_cluster


def _put(n: int) -> bytes:
    return C.encode_batch(1_000 + n, [(C.PUT, "default", 0, 0, 60_000, b"job %d" % n)])


def _bodies(node) -> set[bytes]:
    return {job.body for job in node.state.jobs.values()}


def _successor_serving(cluster, old):
    survivors = [n for n in cluster.nodes if n is not old]

    def serving():
        leaders = [n for n in survivors if n._isLeader()]
        if len(leaders) != 1 or not leaders[0].read_lease_valid():
            return None
        new = leaders[0]
        return new if all(n._getLeader() == new.selfNode for n in survivors) else None

    return serving


def _fail_journal(node) -> None:
    """The node's next journal write fails for real (EBADF): its fd now reads /dev/null."""
    read_only = os.open(os.devnull, os.O_RDONLY)
    try:
        os.dup2(read_only, node.journal.fd)
    finally:
        os.close(read_only)


def _commit_some(cluster, leader, count: int) -> set[bytes]:
    for n in range(count):
        applied, error = cluster.commit(leader, _put(n))
        assert error == FAIL_SUCCESS
    cluster.run_until(cluster.caught_up, seconds=1.0, what="followers caught up")
    return {b"job %d" % n for n in range(count)}


@pytest.mark.parametrize("how", ["journal fails", "clean stop"])
def test_a_leader_that_must_stop_resigns_and_a_successor_leads_well_within_an_election_timeout(tmp_path, how):
    with ticked_cluster(data_root=str(tmp_path)) as cluster:
        old = cluster.leader()
        acked = _commit_some(cluster, old, 5)
        term = old.raftCurrentTerm
        if how == "journal fails":
            _fail_journal(old)
            outcome = cluster.submit(old, _put(99))
            assert old.tick_once() is False  # the write failed: the node stops ticking
            assert "write failed" in old.fatal_error
            assert all(error != FAIL_SUCCESS for _applied, error in outcome)  # not acknowledged
        assert not old.read_lease_valid() or how == "clean stop"
        for follower in cluster.followers():  # unread when it exits: its sockets reset, not close
            follower.transport.send(old.selfNode, KEEPALIVE)
        old.stop()  # the process exits: its sockets close
        cluster.paused.add(old)
        took = cluster.run_until(_successor_serving(cluster, old), seconds=cluster.timing.election_max,
                                 what="a successor leading with its read lease")
        # Sticky followers would have waited election_min after the last heartbeat, then
        # an election timeout of their own; the resignation frees them at once.
        assert took < cluster.timing.election_min / 2, took
        new = _successor_serving(cluster, old)()
        assert new.raftCurrentTerm == term + 1
        assert acked <= _bodies(new)


def test_the_successor_named_is_the_follower_with_the_most_of_the_log(tmp_path):
    with ticked_cluster(data_root=str(tmp_path)) as cluster:
        old = cluster.leader()
        _commit_some(cluster, old, 3)
        behind, ahead = cluster.followers()
        cluster.paused.add(behind)  # it hears nothing more: the next entries reach `ahead` only
        for n in range(3, 6):
            cluster.commit(old, _put(n))
        assert old.peer_match_indexes()[ahead.selfNode.address] > old.peer_match_indexes()[behind.selfNode.address]
        old.stop()
        cluster.paused = {old}
        cluster.run_until(_successor_serving(cluster, old), seconds=cluster.timing.election_min / 2,
                          what="the follower ahead leading")
        assert _successor_serving(cluster, old)() is ahead


@pytest.mark.parametrize("sender", ["a follower", "the leader, of an older term"])
def test_a_resignation_not_from_the_leader_followed_in_its_term_changes_nothing(sender):
    with ticked_cluster() as cluster:
        leader = cluster.leader()
        one, other = cluster.followers()
        term = leader.raftCurrentTerm
        events.clear()
        if sender == "a follower":
            one.transport.send(other.selfNode, {"type": RESIGN, "term": term})
        else:
            leader.transport.send(other.selfNode, {"type": RESIGN, "term": term - 1})
        cluster.run_until(lambda: [e for e in events.recent() if e["event"] == "resignation_ignored"],
                          seconds=cluster.timing.heartbeat, what="the ignored resignation said")
        cluster.run_while(lambda: cluster.settled() and cluster.leader() is leader
                          and other._getLeader() == leader.selfNode and leader.raftCurrentTerm == term,
                          seconds=3 * cluster.timing.election_max, what="the same leader, followed by all")


def test_a_follower_campaigns_in_the_tick_that_reads_its_pre_vote_majority():
    # The leader dies without a word (SIGKILL): the followers' own timeouts elect a
    # successor. The loop ticks lightly for messages (D32), as in production. A campaigner
    # whose pre-votes were granted used to wait for its next full tick (50 ms on the
    # loop): the other follower's timeout ran out meanwhile, both campaigned at once, and
    # the vote split a third of the time.
    with ticked_cluster() as cluster:
        cluster.light = True
        old = cluster.leader()
        cluster.paused.add(old)  # its process is gone: no tick, no word
        survivors = [n for n in cluster.nodes if n is not old]

        def no_won_round_waits() -> bool:
            return not any(node._SyncObj__raftElectionDeadline < cluster.clock() and node.campaign.term is not None
                           and node.campaign.won(node.raftCurrentTerm, node._is_majority) for node in survivors)

        cluster.run_while(no_won_round_waits, seconds=3 * cluster.timing.election_max,
                          what="no won pre-vote round left waiting after a tick")
        assert any(node._isLeader() for node in survivors)


def test_followers_whose_timeouts_run_out_together_elect_one_leader_in_one_term():
    # The leader dies without a word; both followers' election timeouts run out in the
    # same round. Each asks the other for a pre-vote. One that grants another's
    # pre-vote backs that campaigner (its own round dropped, its timeout started
    # again): before, both granted, both campaigned, each voted for itself, and the
    # term was lost to a split vote.
    with ticked_cluster() as cluster:
        old = cluster.leader()
        term = old.raftCurrentTerm
        cluster.paused.add(old)
        survivors = [n for n in cluster.nodes if n is not old]
        cluster.run(seconds=cluster.timing.election_min)  # no longer sticky to the old leader
        for node in survivors:
            node._SyncObj__raftElectionDeadline = cluster.clock() + cluster.step / 2
        cluster.run_until(lambda: any(n._isLeader() for n in survivors), seconds=cluster.timing.election_max,
                          what="a new leader")
        assert max(n.raftCurrentTerm for n in survivors) == term + 1


def test_a_leader_whose_links_have_descriptors_past_fd_setsize_stops_and_resigns(caplog):
    # A node serving many clients has descriptors past 1024, which select() refuses:
    # the stop's wait for its peers' FIN (transport.close_links) must not use it.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 2048:
        if hard != resource.RLIM_INFINITY and hard < 2048:
            pytest.skip(f"RLIMIT_NOFILE hard limit {hard}: cannot open 1,100 descriptors")
        resource.setrlimit(resource.RLIMIT_NOFILE, (2048, hard))
    filler = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    try:
        with ticked_cluster() as cluster:
            old = cluster.leader()
            links = list(old.transport._connections.values())
            assert links and all(link._fileno > 1024 for link in links)
            old.stop()
            # Its shutdown ran whole: nothing failed and was only logged (raft_node._destroy).
            assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text
            cluster.paused.add(old)
            took = cluster.run_until(_successor_serving(cluster, old), seconds=cluster.timing.election_max,
                                     what="a successor leading with its read lease")
            assert took < cluster.timing.election_min / 2, took  # the resignation arrived
    finally:
        for fd in filler:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
