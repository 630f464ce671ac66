"""Percentiles, result records and their table and JSON forms."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from haqueue.bench.report import (
    Latencies,
    MemoryResult,
    RunResult,
    format_memory,
    format_runs,
    pool,
    to_json,
)


def latencies(pairs):
    lat = Latencies()
    for value, count in pairs:
        lat.add(value, count)
    return lat


def test_percentiles_are_nearest_rank_in_milliseconds():
    lat = latencies((v * 1_000_000, 1) for v in range(100, 0, -1))  # 1..100 ms, unsorted
    assert lat.summary() == {"p50": 50.0, "p90": 90.0, "p99": 99.0, "p99.9": 100.0, "max": 100.0,
                             "count": 100}
    lat = latencies((v * 1_000_000, 1) for v in range(1, 2001))  # 1..2000 ms
    assert lat.summary()["p99.9"] == 1998.0


def test_counted_pairs_weigh_like_repeated_samples():
    # 98 commands at 1 ms and 2 at 5 ms: p99 is the 99th command, at 5 ms.
    lat = latencies([(5_000_000, 2), (1_000_000, 98)])
    assert lat.summary() == {"p50": 1.0, "p90": 1.0, "p99": 5.0, "p99.9": 5.0, "max": 5.0, "count": 100}


def test_empty_latencies_have_no_summary():
    assert Latencies().summary() is None


@given(st.lists(st.tuples(st.integers(0, 10**10), st.integers(1, 1000)), min_size=1))
def test_percentiles_are_ordered_and_are_samples(pairs):
    s = latencies(pairs).summary()
    assert s["p50"] <= s["p90"] <= s["p99"] <= s["max"]
    values = {v / 1e6 for v, _ in pairs}
    assert {s["p50"], s["p90"], s["p99"], s["max"]} <= values
    assert s["count"] == sum(c for _, c in pairs)


def run_result(server, puts, seconds, put_ms, workload="put", e2e_ms=None):
    r = RunResult(workload=workload, address="127.0.0.1:1", server=server,
                  measured_puts=puts, put_seconds=seconds,
                  measured_cycles=puts if workload == "cycle" else 0,
                  cycle_seconds=seconds if workload == "cycle" else 0.0)
    r.put_latency.add(int(put_ms * 1e6), puts)
    if e2e_ms is not None:
        r.e2e_latency.add(int(e2e_ms * 1e6), puts)
    return r


def test_table_for_two_runs_ends_with_their_ratio():
    runs = [run_result("beanstalkd", 1000, 1.0, 2.0), run_result("haqueue", 500, 1.0, 4.0)]
    lines = format_runs(runs, "headline").splitlines()
    assert lines[0] == "headline"
    assert lines[1].split() == ["server", "address", "puts/s", "latency", "p50", "ms", "p90",
                                "ms", "p99", "ms", "p99.9", "ms", "max", "ms"]
    assert lines[2].split() == ["beanstalkd", "127.0.0.1:1", "1,000", "put", "2.000", "2.000",
                                "2.000", "2.000", "2.000"]
    assert lines[4].split() == ["haqueue/beanstalkd", "0.50x", "put", "2.00x", "2.00x", "2.00x",
                                "2.00x", "2.00x"]


def test_cycle_table_shows_end_to_end_latency_and_cycles_per_second():
    runs = [run_result("beanstalkd", 300, 2.0, 1.0, workload="cycle", e2e_ms=3.0)]
    text = format_runs(runs, "h")
    assert "cycles/s" in text
    assert text.splitlines()[3].split() == ["put->delete", "3.000", "3.000", "3.000", "3.000", "3.000"]
    assert "150" in text.splitlines()[2]


def test_json_holds_the_table_figures_and_ratios():
    runs = [run_result("beanstalkd", 1000, 1.0, 2.0), run_result("haqueue", 500, 1.0, 4.0)]
    memory = [MemoryResult("beanstalkd", "a", 10, 100, 1000, 3000),
              MemoryResult("haqueue", "b", 10, 100, 1000, 7000)]
    doc = json.loads(to_json({"workload": "put"}, runs, memory))
    assert doc["runs"][0]["jobs_per_s"] == 1000.0
    assert doc["runs"][1]["latency_ms"]["put"]["p99"] == 4.0
    assert doc["ratio"]["jobs_per_s"] == 0.5
    assert doc["ratio"]["latency"]["put"]["p50"] == 2.0
    assert [m["bytes_per_job"] for m in doc["memory"]] == [200.0, 600.0]
    assert doc["memory_ratio"] == 3.0


def test_memory_table_shows_bytes_per_job_and_ratio():
    memory = [MemoryResult("beanstalkd", "a", 10, 100, 1000, 3000),
              MemoryResult("haqueue", "b", 10, 100, 1000, 7000)]
    lines = format_memory(memory).splitlines()
    assert lines[2].split()[-1] == "200.0"
    assert lines[-1].split() == ["haqueue/beanstalkd", "3.00x"]


def test_pooled_runs_add_jobs_and_time_and_keep_each_runs_rate():
    a = run_result("beanstalkd", 1000, 1.0, 2.0)
    b = run_result("beanstalkd", 3000, 1.0, 4.0)
    b.address = "127.0.0.1:2"
    pooled = pool([a, b])
    assert pooled.jobs_per_s == 2000.0  # 4000 jobs in 2 s, not the mean of rates by chance
    assert pooled.runs == [1000.0, 3000.0]
    assert pooled.put_latency.summary()["p50"] == 4.0
    assert pooled.address == "(fresh each run)"
    assert "puts/s of each run: beanstalkd: 1,000, 3,000" in format_runs([pooled], "h")
