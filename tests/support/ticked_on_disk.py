"""Three Raft nodes with data directories, ticked by hand in virtual time.

tests/support/ticked.py's cluster keeps its nodes in memory; the durability
tests need journals on disk and a policy, and to build the same cluster again
on the same directories and addresses (a restart of every node).
"""

from __future__ import annotations

from tests.support.ticked import ticked_cluster


def cluster_on_disk(tmp_path, addresses: list[str], policy, prepare=lambda node: None):
    """Nodes at `addresses` with data directories tmp_path/n0, n1, ...; `prepare(node)` runs before
    any of them listens. Yields once they have a leader everyone follows."""
    return ticked_cluster(addresses=addresses, data_root=str(tmp_path), node_dir="n{n}", policy=policy,
                          prepare=prepare)
