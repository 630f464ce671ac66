"""`haqueue bench --gearman`: both workloads run against gearmand (in memory, and with its
SQLite queue) and haqueue in one run; the SQLite row is a durable peer (a job it
acknowledged survives a kill -9)."""

from __future__ import annotations

import asyncio
import json
import os
import signal

import psutil
import pytest
from click.testing import CliRunner

from haqueue.bench.gearman import (GearmanResult, format_gearman, gearmand_has_sqlite_queue, gearmand_started,
                                   run_workload)
from haqueue.bench.load import BenchError
from haqueue.cli.bench import bench
from tests.support.gearman import GearConn, gearmand, haqueue_gearman, parse

pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize("workload", ["submit", "cycle"])
def test_gearman_bench_compares_gearmand_and_a_haqueue_node_and_writes_json(tmp_path, workload):
    out = tmp_path / "gearman.json"
    result = CliRunner().invoke(bench, ["gearman", workload, "--nodes", "1", "--duration", "0.5",
                                        "--warmup", "0.2", "--connections", "2", "--producers", "2",
                                        "--consumers", "2", "--json", str(out)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    servers = ["gearmand (memory)", "gearmand (sqlite)", "haqueue 1-node -f0"]
    lines = result.output.splitlines()
    assert [line[:24].rstrip() for line in lines[1:4]] == servers
    assert lines[4].startswith("ratio haqueue 1-node -f0 / gearmand (memory): ")
    assert lines[5].startswith("ratio haqueue 1-node -f0 / gearmand (sqlite): ")
    runs = json.loads(out.read_text())["gearman"]
    assert [r["server"] for r in runs] == servers
    assert all(r["workload"] == workload and r["jobs"] > 0 and r["p50_ms"] <= r["p99_ms"] for r in runs)


def test_haqueue_is_compared_with_each_gearmand_and_its_runs_are_pooled():
    runs = [GearmanResult("gearmand (memory)", "submit", 1000, 1.0),
            GearmanResult("gearmand (sqlite)", "submit", 100, 1.0),
            GearmanResult("haqueue 3-node -f0", "submit", 300, 1.0),
            GearmanResult("haqueue 3-node -f0", "submit", 500, 1.0)]
    assert format_gearman(runs).splitlines()[-2:] == ["ratio haqueue 3-node -f0 / gearmand (memory): 0.40x",
                                                     "ratio haqueue 3-node -f0 / gearmand (sqlite): 4.00x"]


def _listener_pid(port: int) -> int:
    return next(c.pid for c in psutil.net_connections("tcp")
                if c.status == psutil.CONN_LISTEN and c.laddr.port == port)


def test_gearmand_with_its_sqlite_queue_keeps_an_acknowledged_job_through_a_kill(tmp_path):
    # What makes it the durable peer in the comparison: JOB_CREATED means stored.
    assert gearmand_has_sqlite_queue(), "Debian's gearmand is built with libsqlite3"
    queue = str(tmp_path / "queue.sqlite")
    with gearmand_started(queue) as (_, port):
        with GearConn(port) as client:
            client.req("SUBMIT_JOB_BG", b"kept", b"u1", b"payload")
            assert parse(client.packet())[0] == "JOB_CREATED"
        os.kill(_listener_pid(port), signal.SIGKILL)
    with gearmand_started(queue) as (_, port):
        with GearConn(port) as worker:
            worker.req("CAN_DO", b"kept")
            worker.req("GRAB_JOB")
            name, args = parse(worker.packet())
            assert name == "JOB_ASSIGN" and args[1:] == (b"kept", b"payload")


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
