"""Three Raft nodes with data directories, ticked by hand in virtual time.

tests/support/ticked.py's cluster keeps its nodes in memory; the durability
tests need journals on disk and a policy, and to build the same cluster again
on the same directories and addresses (a restart of every node).
"""

from __future__ import annotations

from contextlib import contextmanager

from haqueue.replication import pysyncobj_patches, raft_node
from haqueue.replication.raft_node import RaftTiming, ReplicatedQueue
from tests.support.ticked import STEP, TickedCluster, VirtualClock


@contextmanager
def cluster_on_disk(tmp_path, addresses: list[str], policy, prepare=lambda node: None):
    """Nodes at `addresses` with data directories tmp_path/n0, n1, ...; `prepare(node)` runs before
    any of them listens. Yields once they have a leader everyone follows."""
    clock = VirtualClock()
    timing = RaftTiming()
    saved_lease_clock = raft_node.lease_clock
    nodes: list[ReplicatedQueue] = []
    with pysyncobj_patches.use_clock(clock):
        raft_node.lease_clock = clock
        try:
            for n, address in enumerate(addresses):
                nodes.append(ReplicatedQueue(address, [a for a in addresses if a != address],
                                             data_dir=str(tmp_path / f"n{n}"), policy=policy, secret="s",
                                             timing=timing))
            for node in nodes:
                prepare(node)
                node.transport.tryGetReady()
            cluster = TickedCluster(nodes, clock, timing, STEP, {node: "s" for node in nodes}, {})
            cluster.run_until(cluster.settled, seconds=10 * timing.election_max, what="a leader")
            yield cluster
        finally:
            raft_node.lease_clock = saved_lease_clock
            for node in nodes:
                node.stop()
