"""The disk sync probe bench prints next to durable comparisons."""

from __future__ import annotations

import os

from haqueue.bench import disk


def test_sync_latency_is_measured_in_the_directory_and_leaves_nothing_behind(tmp_path):
    ms = disk.sync_latency_ms(str(tmp_path), samples=20)
    assert 0 < ms < 1000
    assert os.listdir(tmp_path) == []


def test_the_line_names_the_directory_and_the_median(tmp_path):
    line, ms = disk.describe(str(tmp_path))
    assert f"{ms:.2f} ms (median of {disk.SAMPLES}) in {tmp_path}" in line
