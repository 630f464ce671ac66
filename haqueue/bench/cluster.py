"""`bench cluster CONFIG` (and compare, timers and flood --cluster): find the node of a running
cluster that serves clients.

Rules: the cluster file names every node and its admin port; the node whose
`/leader` check passes is the one listening on the client port (design I3), so
bench measures what a client behind the VIP would get. A file that is missing or
invalid, or a cluster with no single leader before the timeout, is one line.
"""

from __future__ import annotations

import time

from haqueue import admin_client
from haqueue.bench.load import BenchError
from haqueue.cluster import ClusterFileError, Node, load_cluster

CHECK_TIMEOUT = 0.3  # per admin request; a node that takes longer is not leading


def find_leader(config_path: str, timeout: float) -> tuple[Node, int]:
    """The leader of the cluster in `config_path` and the cluster's node count."""
    try:
        spec = load_cluster(config_path)
    except ClusterFileError as exc:
        raise BenchError(str(exc)) from None
    deadline = time.monotonic() + timeout
    while True:
        serving = [
            m for m in spec.nodes if admin_client.is_leader(m.address, m.admin_port, CHECK_TIMEOUT)
        ]
        if len(serving) == 1:
            return serving[0], len(spec.nodes)
        if time.monotonic() > deadline:
            found = ", ".join(m.id for m in serving) or "none"
            raise BenchError(
                f"{config_path}: no single leader after {timeout:g} s (leading: {found}); "
                "is the cluster up? `haqueue up` prints its cluster file"
            )
        time.sleep(0.1)  # polling the admin endpoints, bounded by the deadline
