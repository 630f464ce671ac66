"""A node that is not the leader never gets an entry committed (docs/design.md I3, I4).

pysyncobj forwards a command submitted on a follower to the leader, which
commits it. haqueue only submits while it leads, but a deposed leader's
sessions can still submit in the moment before it notices (a SIGSTOPped
leader resuming): a put of a client that gets no reply would land, and a
deposed leader's RELEASE_ORPHANS would release every reservation of the new
leader's live connections. ReplicatedQueue refuses to forward instead.
Three nodes ticked by hand in virtual time (tests/support/ticked.py).
"""

from __future__ import annotations

from haqueue.core import commands as C
from haqueue.replication.raft_node import FAIL_SUCCESS
from tests.support.ticked import ticked_cluster


def test_command_submitted_on_a_follower_fails_and_is_never_applied():
    with ticked_cluster() as cluster:
        leader, follower = cluster.leader(), cluster.followers()[0]

        applied, error = cluster.commit(follower, C.encode_batch(1, [(C.PUT, "default", 0, 0, 60000, b"from a follower")]))
        assert error != FAIL_SUCCESS and applied is None

        # A later entry from the leader proves the log moved past any forwarded one.
        applied, error = cluster.commit(leader, C.encode_batch(2, [(C.TICK,)]))
        assert error == FAIL_SUCCESS
        cluster.run_until(cluster.caught_up, seconds=1, what="every node applying the leader's entry")
        for node in cluster.nodes:
            assert len(node.state.jobs) == 0
