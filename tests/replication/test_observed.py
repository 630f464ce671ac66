"""The replication layer's monitoring bookkeeping (haqueue/replication/observed.py)."""

from __future__ import annotations

import logging

from haqueue.replication.observed import (
    CANDIDATE,
    FOLLOWER,
    LEADER,
    FsyncTimer,
    Histogram,
    RaftObservations,
)


def test_histogram_buckets_are_cumulative_with_inf_last():
    h = Histogram((1, 5, 10))
    for value in (0.5, 1, 3, 7, 50):
        h.observe(value)
    buckets, total, count = h.snapshot()
    assert buckets == [(1, 2), (5, 3), (10, 4), (float("inf"), 5)]
    assert (total, count) == (61.5, 5)
    assert h.quantile(0.5) == 5 and h.quantile(1.0) == float("inf")
    assert Histogram((1,)).quantile(0.99) is None


def test_elections_are_counted_and_leadership_changes_logged(caplog):
    seen = RaftObservations()
    with caplog.at_level(logging.INFO, logger="haqueue.events"):
        seen.role_changed(FOLLOWER, CANDIDATE, 2)
        seen.role_changed(CANDIDATE, FOLLOWER, 2)
        seen.role_changed(FOLLOWER, CANDIDATE, 3)
        seen.role_changed(CANDIDATE, LEADER, 3)
        seen.role_changed(LEADER, FOLLOWER, 4)
    assert (seen.elections_won, seen.elections_lost) == (1, 1)
    assert [r.getMessage() for r in caplog.records] == ["leadership won: term 3", "leadership lost: term 4"]


def test_lag_seconds_is_the_age_of_the_oldest_commit_a_follower_lacks():
    seen = RaftObservations()
    seen.note_commit(10, now=100.0)
    seen.note_commit(10, now=101.0)  # unchanged: not a new sample
    seen.note_commit(20, now=102.0)
    seen.note_commit(30, now=104.0)
    assert seen.lag_seconds(30, now=110.0) == 0.0
    assert seen.lag_seconds(25, now=110.0) == 6.0  # lacks 26..30, committed at 104
    assert seen.lag_seconds(10, now=110.0) == 8.0  # lacks 11..20, committed at 102
    assert seen.lag_seconds(3, now=110.0) == 10.0


def test_snapshots_record_size_and_duration_and_failures_as_events(caplog):
    seen = RaftObservations()
    with caplog.at_level(logging.INFO, logger="haqueue.events"):
        seen.snapshot_started(40)
        seen.snapshot_finished(40, 4096)
        seen.snapshot_started(80)
        seen.snapshot_failed("cannot fork the writer: Cannot allocate memory", retry_in=2.0)
    assert (seen.snapshots, seen.snapshot_failures, seen.last_snapshot_bytes) == (1, 1, 4096)
    assert seen.last_snapshot_seconds is not None and seen.last_snapshot_seconds >= 0
    kinds = [r.fields["event"] for r in caplog.records]
    assert kinds == ["snapshot_started", "snapshot_finished", "snapshot_started", "snapshot_failed"]
    messages = [r.getMessage() for r in caplog.records]
    assert messages[1].startswith("snapshot finished: through entry 40, 4096 bytes in ")
    assert messages[3] == "snapshot failed: cannot fork the writer: Cannot allocate memory; next attempt in 2 s"
    assert caplog.records[3].fields["reason"] == "cannot fork the writer: Cannot allocate memory"


def test_a_slow_fsync_is_logged_once_per_interval(caplog):
    timer = FsyncTimer(slow_seconds=0.01)
    with caplog.at_level(logging.WARNING, logger="haqueue.events"):
        timer.observe(0.001, "/j")
        timer.observe(0.5, "/j")
        timer.observe(0.6, "/j")
    assert [r.getMessage() for r in caplog.records] == ["slow fsync: 500.0 ms on /j (threshold 10 ms)"]
    assert timer.seconds.snapshot()[2] == 3
