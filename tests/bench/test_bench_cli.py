"""`haqueue bench` as users run it: click's runner for output, a subprocess for exit codes."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from click.testing import CliRunner

from haqueue.cli.bench import bench
from haqueue.cli.main import main
from tests.bench.conftest import honest_use, scripted_server, server_stats

QUICK = ["--jobs", "1000", "--warmup", "0"]


def invoke(*args: str):
    return CliRunner().invoke(bench, list(args), catch_exceptions=False)


def haqueue(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "haqueue", "bench", *args],
                          capture_output=True, text=True, timeout=60)


def assert_ordered(summary):
    assert summary["p50"] <= summary["p90"] <= summary["p99"] <= summary["max"]


def test_put_prints_a_table_and_writes_the_same_figures_as_json(bs, tmp_path):
    out = tmp_path / "put.json"
    before = server_stats(bs)["cmd-put"]
    result = invoke("put", "--address", f"127.0.0.1:{bs.port}", "--tube", "cli-put", *QUICK,
                    "--connections", "2", "--json", str(out))
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].startswith("put: 2 connections x window 64, 100 B bodies, measured 1,000 puts")
    assert lines[1].split()[:4] == ["server", "address", "puts/s", "latency"]
    assert lines[2].split()[1:2] == [f"127.0.0.1:{bs.port}"]
    doc = json.loads(out.read_text())
    [run] = doc["runs"]
    assert run["measured"]["puts"] == 1000 == server_stats(bs)["cmd-put"] - before
    assert_ordered(run["latency_ms"]["put"])
    # The JSON keeps one decimal, the table none: both round the same figure.
    assert abs(float(lines[2].split()[1 + 1].replace(",", "")) - run["jobs_per_s"]) <= 0.51


def test_cycle_reports_put_and_end_to_end_latency(bs, tmp_path):
    out = tmp_path / "cycle.json"
    result = invoke("cycle", "--address", f"127.0.0.1:{bs.port}", "--tube", "cli-cycle", *QUICK,
                    "--json", str(out))
    assert result.exit_code == 0, result.output
    assert "cycles/s" in result.output and "put->delete" in result.output
    [run] = json.loads(out.read_text())["runs"]
    assert run["measured"]["cycles"] == 1000
    assert_ordered(run["latency_ms"]["end_to_end"])


def test_compare_runs_both_servers_and_prints_the_ratio(tmp_path):
    out = tmp_path / "compare.json"
    result = invoke("compare", "--compare-with", "beanstalkd", *QUICK, "--json", str(out))
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[0].endswith("in memory")
    assert result.output.splitlines()[-1].startswith("beanstalkd/beanstalkd")
    doc = json.loads(out.read_text())
    assert [r["server"] for r in doc["runs"]] == ["beanstalkd", "beanstalkd"]
    assert doc["runs"][0]["address"] != doc["runs"][1]["address"]
    assert doc["ratio"]["jobs_per_s"] > 0


def test_memory_benchmark_reports_bytes_per_job(tmp_path):
    out = tmp_path / "memory.json"
    result = invoke("memory", "5000", "--server", "beanstalkd", "--json", str(out))
    assert result.exit_code == 0, result.output
    [m] = json.loads(out.read_text())["memory"]
    assert m["jobs"] == 5000 and m["bytes_per_job"] > 0
    assert "bytes/job" in result.output


def test_durable_server_is_started_with_a_write_ahead_log():
    # beanstalkd -f0 fsyncs every put, so keep this run small.
    result = invoke("put", "--server", "beanstalkd", "--durable", "--jobs", "100", "--warmup", "0",
                    "--connections", "1")
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[0].endswith("durable (-b DIR -f0)")
    # The durable figures come with what they depend on most: the disk's sync time.
    last = result.output.splitlines()[-1]
    assert last.startswith("disk: fdatasync of a small append takes ") and " ms (median of 200) in " in last


def test_garbage_reply_exits_nonzero_with_one_line_naming_it():
    def respond(line, puts):
        return b"OUT_OF_MEMORY\r\n" if line.startswith(b"put") else honest_use(line)

    with scripted_server(respond) as port:
        proc = haqueue("put", "--address", f"127.0.0.1:{port}", *QUICK)
    assert proc.returncode == 1
    assert proc.stdout == ""
    assert proc.stderr == (
        f"haqueue: 127.0.0.1:{port}: unexpected reply to put: 'OUT_OF_MEMORY'\n"
    )


def test_unreachable_address_exits_nonzero_with_one_line():
    # The old spelling (no subcommand: a put run) on purpose: scripts still use it.
    with scripted_server(lambda line, puts: None) as port:
        pass  # the port was just closed: nothing listens there now
    proc = haqueue("--address", f"127.0.0.1:{port}")
    assert proc.returncode == 1
    assert proc.stderr == f"haqueue: 127.0.0.1:{port}: cannot connect: Connection refused\n"


@pytest.mark.parametrize(
    "args, message",
    [
        (["put", "--address", "nowhere"], "bad address 'nowhere': expected HOST:PORT"),
        (["put", "--durable"], "--durable applies to servers bench starts: add --server or --compare"),
        (["cycle", "--body-size", "8"], "--body-size 8 is too small for cycle"),
        (["put", "--processes", "3", "--connections", "2"], "--connections 2 is fewer than --processes 3"),
        (["put", "--tube", "-x"], "bad tube name '-x'"),
        (["cluster", "nowhere.toml"], "nowhere.toml: no such file"),
        (["put", "--json", "/nonexistent/x.json"], "cannot write /nonexistent/x.json: /nonexistent is"),
        (["put", "--server-cpus", "x"], "--server-cpus 'x': expected CPU numbers, e.g. 0 or 0,1"),
        (["compare", "--server-cpus", "4096"], "--server-cpus: this machine has CPUs"),
        (["put", "--server-cpus", ",".join(map(str, sorted(os.sched_getaffinity(0))))],
         "--server-cpus: leave at least one CPU for the load generator"),
        # The old single-command spelling refuses what it always refused.
        (["--memory", "10"], "--memory reads a server's RSS by PID: add --server or --compare"),
        (["--server", "beanstalkd", "--compare"], "--server and --compare exclude each other"),
        (["--cluster", "c.toml", "--compare", "--durable"],
         "--compare --cluster always runs beanstalkd both in memory and with -f0"),
        (["--cluster", "c.toml", "--server", "beanstalkd"], "--server and --cluster exclude each other"),
    ],
)
def test_bad_options_exit_nonzero_with_one_line(args, message, capsys):
    # main() is what the `haqueue` script runs: it turns errors into one line and a status.
    assert main(["bench", *args]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err


def test_click_rejects_a_bad_value_in_one_line(capsys):
    assert main(["bench", "put", "--window", "0"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "'--window'" in err


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="pinning needs 2 CPUs: one for servers, one for load")
def test_server_cpus_runs_started_servers_there_and_the_load_elsewhere():
    # In a subprocess: pinning changes the affinity of the process that asks for it.
    code = ("import os; from haqueue.bench import servers; cpu = min(os.sched_getaffinity(0)); "
            "servers.pin_servers({cpu}); "
            "print(servers.server_command('beanstalkd', 1, None)[:3], cpu in os.sched_getaffinity(0), cpu)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    cpu = out.stdout.split()[-1]
    assert out.stdout.startswith(f"['taskset', '-c', '{cpu}'] False ")
