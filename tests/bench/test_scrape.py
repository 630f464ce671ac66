"""The scrape benchmark runs against a real node and counts what it scraped (haqueue/bench/scrape.py).

Its figure (CPU per scrape) is reported, not asserted: timing targets live in
benchmarks (docs/benchmarks.md), not in unit tests.
"""

from __future__ import annotations

import shlex
import subprocess
import sys

from haqueue.bench.scrape import bench_scrape
from haqueue.server.metrics import TUBE_FAMILIES


def test_scrape_bench_sees_every_tube_it_made():
    # Enough scrapes that their CPU time spans many of the kernel's 10 ms
    # accounting ticks: five took ~1.5 ms in all and sometimes read as 0.
    result = bench_scrape(tubes=50, scrapes=200)
    # 50 tubes and "default", a line per tube per family, plus the server's own series.
    assert result.series > 51 * len(TUBE_FAMILIES)
    assert result.raw_cpu_ms_per_scrape > 0
    assert result.cpu_ms_per_scrape >= 0
    assert "50 tubes" in result.describe()


def test_bench_scrape_option_prints_one_line():
    done = subprocess.run([sys.executable, "-m", "haqueue", "bench", "scrape", "20"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("metrics scrape: 20 tubes,")
    assert "ms per scrape" in done.stdout


def test_bench_scrape_refuses_options_it_would_ignore():
    done = subprocess.run([sys.executable, "-m", "haqueue", "bench", "scrape", "20", "--compare"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr.strip() == "haqueue bench scrape: No such option '--compare'."
    # The old spelling, still refused as before.
    done = subprocess.run([sys.executable, "-m", "haqueue", "bench", "--scrape", "20", "--compare"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert done.stderr.strip() == "haqueue: --scrape starts its own node: it excludes --compare"


def test_on_a_terminal_bench_shows_a_per_second_line_then_the_result(tmp_path):
    from tests.support.terminal import require_tmux, running_tmux

    require_tmux()
    argv = [sys.executable, "-m", "haqueue", "bench", "scrape", "2000"]
    # `sleep` keeps the pane (and the result) on screen after bench exits.
    with running_tmux(tmp_path / "tmux", ["sh", "-c", shlex.join(argv) + "; sleep 60"]) as term:
        term.wait_for(lambda s: "bench scrape: 0:0" in s, timeout=60, what="progress line")
        screen = term.wait_for(lambda s: "metrics scrape: 2,000 tubes" in s, timeout=120, what="result")
    # The progress line was cleared, not left above the result.
    assert "elapsed" not in screen
