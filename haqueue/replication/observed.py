"""What the replication layer has seen happen: counters and histograms for monitoring.

Owns the bookkeeping that a snapshot of the node's state cannot give later:
how long fsyncs took, how many commands each group commit carried, elections
won and lost, the last snapshot's duration and size, and when each commit
index was reached (so a follower's lag can be told in seconds as well as
entries). The metrics endpoint (haqueue/server/metrics.py) reads these at
scrape time; nothing here knows about Prometheus.

It also writes the one-line event logs for these moments (leadership won or
lost with the term, a snapshot started, finished, failed (with its reason)
or restored, a follower caught up, an fsync slower than a threshold; the
snapshot's through haqueue/events.py), so an operator reading the log sees the same
events the metrics count. Each carries its facts as `extra={"fields": ...}`
for the JSON-lines log format (haqueue/logs.py).

Everything here is cheap on the hot path (a bisect and a few increments under
a lock) and safe to call from the journal's sync worker (fsync times) as well
as from the event loop's thread, where Raft ticks and the server reads.
"""

from __future__ import annotations

import bisect
import contextlib
import logging
import os
import threading
import time
from typing import Iterator

from haqueue import events
from haqueue.progress import Progress, elapsed

log = logging.getLogger("haqueue.events")

# fsync latency in seconds: SSDs answer in tens of microseconds to a few
# milliseconds, spinning disks and busy cloud volumes in tens to hundreds.
FSYNC_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
# Commands per Raft entry (group commit): 1 when idle, up to the batcher's cap under load.
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096)
# An fsync slower than this is logged, one line each (rate-limited).
SLOW_FSYNC_SECONDS = 0.1
SLOW_FSYNC_LOG_INTERVAL = 5.0
# Commit-index samples kept for lag in seconds: one per tick at most (~50/s), ~10 minutes.
COMMIT_SAMPLES = 30000

# A follower this far behind (its oldest missing entry's age) is "behind";
# catching up from there is logged. Checked twice a second.
FOLLOWER_BEHIND_SECONDS = 1.0
FOLLOWER_CHECK_PERIOD = 0.5

FOLLOWER, CANDIDATE, LEADER = 0, 1, 2  # pysyncobj's _RAFT_STATE


class Histogram:
    """Cumulative-bucket histogram (Prometheus semantics: le buckets, sum, count)."""

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = tuple(bounds)
        self._counts = [0] * (len(self.bounds) + 1)  # the last is +Inf
        self._sum = 0.0
        self._lock = threading.Lock()

    def observe(self, value: float) -> None:
        slot = bisect.bisect_left(self.bounds, value)
        with self._lock:
            self._counts[slot] += 1
            self._sum += value

    def snapshot(self) -> tuple[list[tuple[float, int]], float, int]:
        """([(upper bound, cumulative count)...] ending with +Inf, sum, count)."""
        with self._lock:
            counts, total = list(self._counts), self._sum
        buckets, running = [], 0
        for bound, count in zip(self.bounds + (float("inf"),), counts):
            running += count
            buckets.append((bound, running))
        return buckets, total, running

    def quantile(self, q: float) -> float | None:
        """The upper bound of the bucket holding quantile q (None before any observation)."""
        buckets, _, count = self.snapshot()
        if not count:
            return None
        rank = q * count
        for bound, cumulative in buckets:
            if cumulative >= rank:
                return bound
        return float("inf")


class FsyncTimer:
    """Times each fsync of the journal; logs the slow ones."""

    def __init__(self, slow_seconds: float = SLOW_FSYNC_SECONDS) -> None:
        self.seconds = Histogram(FSYNC_BUCKETS)
        self.slow_seconds = slow_seconds
        self._last_slow_log = float("-inf")

    def observe(self, seconds: float, path: str) -> None:
        self.seconds.observe(seconds)
        if seconds >= self.slow_seconds:
            now = time.monotonic()
            if now - self._last_slow_log >= SLOW_FSYNC_LOG_INTERVAL:
                self._last_slow_log = now
                log.warning("slow fsync: %.1f ms on %s (threshold %.0f ms)",
                            seconds * 1000, path, self.slow_seconds * 1000,
                            extra={"fields": {"event": "slow_fsync", "seconds": round(seconds, 4), "path": path}})


