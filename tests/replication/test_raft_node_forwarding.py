"""A node that is not the leader never gets an entry committed (design.md I3, I4).

pysyncobj forwards a command submitted on a follower to the leader, which
commits it. haqueue only submits while it leads, but a deposed leader's
sessions can still submit in the moment before it notices (a SIGSTOPped
leader resuming): a put of a client that gets no reply would land, and a
deposed leader's RELEASE_ORPHANS would release every reservation of the new
leader's live connections. ReplicatedQueue refuses to forward instead.
"""

from __future__ import annotations

import socket
import threading
import time

from haqueue.core import commands as C
from haqueue.replication.fsync_policy import NEVER
from haqueue.replication.raft_node import FAIL_SUCCESS, RaftTiming, ReplicatedQueue


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _wait(predicate, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return False


def test_command_submitted_on_a_follower_fails_and_is_never_applied():
    addresses = [f"127.0.0.1:{p}" for p in _free_ports(3)]
    nodes = [ReplicatedQueue(a, [b for b in addresses if b != a], data_dir=None, policy=NEVER,
                             secret="s", timing=RaftTiming()) for a in addresses]
    try:
        for node in nodes:
            node.start()
        assert _wait(lambda: sum(n._isLeader() for n in nodes) == 1
                     and all(n._getLeader() is not None for n in nodes), 10)
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
        assert _wait(lambda: all(n.status()["applied_index"] == leader.status()["commit_index"]
                                 for n in nodes), 5)
        for node in nodes:
            with node.state_lock:
                assert len(node.state.jobs) == 0
    finally:
        for node in nodes:
            node.stop()
