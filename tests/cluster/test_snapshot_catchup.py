"""A follower far behind catches up through a snapshot (issue 3, "Snapshots").

With `-s 65536` the leader folds its journal into a snapshot every 64 KiB.
While a follower is down the leader compacts past everything that follower
has, so the follower can only catch up by installing the leader's snapshot.
"""

from __future__ import annotations

import time

from haqueue import admin_client
from tests.cluster.clients import client_for
from tests.cluster.convergence import wait_converged

JOURNAL_LIMIT = 65536
BODY = 1000  # bytes: 100 puts pass the journal limit once or twice


def first_log_index(status: dict) -> int:
    # pysyncobj keeps the entry at the compaction point as the log's first one.
    return status["commit_index"] - status["log_length"] + 1


def test_follower_behind_the_leaders_compaction_catches_up_from_a_snapshot(make_cluster):
    cluster = make_cluster(["-f0", "-s", str(JOURNAL_LIMIT)])
    leader = cluster.leader()
    follower = next(m for m in cluster.spec.nodes if m.id != leader.id)
    with client_for(cluster, leader.id) as client:
        client.put(b"before the follower stopped")
        behind = wait_converged(cluster, timeout=10)[follower.id]["applied_index"]
        cluster.kill_node(follower.id)

        acked = {}
        deadline = time.monotonic() + 20
        while True:
            for i in range(100):
                body = f"{len(acked)}-".encode().ljust(BODY, b"x")
                acked[client.put(body)] = body
            status = admin_client.status(leader.address, leader.admin_port, 1.0)
            if first_log_index(status) > behind + 1:
                break  # the entries the follower needs are gone from the leader's log
            assert time.monotonic() < deadline, f"the leader never compacted its log: {status}"
        for job_id in list(acked)[::3]:
            client.delete(job_id)
            del acked[job_id]

        cluster.start_node(follower.id)
        statuses = wait_converged(cluster, timeout=20)
    assert statuses[follower.id]["jobs"] == len(acked) + 1
    assert (cluster.workdir / follower.id / "raft.snapshot").exists()
