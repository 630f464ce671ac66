"""Disaster recovery (issue 27): two of three nodes gone for good, `node recover
--force-new-cluster` on the third, then the cluster grown back with add-node."""

from __future__ import annotations

import pytest

from tests.cluster.clients import client_for
from tests.cluster.convergence import wait_converged
from tests.cluster.test_membership import add_node, haqueue, wait_members

LEADER_TIMEOUT = 15.0


@pytest.mark.slow
def test_survivor_of_a_lost_majority_serves_alone_then_grows_back_to_three(make_cluster):
    cluster = make_cluster(["-f0"])
    leader = cluster.leader()
    with client_for(cluster, leader.id) as client:
        client.use("kept")
        acked = {client.put(f"job {n}".encode()): f"job {n}".encode() for n in range(50)}
    survivor = next(n for n in cluster.spec.nodes if n.id != leader.id)
    wait_converged(cluster, timeout=15)

    refused = haqueue("node", "recover", "--config", str(cluster.config_path), "--node", survivor.id,
                      "-b", str(cluster.workdir / survivor.id), "--force-new-cluster")
    assert refused.returncode == 1 and refused.stderr.count("\n") == 1
    assert "stop it first" in refused.stderr

    cluster.stop_node(survivor.id)
    refused = haqueue("node", "recover", "--config", str(cluster.config_path), "--node", survivor.id,
                      "-b", str(cluster.workdir / survivor.id), "--force-new-cluster")
    assert refused.returncode == 1 and refused.stderr.count("\n") == 1
    assert "still answer" in refused.stderr  # a cluster with a majority needs no recovery
    for node in cluster.spec.nodes:
        if node.id != survivor.id:
            cluster.kill_node(node.id)
    done = haqueue("node", "recover", "--config", str(cluster.config_path), "--node", survivor.id,
                   "-b", str(cluster.workdir / survivor.id), "--force-new-cluster", "--write")
    assert done.returncode == 0, done.stderr
    assert "removed from its log's members:" in done.stdout and "known committed through" in done.stdout
    assert [n.id for n in cluster.spec.nodes] == [survivor.id]

    cluster.start_node(survivor.id)
    assert cluster.leader(timeout=LEADER_TIMEOUT) is not None, cluster.log_tail(survivor.id)
    assert wait_members(cluster, survivor.id, 1) == [survivor.raft_endpoint]
    with client_for(cluster, survivor.id) as client:
        client.use("kept")
        for job_id, body in acked.items():
            assert client.peek(job_id).body == body
        client.put(b"after the recovery")

    # A group of one cannot commit a second member alone: the CLI writes the file and
    # asks for n4 to be started first, then commits on the second try.
    first_try = haqueue("cluster", "add-node", "--config", str(cluster.config_path), "--id", "n4",
                        "--address", "127.0.0.14", "--write")
    assert first_try.returncode == 1 and first_try.stderr.count("\n") == 1, first_try.stderr
    assert "start n4" in first_try.stderr
    assert "n4" in [n.id for n in cluster.spec.nodes]
    assert wait_members(cluster, survivor.id, 1)  # nothing was asked of Raft
    add_node(cluster, "n4", "127.0.0.14")
    add_node(cluster, "n5", "127.0.0.15")
    assert len(wait_members(cluster, survivor.id, 3)) == 3
    wait_converged(cluster, timeout=30)
    # Three members again: any one of them may go and the other two still serve.
    cluster.kill_node("n4")
    with client_for(cluster, survivor.id) as client:
        client.use("kept")
        assert client.put(b"with two of three") > max(acked)


def test_recover_without_force_new_cluster_is_one_line_and_changes_nothing(make_cluster):
    cluster = make_cluster(["-f0"], start=False)
    done = haqueue("node", "recover", "--config", str(cluster.config_path), "--node", "n1",
                   "-b", str(cluster.workdir / "n1"))
    assert done.returncode == 1 and done.stderr.count("\n") == 1
    assert "--force-new-cluster" in done.stderr
    assert not (cluster.workdir / "n1").exists()


def test_recover_with_yes_goes_ahead_while_a_member_without_a_majority_still_answers(make_cluster):
    # Five-node loss in miniature: one node of the three is dead, one answers but can
    # never make a majority with it; the operator recovers the stopped survivor anyway.
    # Without --yes the CLI refuses and names who answers; with it, the survivor's log
    # and a cluster file naming it alone are written, and it serves alone.
    cluster = make_cluster(["-f0"])
    leader = cluster.leader()
    with client_for(cluster, leader.id) as client:
        client.use("kept")
        acked = {client.put(f"job {n}".encode()): f"job {n}".encode() for n in range(20)}
    wait_converged(cluster, timeout=15)
    survivor, answering, dead = [n.id for n in cluster.spec.nodes]
    cluster.stop_node(survivor)
    cluster.kill_node(dead)
    recover = ("node", "recover", "--config", str(cluster.config_path), "--node", survivor,
               "-b", str(cluster.workdir / survivor), "--force-new-cluster")
    refused = haqueue(*recover)
    assert refused.returncode == 1 and refused.stderr.count("\n") == 1
    assert f"{answering} still answer" in refused.stderr and "--yes" in refused.stderr
    done = haqueue(*recover, "--yes", "--write")  # while it still answers
    assert done.returncode == 0, done.stderr
    cluster.kill_node(answering)  # the operator's part: it must not run beside the recovered node
    assert "removed from its log's members:" in done.stdout
    assert [n.id for n in cluster.spec.nodes] == [survivor]
    cluster.start_node(survivor)
    assert cluster.leader(timeout=LEADER_TIMEOUT) is not None, cluster.log_tail(survivor)
    with client_for(cluster, survivor) as client:
        client.use("kept")
        for job_id, body in acked.items():
            assert client.peek(job_id).body == body
