"""`haqueue bench --gearman`: both workloads run against gearmand and haqueue in one run."""

from __future__ import annotations

import asyncio
import json

import pytest
from click.testing import CliRunner

from haqueue.bench.gearman import run_workload
from haqueue.bench.load import BenchError
from haqueue.cli.bench import bench
from tests.support.gearman import GearConn, gearmand, haqueue_gearman

pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize("workload", ["submit", "cycle"])
def test_gearman_bench_compares_gearmand_and_a_haqueue_node_and_writes_json(tmp_path, workload):
    out = tmp_path / "gearman.json"
    result = CliRunner().invoke(bench, ["--gearman", workload, "--gearman-nodes", "1", "--duration", "0.5",
                                        "--warmup", "0.2", "--connections", "2", "--producers", "2",
                                        "--consumers", "2", "--json", str(out)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[1].startswith("gearmand (memory)") and lines[2].startswith("haqueue 1-node -f0")
    assert lines[3].startswith("ratio haqueue 1-node -f0 / gearmand (memory): ")
    runs = json.loads(out.read_text())["gearman"]
    assert [r["server"] for r in runs] == ["gearmand (memory)", "haqueue 1-node -f0"]
    assert all(r["workload"] == workload and r["jobs"] > 0 and r["p50_ms"] <= r["p99_ms"] for r in runs)


def test_the_cycle_workload_keeps_producers_at_most_the_backlog_ahead():
    with gearmand() as server:
        result = asyncio.run(run_workload(("127.0.0.1", server.port), "cycle", 2, 2, 10, 0.5, 0.1, 16, 10.0, "g"))
        assert result.jobs > 0
        with GearConn(server.port) as admin:
            lines = [line.split(b"\t") for line in admin.admin(b"status").splitlines()[:-1]]
        assert lines and all(int(total) <= 16 + 2 for _, total, _, _ in lines)  # + one in flight per producer


def test_an_unexpected_reply_ends_the_run_with_a_bench_error():
    # A node over its memory limit refuses every submission with an ERROR packet (type 19).
    with haqueue_gearman("--max-memory", "1") as server:
        with pytest.raises(BenchError, match="unexpected Gearman reply type 19"):
            asyncio.run(run_workload(("127.0.0.1", server.port), "submit", 1, 1, 10, 0.3, 0.0, 16, 5.0, "h"))
