"""The start-up benchmark, against real servers it starts itself."""

from __future__ import annotations

import importlib.util
import json
import os

from click.testing import CliRunner

from haqueue.bench.startup import StartupResult, cache_bytecode, command, start_once
from haqueue.cli.bench import bench

EXIT_MARGIN = 0.005  # seconds of CPU a killed process may spend exiting, counted in its rusage


def test_one_start_reports_listening_before_the_put_is_answered():
    listening, answered, cpu = start_once(command("beanstalkd"))
    assert 0 < listening <= answered < 10
    # One thread's CPU cannot outrun the wall clock, but rusage is read after the
    # kill and counts the process's exit too: for beanstalkd, whose whole start
    # is ~2 ms, that margin showed (2.026 ms of CPU for 2.013 ms to the reply).
    assert 0 < cpu < answered + EXIT_MARGIN


def test_haqueue_starts_and_answers_put(tmp_path):
    listening, answered, cpu = start_once(command("haqueue") + ["-b", str(tmp_path)])
    assert 0 < listening <= answered < 30
    assert 0.005 < cpu < 30  # an interpreter's start alone takes more than 5 ms


def test_both_servers_start_and_answer_on_a_unix_socket():
    for kind in ("beanstalkd", "haqueue"):
        listening, answered, cpu = start_once(command(kind), unix=True)
        assert 0 < listening <= answered < 30, kind


def test_cli_measures_unix_socket_starts_and_says_so():
    result = CliRunner().invoke(bench, ["startup", "1", "--server", "beanstalkd", "--unix"],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert result.output.startswith("start-up: 1 starts per server, taking turns, in memory, on a Unix socket;")
    refused = CliRunner().invoke(bench, ["--server", "beanstalkd", "--unix"])  # the old spelling
    assert refused.exit_code != 0 and "--unix goes with --startup" in refused.output


def test_summary_uses_nearest_rank():
    result = StartupResult("x", False, listening=[0.003, 0.001, 0.002], answered=[0.01, 0.02, 0.03])
    assert result.summary("listening") == {"count": 3, "min": 1.0, "p50": 2.0, "p90": 3.0, "max": 3.0}


def test_cli_prints_both_times_per_server_and_writes_json(tmp_path):
    out = tmp_path / "startup.json"
    result = CliRunner().invoke(bench, ["startup", "2", "--server", "beanstalkd", "--json", str(out)],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].startswith("start-up: 2 starts per server")
    assert [" ".join(line.split()[1:3]) for line in lines[3:]] == ["listening 2", "put answered", "reply (cpu)"]
    [doc] = json.loads(out.read_text())["startup"]
    assert doc["listening_ms"]["count"] == 2 and doc["cpu_to_answer_ms"]["count"] == 2


def test_startup_needs_servers_it_starts():
    result = CliRunner().invoke(bench, ["startup", "2"])
    assert result.exit_code == 1 and "bench startup needs --server KIND or --compare" in result.output
    result = CliRunner().invoke(bench, ["--address", "127.0.0.1:1", "--startup", "2"])  # the old spelling
    assert result.exit_code != 0 and "--startup starts its own servers" in result.output


def test_haqueue_is_measured_with_its_bytecode_cached_as_an_install_leaves_it():
    import haqueue.server.app

    cached = importlib.util.cache_from_source(haqueue.server.app.__file__)
    if os.path.exists(cached):
        os.unlink(cached)  # the interpreter compiles it again when it needs it
    cache_bytecode()
    assert os.path.getmtime(cached) >= os.path.getmtime(haqueue.server.app.__file__)
