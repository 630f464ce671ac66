"""A received snapshot's state is built off the loop: the follower keeps the majority and does not campaign meanwhile.

Building the state of a big snapshot takes seconds (500,000 jobs: 4-12 s). A
follower that did it on its loop answered nothing meanwhile, and in a cluster
with a node down the leader lost its majority for that long (issue 23, B7).
Now the state is built in a thread (raft_snapshots.StateBuild) while the node
appends and acknowledges entries; it applies nothing until the state is in
place, and a node still building one must not lead. Here the build is held by
an event, so the test decides how long it takes; the cluster is ticked by hand.
"""

from __future__ import annotations

import threading

from haqueue.core import commands as C
from haqueue.replication.raft_node import FAIL_SUCCESS
from tests.replication.test_snapshot_writer import LIMIT, _fill
from tests.support.ticked import drop_messages, heal, ticked_cluster


def put(n: int) -> bytes:
    return C.encode_batch(5_000 + n, [(C.PUT, "default", 0, 0, 60_000, b"after the snapshot %d" % n)])


def test_a_follower_building_a_received_snapshot_acknowledges_entries_applies_none_and_does_not_campaign():
    with ticked_cluster(journal_limit=LIMIT) as cluster:
        leader = cluster.leader()
        for node in cluster.followers():
            node.journal_limit = None  # only the leader snapshots
        _fill(cluster, 4)
        cluster.until_snapshots(leader, 1)
        follower, other = cluster.followers()
        wiped = cluster.restart(follower)  # empty: it needs the leader's snapshot
        release = threading.Event()
        real_build = wiped.snapshots.build_state

        def held_build(records, path):
            assert release.wait(30), "the test never released the build"
            return real_build(records, path)

        wiped.snapshots.build_state = held_build
        try:
            cluster.run_until(lambda: wiped.snapshots.loading, seconds=5, what="the snapshot received")
            snapshot_index = wiped.raftLastApplied

            # The other follower goes: the leader's majority is now the node still building.
            other_cut = drop_messages([leader, wiped], [other]) + drop_messages([other], [leader, wiped])
            applied, error = cluster.commit(leader, put(1), seconds=2)
            assert error == FAIL_SUCCESS and applied is not None
            cluster.run_until(lambda: wiped.raftCommitIndex > snapshot_index, seconds=1,
                              what="the building node told the entry is committed")
            assert wiped.snapshots.loading
            assert wiped.raftLastApplied == snapshot_index and not wiped.state.jobs  # nothing applied

            # The leader goes too; the other follower comes back. The building node's
            # log is the longer one, so the other would grant it a vote: it must not ask.
            heal(other_cut)
            cluster.paused.add(leader)
            drop_messages([wiped, other], [leader])
            rounds = wiped.campaign.round
            cluster.run(seconds=5 * cluster.timing.election_max)
            assert wiped.campaign.round == rounds and not wiped._isLeader()
            assert not other._isLeader()  # its log is behind: no vote from the building node
        finally:
            release.set()
        cluster.run_until(lambda: wiped._isLeader(), seconds=10 * cluster.timing.election_max,
                          what="the node that finished building leads")
        cluster.run_until(lambda: wiped.state.digest() == other.state.digest() == leader.state.digest(), seconds=5,
                          what="both nodes applied the snapshot and the entry after it")
        assert len(wiped.state.jobs) == 16 + 1
