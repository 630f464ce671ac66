"""Changing a real cluster's members online (issue 27): add-node, remove-node, and losing
the leader during it, with real `haqueue serve` processes and the real CLI on loopback."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from haqueue import admin_client
from tests.cluster.clients import client_for
from tests.cluster.convergence import wait_converged
from tests.cluster.workload import Workload, check_contents, check_reservations

LEADER_TIMEOUT = 15.0


def haqueue(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "haqueue", *args], capture_output=True, text=True,
                          timeout=timeout)


def members_seen_by(cluster, node_id: str) -> list[str]:
    member = cluster.spec.node(node_id)
    return admin_client.status(member.address, member.admin_port, 1.0).get("members", [])


def wait_members(cluster, node_id: str, count: int, timeout: float = 20.0) -> list[str]:
    deadline = time.monotonic() + timeout
    while True:
        try:
            seen = members_seen_by(cluster, node_id)
        except (OSError, ValueError):
            seen = []
        if len(seen) == count:
            return seen
        if time.monotonic() >= deadline:
            raise AssertionError(f"{node_id} sees members {seen}, not {count} of them")
        time.sleep(0.1)  # another process's state: polled


def add_node(cluster, node_id: str, address: str) -> None:
    """add-node, then start the node (or, when it is in the file already, start it, then add-node)."""
    named = node_id in [n.id for n in cluster.spec.nodes]
    if named:
        cluster.start_node(node_id)
        member = cluster.spec.node(node_id)
        deadline = time.monotonic() + LEADER_TIMEOUT
        while not admin_client.port_open(member.address, member.admin_port):
            assert time.monotonic() < deadline, f"{node_id} never opened its admin port"
            time.sleep(0.05)  # another process starting: polled
    done = haqueue("cluster", "add-node", "--config", str(cluster.config_path), "--id", node_id,
                   "--address", address, "--write")
    assert done.returncode == 0, done.stderr
    assert f"added {node_id}" in done.stdout
    if not named:
        cluster.start_node(node_id)


@pytest.mark.slow
def test_grow_to_five_under_load_remove_the_leader_then_kill_the_next_loses_nothing(make_cluster):
    cluster = make_cluster(["-f0"])
    first = cluster.leader()
    work = Workload(cluster, producers=2, consumers=1).start()
    try:
        assert work.wait_for_puts(first.id, 100, timeout=15), "load never got going"
        add_node(cluster, "n4", "127.0.0.14")
        add_node(cluster, "n5", "127.0.0.15")
        work.spec = cluster.spec  # the clients look for the leader among all five
        for node_id in ("n1", "n4", "n5"):
            assert len(wait_members(cluster, node_id, 5)) == 5
        old = cluster.leader(timeout=LEADER_TIMEOUT)
        done = haqueue("cluster", "remove-node", "--config", str(cluster.config_path), "--id", old.id, "--write")
        assert done.returncode == 0, done.stderr
        assert f"removed {old.id}" in done.stdout
        cluster.stop_node(old.id)
        assert old.id not in [n.id for n in cluster.spec.nodes]
        second = cluster.leader(timeout=LEADER_TIMEOUT)
        assert second is not None and second.id != old.id
        assert len(wait_members(cluster, second.id, 4)) == 4
        assert work.wait_for_puts(second.id, 50, timeout=15), "load did not resume on the next leader"
        cluster.kill_node(second.id)
        third = cluster.leader(timeout=LEADER_TIMEOUT, exclude=second.id)
        assert third is not None, "no leader after killing the second"
        assert work.wait_for_puts(third.id, 50, timeout=15), "load did not resume after the kill"
    finally:
        ledger = work.stop()
    assert not ledger.errors, ledger.errors
    assert check_reservations(ledger) == []
    with client_for(cluster, third.id) as client:
        assert check_contents(ledger, client) == []
    live = [n.id for n in cluster.spec.nodes if cluster.alive(n.id)]
    assert len(live) == 3
    wait_converged(cluster, timeout=30, node_ids=live)


def _post(member, body: bytes, operator: str | None = "test") -> tuple[int, dict]:
    import http.client
    import json

    conn = http.client.HTTPConnection(member.address, member.admin_port, timeout=10)
    headers = {"Content-Length": str(len(body))}
    if operator:
        headers["X-Haqueue-Operator"] = operator
    try:
        conn.request("POST", "/membership", body=body, headers=headers)
        response = conn.getresponse()
        return response.status, json.loads(response.read())
    finally:
        conn.close()


def test_membership_endpoint_names_its_refusals(make_cluster):
    cluster = make_cluster(["-f0"])
    leader = cluster.leader()
    follower = next(n for n in cluster.spec.nodes if n.id != leader.id)
    add_n1_again = b'{"op": "add", "id": "n1", "address": "%s"}' % cluster.spec.node("n1").raft_endpoint.encode()
    assert _post(leader, add_n1_again, operator=None)[0] == 400  # who asks is part of the event
    assert _post(leader, b"not json")[0] == 400
    assert _post(leader, b'{"op": "rename", "id": "n1", "address": "x"}')[0] == 400
    status, answer = _post(follower, add_n1_again)
    assert (status, answer) == (503, {"error": "not leader", "leader": leader.raft_endpoint})
    status, answer = _post(leader, add_n1_again)
    assert status == 409 and "already a member" in answer["error"]
    assert len(members_seen_by(cluster, leader.id)) == 3


def test_a_dead_host_is_replaced_by_one_at_a_new_address(make_cluster):
    cluster = make_cluster(["-f0"])
    leader = cluster.leader()
    dead = next(n for n in cluster.spec.nodes if n.id != leader.id)
    with client_for(cluster, leader.id) as client:
        before = [client.put(b"before %d" % n) for n in range(20)]
    cluster.kill_node(dead.id)
    done = haqueue("cluster", "remove-node", "--config", str(cluster.config_path), "--id", dead.id)
    assert done.returncode == 0, done.stderr
    new_file = cluster.config_path.with_name("cluster.new.toml")
    assert f"wrote {new_file}" in done.stdout  # beside the old file without --write
    cluster.config_path.with_name("cluster.toml.old").write_text(cluster.config_path.read_text())
    cluster.config_path.write_text(new_file.read_text())  # deployed
    assert len(wait_members(cluster, leader.id, 2)) == 2
    add_node(cluster, "n9", "127.0.0.19")
    assert len(wait_members(cluster, leader.id, 3)) == 3
    assert [n.id for n in cluster.spec.nodes] == sorted({"n1", "n2", "n3"} - {dead.id}) + ["n9"]
    agree = haqueue("cluster", "members", "--config", str(cluster.config_path))
    assert agree.returncode == 0 and "NOT" not in agree.stdout and "n9" in agree.stdout
    old_file = haqueue("cluster", "members", "--config", str(cluster.config_path.with_name("cluster.toml.old")))
    assert old_file.returncode == 1, old_file.stderr
    assert f"{dead.id}" in old_file.stdout and "in the file, NOT a member" in old_file.stdout
    wait_converged(cluster, timeout=30)
    # The replacement counts: with it, the leader's loss still leaves a majority.
    cluster.kill_node(leader.id)
    survivor = cluster.leader(timeout=LEADER_TIMEOUT, exclude=leader.id)
    assert survivor is not None
    with client_for(cluster, survivor.id) as client:
        assert [client.peek(job_id).body for job_id in before] == [b"before %d" % n for n in range(20)]


def test_an_added_node_starts_empty_and_catches_up_from_the_leaders_snapshot(make_cluster):
    cluster = make_cluster(["-f0", "-s", "65536"])
    leader = cluster.leader()
    with client_for(cluster, leader.id) as client:
        acked = {}
        deadline = time.monotonic() + 20
        while True:
            for _ in range(100):
                body = f"{len(acked)}-".encode().ljust(1000, b"x")
                acked[client.put(body)] = body
            status = admin_client.status(leader.address, leader.admin_port, 1.0)
            if status["commit_index"] - status["log_length"] + 1 > 2:
                break  # the log's first entries are folded into a snapshot: a new node needs it
            assert time.monotonic() < deadline, f"the leader never compacted its log: {status}"
    add_node(cluster, "n4", "127.0.0.14")
    statuses = wait_converged(cluster, timeout=30)
    assert statuses["n4"]["jobs"] == len(acked)
    assert (cluster.workdir / "n4" / "raft.snapshot").exists()
    assert "snapshot restored" in (cluster.workdir / "n4.log").read_text()
    assert len(statuses["n4"]["members"]) == 4


def _cluster_view(member) -> dict:
    import json

    code, body = admin_client.get(member.address, member.admin_port, "/cluster", 2.0)
    assert code == 200, body
    return json.loads(body)


def _status_rows(config) -> dict:
    import json

    done = haqueue("cluster", "status", "--json", "--config", str(config))
    assert "Traceback" not in done.stderr, done.stderr
    return {row["node"]: row for row in json.loads(done.stdout)}


def _until(what: str, probe, timeout: float = 20.0):
    deadline = time.monotonic() + timeout
    while True:
        seen = probe()
        if seen:
            return seen
        assert time.monotonic() < deadline, f"{what}: not within {timeout:g} s"
        time.sleep(0.2)  # other processes' state: polled


def test_the_views_follow_the_live_members_and_a_removed_node_stops_with_its_own_status(make_cluster):
    from haqueue.replication.removal import REMOVED_EXIT

    cluster = make_cluster(["-f0"])
    old_file = cluster.config_path.with_name("deployed.toml")  # what the running nodes were started with
    old_file.write_text(cluster.config_path.read_text())
    leader = cluster.leader()
    # Added: the nodes still run on a file without n4, and `cluster status` reads that file too.
    add_node(cluster, "n4", "127.0.0.14")
    rows = _until("cluster status showing n4 up", lambda: (lambda r: r if r.get("n4", {}).get("reachable")
                                                           else None)(_status_rows(old_file)))
    assert rows["n4"]["membership"] == "member" and rows["n4"]["raft"] == cluster.spec.node("n4").raft_endpoint
    assert rows["n4"]["role"] == "follower" and rows["n4"]["client_port"] is False
    table = haqueue("cluster", "status", "--config", str(old_file)).stdout
    assert any(line.split()[:3] == ["n4", "yes", "follower"] for line in table.splitlines()), table
    follower = next(n for n in cluster.spec.nodes if n.id not in (leader.id, "n4"))
    view = _until("/cluster on an old node showing n4 up", lambda: (
        lambda v: v if any(n["node"] == "n4" and n["reachable"] for n in v["nodes"]) else None)(
        _cluster_view(follower)))
    assert [n["node"] for n in view["nodes"]] == ["n1", "n2", "n3", "n4"]
    assert {n["membership"] for n in view["nodes"]} == {"member"}
    top = haqueue("top", "--once", "--config", str(old_file)).stdout
    assert any(line.split()[0] == "n4" and line.split()[-1] == "yes" for line in top.splitlines()[2:7]), top
    # Removed: the node learns it, stops with its own status and says why in one line.
    term = admin_client.status(leader.address, leader.admin_port, 1.0)["term"]
    done = haqueue("cluster", "remove-node", "--config", str(cluster.config_path), "--id", follower.id, "--write")
    assert done.returncode == 0, done.stderr
    process = cluster.nodes[follower.id].process
    assert process.wait(timeout=20) == REMOVED_EXIT, cluster.log_tail(follower.id)
    log = cluster.log_tail(follower.id, 40)
    stop_lines = [line for line in log.splitlines() if line.startswith("haqueue: ")]
    assert stop_lines == [stop_lines[0]] and stop_lines[0].startswith(
        f"haqueue: {follower.id} was removed from the cluster by "), log
    assert "(cli) through leader" in stop_lines[0]
    assert "removed_from_cluster" in log or "was removed from the cluster" in log
    status = admin_client.status(leader.address, leader.admin_port, 1.0)
    assert status["term"] == term and status["role"] == "leader", "the removal caused an election"
    rows = _status_rows(old_file)
    assert rows[follower.id]["membership"] == "not a member" and not rows[follower.id]["reachable"]
    assert {n for n, r in rows.items() if r["membership"] == "member"} == {"n1", "n2", "n3", "n4"} - {follower.id}
    view = _cluster_view(leader)
    assert [(n["node"], n["membership"]) for n in view["nodes"]][-1] == (follower.id, "not a member")
    top = haqueue("top", "--once", "--config", str(old_file)).stdout
    assert any(line.split()[:2] == [follower.id, "unreachable"] and line.endswith("not a member")
               for line in top.splitlines()), top
