"""Raft traffic is encrypted with the cluster secret: a node with another secret is shut out."""

from __future__ import annotations

import time

from haqueue.replication.fsync_policy import NEVER
from haqueue.replication.raft_node import RaftTiming, ReplicatedQueue
from tests.replication.raft_nodes import free_ports, wait_for


def test_a_node_with_the_wrong_secret_never_joins():
    addresses = [f"127.0.0.1:{p}" for p in free_ports(3)]
    secrets = ["right", "right", "wrong"]
    nodes = [ReplicatedQueue(a, [b for b in addresses if b != a], data_dir=None, policy=NEVER,
                             secret=s, timing=RaftTiming()) for a, s in zip(addresses, secrets)]
    try:
        for node in nodes:
            node.start()
        assert wait_for(lambda: sum(n._isLeader() for n in nodes[:2]) == 1
                        and all(n._getLeader() is not None for n in nodes[:2]), 10)
        # Give the outsider several election timeouts to hear from anyone.
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            assert nodes[2]._getLeader() is None
            assert not nodes[2]._isLeader()
            time.sleep(0.05)
        assert nodes[0].raftCurrentTerm == nodes[1].raftCurrentTerm  # not disturbed by it
    finally:
        for node in nodes:
            node.stop()
