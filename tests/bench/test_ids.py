"""`haqueue bench ids` runs closed-loop UDP clients against a real three-node cluster (haqueue/bench/ids.py).

Its figures (ids/s, latency) are reported, not asserted: targets live in
docs/id-service.md. What is asserted is that it measured something real:
ids came back, all distinct, with a latency for each.
"""

from __future__ import annotations

import subprocess
import sys

from haqueue.bench.ids import bench_ids


def test_bench_ids_measures_both_modes_with_distinct_ids():
    runs = bench_ids(["segment", "exact"], clients=3, processes=1, warmup=0.3, duration=1.0)
    assert [r.mode for r in runs] == ["segment", "exact"]
    for run in runs:
        assert run.ids > 10 and len(run.latencies_ms) == run.ids
        assert run.latencies_ms == sorted(run.latencies_ms)
        text = run.describe()
        assert f"ids {run.mode}:" in text and "3 nodes durable" in text and "p99 " in text


def test_bench_ids_refuses_options_it_would_ignore():
    done = subprocess.run([sys.executable, "-m", "haqueue", "bench", "ids", "--server", "haqueue"],
                          capture_output=True, text=True, timeout=60)
    # The subcommand has no --server: click refuses it, in one line.
    assert done.returncode == 2
    assert done.stderr.strip() == "haqueue bench ids: No such option '--server'."
