"""`haqueue bench --flood`: the hostile-client benchmark, run for real on both servers."""

from __future__ import annotations

import subprocess
import sys


def bench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "haqueue", "bench", *args],
                          capture_output=True, text=True, timeout=300)


def test_flood_compares_beanstalkd_and_haqueue_in_one_run():
    result = bench("flood", "--compare", "--jobs", "200")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[1].split()[:4] == ["server", "idle", "p50", "idle"]
    rows = {line.split()[0]: line.split() for line in lines[2:]}
    assert set(rows) == {"beanstalkd", "haqueue"}
    for row in rows.values():
        # name, idle p50 ms, idle p99 ms, unread p99 ms, ratio, reading p99 ms, ratio, RSS...
        assert float(row[1]) > 0 and float(row[5]) > 0 and float(row[7]) > 0 and float(row[10]) > 0


def test_flood_needs_servers_it_starts():
    result = bench("flood")
    assert result.returncode == 1
    assert result.stderr.strip() == "haqueue: bench flood needs --server KIND or --compare or --cluster CONFIG"
    # The old spelling, still refused as before.
    result = bench("--flood", "--address", "127.0.0.1:1")
    assert result.returncode == 1
    assert result.stderr.strip() == "haqueue: --flood takes --server, --compare or --cluster, alone"
