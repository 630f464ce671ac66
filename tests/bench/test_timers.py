"""The timer benchmark: what it measures against a real beanstalkd, and how it sums up."""

from __future__ import annotations

import json

from click.testing import CliRunner

from haqueue.bench.timers import KINDS, TimerResult, lanes_and_rounds, measure_timers
from haqueue.cli.bench import bench


def test_lanes_and_rounds_cover_the_asked_count_with_at_most_the_asked_lanes():
    assert lanes_and_rounds(1000, 50) == (50, 4)  # 5 timers a round: 200 rounds
    assert lanes_and_rounds(10, 50) == (2, 1)
    assert lanes_and_rounds(1, 50) == (1, 1)
    lanes, rounds = lanes_and_rounds(1001, 50)
    assert lanes <= 50 and lanes * rounds * len(KINDS) >= 1001


def test_summary_counts_early_timers_and_uses_nearest_rank_percentiles():
    result = TimerResult("x", "h:1")
    result.samples["delay"] = [0.002, -0.001, 0.001, 0.004]
    s = result.summary("delay")
    assert s["count"] == 4 and s["early"] == 1
    assert s["min"] == -1.0 and s["max"] == 4.0
    assert s["p50"] == 1.0 and s["p99"] == 4.0  # values some timer really had
    assert result.summary("pause-tube") is None
    assert result.summary()["count"] == 4


def test_every_kind_of_timer_fires_on_beanstalkd_at_or_after_its_time(bs):
    result = measure_timers(bs.host, bs.port, len(KINDS), server="beanstalkd")
    for kind in KINDS:
        [lateness] = result.samples[kind]
        # At least the asked time (from the send: never negative); the time-to-run one
        # may wait for the nudge on beanstalkd (see _nudge_worker).
        assert 0 <= lateness < 1.0, (kind, lateness)


def test_cli_prints_a_row_per_kind_and_writes_json(bs, tmp_path):
    out = tmp_path / "timers.json"
    result = CliRunner().invoke(bench, ["timers", "5", "--address", f"127.0.0.1:{bs.port}",
                                        "--json", str(out)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].startswith("timers: 5 or more")
    assert lines[1].split()[:3] == ["server", "timer", "count"]
    assert [line.split()[1] for line in lines[2:]] == [*KINDS, "all"]
    [doc] = json.loads(out.read_text())["timers"]
    assert doc["lateness_ms"]["all"]["count"] == 5


def test_timers_and_memory_are_refused_together():
    result = CliRunner().invoke(bench, ["--server", "beanstalkd", "--timers", "5", "--memory", "10"])  # old spelling
    assert result.exit_code != 0 and "one at a time" in result.output
