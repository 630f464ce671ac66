"""A node that is not the leader never gets an entry committed (docs/design.md I3, I4).

pysyncobj forwards a command submitted on a follower to the leader, which
commits it. haqueue only submits while it leads, but a deposed leader's
sessions can still submit in the moment before it notices (a SIGSTOPped
leader resuming): a put of a client that gets no reply would land, and a
deposed leader's RELEASE_ORPHANS would release every reservation of the new
leader's live connections. ReplicatedQueue refuses to forward instead.
"""

from __future__ import annotations

import threading

from haqueue.core import commands as C
from haqueue.replication.raft_node import FAIL_SUCCESS, RaftTiming
from tests.replication.raft_nodes import running_cluster, wait_for


def test_command_submitted_on_a_follower_fails_and_is_never_applied():
    with running_cluster(RaftTiming()) as nodes:
        leader = next(n for n in nodes if n._isLeader())
        follower = next(n for n in nodes if not n._isLeader())

        outcome = {}
        done = threading.Event()

        def callback(results, error):
            outcome.update(results=results, error=error)
            done.set()

        follower.submit(C.encode_batch(1, [(C.PUT, "default", 0, 0, 60000, b"from a follower")]), callback)
        assert done.wait(5), "the submit never completed"
        assert outcome["error"] != FAIL_SUCCESS

        # A later entry from the leader proves the log moved past any forwarded one.
        marker = threading.Event()
        leader.submit(C.encode_batch(2, [(C.TICK,)]), lambda r, e: marker.set())
        assert marker.wait(5)
        assert wait_for(lambda: all(n.status()["applied_index"] == leader.status()["commit_index"]
                                 for n in nodes), 5)
        for node in nodes:
            with node.state_lock:
                assert len(node.state.jobs) == 0
