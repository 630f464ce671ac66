"""Waiting until the nodes of a cluster hold one state (docs/design.md I2).

Same log, same state, byte for byte: once the cluster is quiet, every node
has applied the same index and reports the same state digest through its
admin endpoint (/status?digest=1).
"""

from __future__ import annotations

import time

from haqueue import admin_client


def snapshot_statuses(cluster, node_ids=None) -> dict[str, dict | None]:
    spec = cluster.spec
    out = {}
    for member in spec.nodes:
        if node_ids is not None and member.id not in node_ids:
            continue
        try:
            out[member.id] = admin_client.status(member.address, member.admin_port, 1.0, digest=True)
        except (OSError, ValueError):
            out[member.id] = None
    return out


def converged(statuses: dict[str, dict | None]) -> bool:
    if any(s is None for s in statuses.values()):
        return False
    digests = {s["digest"] for s in statuses.values()}
    applied = {s["applied_index"] for s in statuses.values()}
    return len(digests) == 1 and len(applied) == 1 and all(
        s["applied_index"] == s["commit_index"] for s in statuses.values())


def wait_converged(cluster, timeout: float, node_ids=None) -> dict[str, dict]:
    """Poll until the nodes agree; fail with every node's view if they never do."""
    deadline = time.monotonic() + timeout
    while True:
        statuses = snapshot_statuses(cluster, node_ids)
        if converged(statuses):
            return statuses
        if time.monotonic() >= deadline:
            view = {n: (s and {k: s.get(k) for k in ("role", "term", "commit_index", "applied_index",
                                                     "jobs", "digest")}) for n, s in statuses.items()}
            raise AssertionError(f"nodes did not converge within {timeout:g} s: {view}")
        time.sleep(0.1)