class RaftObservations:
    """Elections, snapshots, group-commit sizes and commit times of one node."""

    def __init__(self) -> None:
        self.elections_won = 0
        self.elections_lost = 0
        self.batch_commands = Histogram(BATCH_BUCKETS)
        self.snapshots = 0
        self.snapshot_failures = 0
        self.last_snapshot_seconds: float | None = None
        self.last_snapshot_bytes: int | None = None
        self._snapshot_started: float | None = None
        # Parallel lists: a commit index and the monotonic time it was first seen.
        self._commit_index: list[int] = []
        self._commit_time: list[float] = []
        self._lock = threading.Lock()
        self._behind_since: dict[str, float] = {}  # follower -> when it fell behind
        self._next_follower_check = float("-inf")

    # -- leadership ----------------------------------------------------------
    def role_changed(self, old: int, new: int, term: int) -> None:
        if old == CANDIDATE and new == LEADER:
            self.elections_won += 1
        elif old == CANDIDATE and new == FOLLOWER:
            self.elections_lost += 1
        if new == LEADER:
            log.info("leadership won: term %d", term, extra={"fields": {"event": "leadership_won", "term": term}})
        elif old == LEADER:
            log.info("leadership lost: term %d", term, extra={"fields": {"event": "leadership_lost", "term": term}})

    # -- snapshots (snapshot_writer.py calls these) ----------------------------
    def snapshot_started(self, index: int) -> None:
        self._snapshot_started = time.monotonic()
        events.record("snapshot_started", "snapshot started: through entry %d", index, index=index)

    def snapshot_finished(self, index: int, size: int | None) -> None:
        started, self._snapshot_started = self._snapshot_started, None
        took = time.monotonic() - started if started is not None else None
        self.snapshots += 1
        self.last_snapshot_seconds = took
        self.last_snapshot_bytes = size
        events.record("snapshot_finished", "snapshot finished: through entry %d, %s bytes in %s", index,
                      size if size is not None else "?", f"{took:.3f} s" if took is not None else "?",
                      index=index, bytes=size, seconds=round(took, 3) if took is not None else None)

    def snapshot_abandoned(self, index: int, reason: str) -> None:
        self._snapshot_started = None
        events.record("snapshot_abandoned", "snapshot through entry %d abandoned: %s", index, reason,
                      index=index, reason=reason)

    def snapshot_failed(self, reason: str, *, retry_in: float) -> None:
        self._snapshot_started = None
        self.snapshot_failures += 1
        events.record("snapshot_failed", "snapshot failed: %s; next attempt in %.0f s", reason, retry_in,
                      level=logging.WARNING, reason=reason, retry_in=retry_in)

    # -- followers falling behind and catching up -------------------------------------
    def note_followers(self, read_matches, now: float) -> None:
        """On the leader, every tick: log when a follower that fell behind has caught up.

        `read_matches()` gives each follower's match index; it is called only
        when a check is due (every FOLLOWER_CHECK_PERIOD), not on every tick.

        A follower counts as behind once the oldest entry it lacks is older
        than FOLLOWER_BEHIND_SECONDS; it has caught up when it lacks nothing.
        """
        if now < self._next_follower_check:
            return
        self._next_follower_check = now + FOLLOWER_CHECK_PERIOD
        for peer, match in read_matches().items():
            lag = self.lag_seconds(match, now)
            since = self._behind_since.get(peer)
            if since is None and lag >= FOLLOWER_BEHIND_SECONDS:
                self._behind_since[peer] = now - lag
            elif since is not None and lag == 0.0:
                del self._behind_since[peer]
                log.info("follower caught up: %s after %.1f s behind", peer, now - since,
                         extra={"fields": {"event": "follower_caught_up", "peer": peer,
                                           "seconds_behind": round(now - since, 3)}})

    # -- restoring a snapshot on start ---------------------------------------------
    @contextlib.contextmanager
    def restoring(self, path: str) -> Iterator[None]:
        """Log a snapshot's restore (size, then time taken); a ticking line on a terminal.
        Once restored, it is this node's last snapshot (`last_snapshot_bytes`)."""
        try:
            size = os.path.getsize(path)
        except OSError:
            size = None
        megabytes = f"{size / 1e6:.1f} MB" if size is not None else "? MB"
        log.info("restoring snapshot: %s from %s", megabytes, path,
                 extra={"fields": {"event": "snapshot_restore_started", "bytes": size}})
        started = time.monotonic()
        with Progress().ticking(lambda: f"restoring snapshot ({megabytes}): {elapsed(started)}"):
            yield
        seconds = time.monotonic() - started
        self.last_snapshot_bytes = size
        log.info("snapshot restored: %s in %.3f s", megabytes, seconds,
                 extra={"fields": {"event": "snapshot_restored", "bytes": size, "seconds": round(seconds, 3)}})

    # -- commit times, for lag in seconds ---------------------------------------
    def note_commit(self, commit_index: int, now: float) -> None:
        """Record when `commit_index` was first seen (called every tick; cheap when unchanged)."""
        indexes = self._commit_index
        if indexes and indexes[-1] >= commit_index:
            return
        with self._lock:
            indexes.append(commit_index)
            self._commit_time.append(now)
            if len(indexes) > 2 * COMMIT_SAMPLES:
                del indexes[:COMMIT_SAMPLES]
                del self._commit_time[:COMMIT_SAMPLES]

    def lag_seconds(self, match_index: int, now: float) -> float:
        """How long ago the oldest entry a follower lacks was committed (0 when it has all)."""
        with self._lock:
            indexes, times = self._commit_index, self._commit_time
            if not indexes or match_index >= indexes[-1]:
                return 0.0
            # The first sample past what the follower has: when that was committed.
            slot = bisect.bisect_right(indexes, match_index)
            return max(0.0, now - times[slot])
