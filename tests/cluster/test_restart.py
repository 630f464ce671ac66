"""Restarts with the durable policy (-f0): nothing acknowledged is lost (docs/design.md I2, I6, I7).

Nodes are killed with SIGKILL, so nothing is flushed on the way out: what a
restarted node knows comes from its journal and snapshot alone.
"""

from __future__ import annotations

import pytest

from tests.cluster.clients import client_for, job_stats, peek_body
from tests.cluster.convergence import wait_converged

RESTART_LEADER_TIMEOUT = 15.0


def put_jobs(client, count: int, tag: str) -> dict[int, bytes]:
    acked = {}
    for i in range(count):
        body = f"{tag}-{i}".encode()
        acked[client.put(body, ttr=60)] = body
    return acked


def assert_all_present(client, acked: dict[int, bytes]) -> None:
    missing = {job_id for job_id, body in acked.items() if peek_body(client, job_id) != body}
    assert not missing, f"{len(missing)} acknowledged jobs lost, e.g. {sorted(missing)[:5]}"


def test_restarted_follower_catches_up_and_all_nodes_hold_one_state(make_cluster):
    cluster = make_cluster(["-f0"])
    leader = cluster.leader()
    follower = next(m.id for m in cluster.spec.nodes if m.id != leader.id)
    with client_for(cluster, leader.id) as client:
        acked = put_jobs(client, 100, "before")
        cluster.kill_node(follower)
        acked |= put_jobs(client, 100, "while-down")  # the other follower keeps a majority
        cluster.start_node(follower)
        acked |= put_jobs(client, 100, "after")
        wait_converged(cluster, timeout=15)
        assert_all_present(client, acked)
    assert cluster.leader(timeout=1).id == leader.id, "a restarted follower should not depose the leader"


@pytest.mark.slow
def test_whole_cluster_killed_and_restarted_loses_nothing_acknowledged(make_cluster):
    cluster = make_cluster(["-f0"])
    leader = cluster.leader()
    with client_for(cluster, leader.id) as client:
        acked = put_jobs(client, 300, "durable")
        reserved = client.reserve(timeout=0)  # held by a connection that dies with the cluster
        deleted = client.reserve(timeout=0)
        client.delete(deleted)
        del acked[deleted.id]
        client.bury(client.reserve(timeout=0))
        before = max(acked)
    for member in cluster.spec.nodes:
        cluster.kill_node(member.id)
    cluster.start()
    new_leader = cluster.leader(timeout=RESTART_LEADER_TIMEOUT)
    assert new_leader is not None, f"no leader within {RESTART_LEADER_TIMEOUT:g} s of the restart"
    with client_for(cluster, new_leader.id) as client:
        assert_all_present(client, acked)
        assert peek_body(client, deleted.id) is None
        # The reservation died with its connection: the new leader released it.
        assert job_stats(client, reserved.id)["state"] == "ready"
        assert client.peek_buried().body.startswith(b"durable-")
        assert client.put(b"after the restart") > before  # I6: ids never repeat
    wait_converged(cluster, timeout=15)
