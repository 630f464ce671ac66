"""`haqueue bench`'s subcommands and the old flag spelling choose the same benchmark.

Both fill a bench_run.Settings and call run(): these tests catch the Settings each
spelling makes (the run itself is covered by the other tests here), for every old
spelling that docs, scripts and tests use.
"""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from haqueue.cli import bench as bench_cli
from haqueue.cli import bench_legacy
from haqueue.cli.bench import bench
from haqueue.cli.bench_run import Settings
from haqueue.cli.main import main


@pytest.fixture
def settings(monkeypatch):
    """The Settings each invocation ran, instead of running them."""
    seen: list[Settings] = []
    monkeypatch.setattr(bench_cli, "run", seen.append)
    monkeypatch.setattr(bench_legacy, "run", seen.append)

    def invoke(args: list[str]) -> Settings:
        result = CliRunner().invoke(bench, args, catch_exceptions=False)
        assert result.exit_code == 0, result.output
        return seen.pop()

    return invoke


PAIRS = [
    ([], ["put"]),
    (["--workload", "cycle", "--window", "1"], ["cycle", "--window", "1"]),
    (["--server", "haqueue", "--workload", "put"], ["put", "--server", "haqueue"]),
    (["--address", "127.0.0.1:11301", "--workload", "cycle", "--tube", "cycle-test"],
     ["cycle", "--address", "127.0.0.1:11301", "--tube", "cycle-test"]),
    (["--compare", "--workload", "cycle", "--window", "1", "--server-cpus", "0", "--repeat", "3", "--durable"],
     ["compare", "--workload", "cycle", "--window", "1", "--server-cpus", "0", "--repeat", "3", "--durable"]),
    (["--compare", "--workload", "openloop", "--rate", "2000", "--repeat", "2"],
     ["compare", "--workload", "openloop", "--rate", "2000", "--repeat", "2"]),
    (["--compare", "--cluster", "c.toml", "--workload", "put", "--repeat", "2"],
     ["compare", "--cluster", "c.toml", "--workload", "put", "--repeat", "2"]),
    (["--cluster", "c.toml", "--workload", "openloop", "--rate", "2000"],
     ["cluster", "c.toml", "--workload", "openloop", "--rate", "2000"]),
    (["--compare", "--memory", "1000000"], ["memory", "1000000", "--compare"]),
    (["--compare", "--startup", "10", "--unix"], ["startup", "10", "--compare", "--unix"]),
    (["--compare", "--startup", "20", "--durable"], ["startup", "20", "--compare", "--durable"]),
    (["--compare", "--timers", "1000"], ["timers", "1000", "--compare"]),
    (["--cluster", "c.toml", "--timers", "1000"], ["timers", "1000", "--cluster", "c.toml"]),
    (["--scrape", "1000"], ["scrape", "1000"]),
    (["--flood", "--compare", "--repeat", "2", "--server-cpus", "0"],
     ["flood", "--compare", "--repeat", "2", "--server-cpus", "0"]),
    (["--flood", "--cluster", "c.toml", "--repeat", "3"], ["flood", "--cluster", "c.toml", "--repeat", "3"]),
    (["--gearman", "cycle", "--repeat", "2", "--gearman-nodes", "1"],
     ["gearman", "cycle", "--repeat", "2", "--nodes", "1"]),
    (["--peers", "--peer-systems", "haqueue-f50,nats", "--duration", "2", "--json", "p.json"],
     ["peers", "--systems", "haqueue-f50,nats", "--duration", "2", "--json", "p.json"]),
]


@pytest.mark.parametrize("old, new", PAIRS, ids=[" ".join(new) for _, new in PAIRS])
def test_the_old_flag_spelling_runs_what_the_subcommand_runs(settings, old, new):
    assert settings(old) == settings(new)


def test_old_spellings_of_subcommand_options_still_parse(settings):
    assert settings(["peers", "--peer-systems", "nats"]).peer_systems == "nats"
    assert settings(["gearman", "submit", "--gearman-nodes", "2"]).gearman_nodes == 2


@pytest.mark.parametrize(
    "args, message",
    [
        (["memory", "10"], "bench memory needs --server KIND or --compare"),
        (["startup", "2"], "bench startup needs --server KIND or --compare"),
        (["flood"], "bench flood needs --server KIND or --compare or --cluster CONFIG"),
        (["compare", "--cluster", "c.toml", "--durable"],
         "compare --cluster always runs beanstalkd both in memory and with -f0: drop --durable"),
        (["put", "--durable"], "--durable applies to servers bench starts: add --server or --compare"),
    ],
)
def test_a_subcommand_refuses_a_missing_choice_in_one_line(args, message, capsys):
    assert main(["bench", *args]) == 1
    err = capsys.readouterr().err
    assert err == f"haqueue: {message}\n"


@pytest.mark.parametrize("args", [["put", "--compare"], ["scrape", "10", "--server", "haqueue"],
                                  ["ids", "--server", "haqueue"], ["peers", "--workload", "put"]])
def test_a_subcommand_takes_only_its_own_options(args, capsys):
    assert main(["bench", *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "No such option" in err, err


def test_bench_help_lists_every_subcommand_and_hides_the_old_spelling():
    result = CliRunner().invoke(bench, ["--help"], catch_exceptions=False)
    listed = [line.split()[0] for line in result.output.split("Commands:")[1].splitlines() if line.strip()]
    assert listed == sorted(["put", "cycle", "openloop", "compare", "cluster", "peers", "gearman", "ids",
                             "startup", "timers", "memory", "scrape", "flood"])


def test_an_old_spelling_mistake_is_reported_as_bench_in_one_line(capsys):
    # The hidden command's name never shows: the user typed `haqueue bench`.
    assert main(["bench", "--window", "0"]) == 2
    assert capsys.readouterr().err == "haqueue bench: Invalid value for '--window': 0 is not in the range x>=1.\n"
