"""`haqueue cluster status`, `haqueue node is-leader` and `haqueue up`, against real clusters.

The commands run through `haqueue.cli.main.main`, the real entry point, so exit
statuses and one-line errors are what an operator (or keepalived) sees.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from haqueue.cli.main import main
from tests.cluster.convergence import wait_converged
from tests.cluster.running import random_base_port, running_cluster

STATUS_HEADER = ["node", "reachable", "role", "term", "commit", "applied", "lag", "client_port", "leader", "member"]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with running_cluster(tmp_path_factory.mktemp("cli-cluster")) as running:
        yield running


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def table(out: str) -> list[list[str]]:
    return [line.split() for line in out.strip().splitlines()]


def test_cluster_status_shows_one_leader_with_the_only_open_client_port(cluster, capsys):
    leader = cluster.leader()
    wait_converged(cluster, timeout=10)
    code, out, err = run(capsys, "cluster", "status", "--config", str(cluster.config_path))
    assert (code, err) == (0, "")
    header, *rows = table(out)
    assert header == STATUS_HEADER
    assert [r[0] for r in rows] == ["n1", "n2", "n3"]
    by_node = {r[0]: dict(zip(header, r)) for r in rows}
    assert {n: (r["reachable"], r["role"], r["client_port"], r["leader"], r["lag"]) for n, r in by_node.items()} == {
        n: ("yes", "leader" if n == leader.id else "follower", "open" if n == leader.id else "closed", leader.id, "0")
        for n in ("n1", "n2", "n3")
    }
    assert len({r["term"] for r in by_node.values()}) == 1
    assert len({r["commit"] for r in by_node.values()}) == 1


def test_cluster_status_json_digests_agree_once_quiet(cluster, capsys):
    wait_converged(cluster, timeout=10)
    code, out, _ = run(capsys, "cluster", "status", "--digest", "--json", "--config", str(cluster.config_path))
    assert code == 0
    rows = json.loads(out)
    assert len({r["digest"] for r in rows}) == 1
    assert sum(r["serving"] for r in rows) == 1
    code, out, _ = run(capsys, "cluster", "status", "--digest", "--config", str(cluster.config_path))
    assert table(out)[0] == STATUS_HEADER + ["digest"]
    assert {r[-1] for r in table(out)[1:]} == {rows[0]["digest"][:16]}


def test_node_is_leader_exits_0_only_on_the_leader(cluster, capsys):
    leader = cluster.leader()
    for member in cluster.spec.nodes:
        code, out, _ = run(capsys, "node", "is-leader", "--config", str(cluster.config_path), "--node", member.id)
        if member.id == leader.id:
            assert (code, out) == (0, f"{member.id}: leader\n")
        else:
            assert (code, out) == (1, f"{member.id}: not leader\n")
    code, out, _ = run(capsys, "node", "is-leader", "-q", "--config", str(cluster.config_path), "--node", leader.id)
    assert (code, out) == (0, "")


def test_node_is_leader_names_an_unknown_node_in_one_line(cluster, capsys):
    code, out, err = run(capsys, "node", "is-leader", "--config", str(cluster.config_path), "--node", "n9")
    assert code == 1 and out == ""
    assert err.count("\n") == 1 and "no node 'n9' (nodes: n1, n2, n3)" in err


def test_cluster_status_of_five_nodes_with_two_killed_shows_the_new_leader_and_exits_0(tmp_path, capsys):
    # Five nodes keep a majority with two down: the old leader and a follower.
    with running_cluster(tmp_path / "five", nodes=5) as running:
        old = running.leader()
        follower = next(m.id for m in running.spec.nodes if m.id != old.id)
        running.kill_node(old.id)
        running.kill_node(follower)
        new = running.leader(timeout=15, exclude=old.id)
        assert new is not None and new.id != follower
        wait_converged(running, timeout=10,
                       node_ids={m.id for m in running.spec.nodes} - {old.id, follower})  # lag 0 below
        code, out, err = run(capsys, "cluster", "status", "--config", str(running.config_path))
    assert (code, err) == (0, ""), out
    header, *rows = table(out)
    assert header == STATUS_HEADER
    assert [r[0] for r in rows] == ["n1", "n2", "n3", "n4", "n5"]
    by_node = {r[0]: dict(zip(header, r)) for r in rows}
    down = {old.id, follower}
    assert {n for n, r in by_node.items() if r["reachable"] == "no"} == down
    assert {n: (r["role"], r["client_port"], r["leader"]) for n, r in by_node.items() if n not in down} == {
        n: ("leader" if n == new.id else "follower", "open" if n == new.id else "closed", new.id)
        for n in by_node if n not in down}
    assert {r["lag"] for n, r in by_node.items() if n not in down} == {"0"}


def test_cluster_status_of_a_missing_file_is_one_line(tmp_path, capsys):
    code, out, err = run(capsys, "cluster", "status", "--config", str(tmp_path / "nope.toml"))
    assert code == 1 and out == ""
    assert err.count("\n") == 1 and "nope.toml" in err


def test_cluster_status_exits_1_without_a_serving_leader(tmp_path, capsys):
    with running_cluster(tmp_path / "down", start=False) as stopped:
        code, out, _ = run(capsys, "cluster", "status", "--config", str(stopped.config_path))
    assert code == 1
    assert [r[1:3] for r in table(out)[1:]] == [["no", "-"]] * 3


def test_cluster_status_shows_a_killed_follower_unreachable_and_still_exits_0(tmp_path, capsys):
    with running_cluster(tmp_path / "c") as running:
        leader = running.leader()
        follower = next(m.id for m in running.spec.nodes if m.id != leader.id)
        running.kill_node(follower)
        code, out, _ = run(capsys, "cluster", "status", "--config", str(running.config_path))
    assert code == 0
    rows = {r[0]: r for r in table(out)[1:]}
    assert rows[follower][1:] == ["no", "-", "-", "-", "-", "-", "closed", "-", "yes"]
    assert rows[leader.id][2] == "leader"


@pytest.mark.slow
@pytest.mark.parametrize("nodes", [3, 5])
def test_up_for_starts_a_cluster_names_the_leader_and_stops_every_node(tmp_path, nodes):
    workdir = tmp_path / "up"
    proc = subprocess.run(
        [sys.executable, "-m", "haqueue", "up", "--for", "2", "--dir", str(workdir),
         "--port", str(random_base_port()), "--nodes", str(nodes)],
        capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == f"cluster file: {workdir / 'cluster.toml'}"
    pids = [int(m.group(1)) for line in lines if (m := re.match(r"  n\d: pid (\d+), clients ", line))]
    assert len(pids) == nodes
    leader_lines = [line for line in lines if line.startswith("leader: ")]
    assert re.fullmatch(rf"leader: n[1-{nodes}] — connect a beanstalkd client to 127\.0\.0\.1[1-{nodes}]:\d+",
                        leader_lines[0])
    assert any(line.endswith(f"(the cluster serves while {nodes // 2 + 1} of its {nodes} nodes run)")
               for line in lines), proc.stdout
    assert lines[-1] == "stopping the cluster"
    for pid in pids:  # up stops what it started
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    assert (workdir / "cluster.toml").exists() and (workdir / "n1.log").exists()


@pytest.mark.slow
def test_up_follows_a_failover_and_names_the_new_leader(tmp_path):
    """`up` asks the leader alone, once a second; a leader gone makes it ask every node."""
    workdir = tmp_path / "up"
    proc = subprocess.Popen(
        [sys.executable, "-m", "haqueue", "up", "--for", "40", "--dir", str(workdir),
         "--port", str(random_base_port())],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        pids, leader = {}, None
        for line in proc.stdout:
            if m := re.match(r"  (n\d): pid (\d+), clients ", line):
                pids[m.group(1)] = int(m.group(2))
            if m := re.match(r"leader: (n\d) — connect", line):
                leader = m.group(1)
                break
        assert leader in pids, (pids, leader)
        os.kill(pids[leader], 9)
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("leader: "):
                break
        assert any(line.startswith(f"{leader} exited (status -9)") for line in lines), lines
        new = re.match(r"leader: (n\d) — clients now connect to ", lines[-1])
        assert new and new.group(1) in pids and new.group(1) != leader, lines
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    for pid in pids.values():  # up stops what it started
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
