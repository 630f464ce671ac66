"""How long the disk under the benchmark's data directories takes to sync.

Durable ratios compare group commit with beanstalkd `-f0`'s one fsync per
change, so they move with this number more than with anything haqueue does
(docs/benchmarks.md: the cluster's cycle ratio is 0.58x at 0.15 ms per sync
and 2.16x at 0.84 ms). bench prints it next to every durable comparison.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time

SAMPLES = 200
RECORD = b"x" * 200  # about one small journal record


def sync_latency_ms(directory: str | None = None, samples: int = SAMPLES) -> float:
    """Median time of an fdatasync after appending one small record, in ms."""
    directory = directory or tempfile.gettempdir()
    fd, path = tempfile.mkstemp(prefix="haqueue-bench-sync-", dir=directory)
    try:
        times = []
        for _ in range(samples):
            os.write(fd, RECORD)
            started = time.perf_counter()
            os.fdatasync(fd)
            times.append(time.perf_counter() - started)
        return statistics.median(times) * 1000
    finally:
        os.close(fd)
        os.unlink(path)


def describe(directory: str | None = None) -> tuple[str, float]:
    """(the line bench prints, the median in ms)."""
    directory = directory or tempfile.gettempdir()
    ms = sync_latency_ms(directory)
    line = (f"disk: fdatasync of a small append takes {ms:.2f} ms (median of {SAMPLES}) in {directory}; "
            "durable ratios move with it (docs/benchmarks.md)")
    return line, ms
