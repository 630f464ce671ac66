"""`bench --cluster`: load goes to the leader of a real three-node loopback cluster."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from haqueue.bench.flood import listening_pid
from haqueue.cli.bench import bench
from haqueue.cli.main import main
from haqueue.local_cluster import LocalCluster, write_cluster_file
from tests.support.servers import RawConn


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    local = LocalCluster.create(tmp_path_factory.mktemp("cluster"), nodes=3, serve_args=["-F"])
    local.start()
    try:
        leader = local.leader(timeout=20)
        assert leader is not None, local.log_tail("n1")
        yield local, leader
    finally:
        local.stop()


def test_cluster_run_goes_to_the_leader_and_every_put_is_counted(cluster, tmp_path):
    local, leader = cluster
    out = tmp_path / "cluster.json"
    result = CliRunner().invoke(
        bench,
        ["cluster", str(local.config_path), "--jobs", "500", "--warmup", "0", "--json", str(out)],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    [run] = json.loads(out.read_text())["runs"]
    assert run["server"] == "haqueue 3-node"
    assert run["address"] == leader.client_endpoint
    assert run["measured"]["puts"] == 500
    with RawConn(leader.address, leader.client_port) as conn:
        conn.send(b"stats-tube bench\r\n")
        assert b"current-jobs-ready: 500\n" in conn.recv_reply()


def test_cluster_with_no_leader_fails_in_one_line(tmp_path, capsys):
    config = write_cluster_file(tmp_path / "down.toml")  # nothing runs it
    assert main(["bench", "cluster", str(config), "--timeout", "0.5"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no single leader after 0.5 s (leading: none)" in err, err


def test_compare_cluster_runs_beanstalkd_in_memory_and_durable_and_the_cluster(cluster, tmp_path):
    local, leader = cluster
    out = tmp_path / "compare.json"
    result = CliRunner().invoke(
        bench,
        ["compare", "--cluster", str(local.config_path), "--workload", "cycle", "--jobs", "200",
         "--warmup", "0", "--json", str(out)],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    runs = json.loads(out.read_text())["runs"]
    assert [r["server"] for r in runs] == ["beanstalkd", "beanstalkd -f0", "haqueue 3-node"]
    assert runs[2]["address"] == leader.client_endpoint
    assert all(r["measured"]["puts"] >= 200 for r in runs)
    assert "haqueue 3-node/beanstalkd -f0" in result.output
    settings = json.loads(out.read_text())["settings"]
    assert settings["fdatasync_ms"] > 0 and "disk: fdatasync" in result.output


def test_flood_runs_against_the_leader_and_reads_its_memory(cluster):
    local, leader = cluster
    # The RSS columns are the leader's own: bench finds it by the port it listens on.
    assert listening_pid(leader.client_port) == local.nodes[leader.id].process.pid
    result = CliRunner().invoke(
        bench, ["flood", "--cluster", str(local.config_path), "--jobs", "200", "--repeat", "2"],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    rows = [line for line in result.output.splitlines() if line.startswith("haqueue 3-node leader")]
    assert [row.split()[3] for row in rows] == ["#1", "#2"]
    for row in rows:
        figures = [float(cell) for cell in row.split()[4:] if cell.replace(".", "", 1).isdigit()]
        # idle p50, idle p99, unread p99, ratio, reading p99, ratio, three RSS figures
        assert len(figures) == 9 and all(value > 0 for value in figures), row
