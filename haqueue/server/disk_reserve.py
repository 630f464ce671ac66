"""The disk reserve: new work is refused before the data directory's file system fills.

Why. Every replica holds the same data on disks of the same size, so a growing
backlog fills all of them together, and a node that meets ENOSPC stops (storage
errors are fatal: replication/journal.py): the whole cluster would go down at
once. Instead the leader refuses what only adds data while its free space is
below the reserve (beanstalkd's `put` answers OUT_OF_MEMORY, as beanstalkd does
when its binlog cannot reserve space; Gearman submits and id reservations get
their own errors, docs/gearman.md and docs/id-service.md), and keeps serving
what drains the queue (reserve, delete, release, bury, kick). Puts resume by
themselves once space returns: no restart, no operator command.

The reserve (`reserve_bytes`) is what the node still needs to fold its journal
into a new snapshot without running out. With S the last snapshot's size and J
the journal's: the journal may grow to max(-s, S) before it is folded
(replication/snapshot.py, journal_due), or is already past that, and the new
snapshot, at most the state's size (S + J at most), is written beside the old
snapshot and journal before they are removed. So

    reserve = floor + max(-s, S, J) + S

so just after a fold a node at the reserve holds a third of its disk: the "3x
rule" (a node needs about three times its state on disk); just before a fold,
with a journal of puts as big as the snapshot, the state may have doubled, and
the reserve covers that new snapshot too. With -n (never compact) the
journal never folds and the reserve is the floor alone. The floor covers what
the formula leaves out (the journal's write-ahead, metadata, whatever else
shares the file system): by default 1/16 of the file system, at most 64 MiB;
`--disk-reserve SIZE` or the cluster file's [limits] disk_reserve sets it, and
"off" turns the reserve off.

Sampling. statvfs of the data directory and the two file sizes are read when
a request asks (or /metrics is scraped) and the last reading is older than
POLL_SECONDS, not per command; in between, each admitted put counts its bytes
(plus PUT_OVERHEAD) against the free space read last, as limits.MemoryGauge
does for memory, so a burst cannot run far past the line before the next
reading. What fills the disks is the work a leader admits, and it is decided
on a reading at most POLL_SECONDS old, as when a timer read the disk every
POLL_SECONDS; the timer now reads it every IDLE_POLL_SECONDS only, so that the
crossing events follow the disk on a node nobody asks, without waking an idle
node four times a second (a tenth of an idle follower's wake-ups,
docs/benchmarks.md). Once below, puts stay refused until the free space is
back above the reserve by RESUME_MARGIN (1/16 of the reserve, at least 1 MiB),
so a node at the line does not flap. `observe` takes every input as an argument and decides
(the file system is read only by `read`, the clock is given): tests drive it
directly. Crossing the line either way is an event (haqueue/events.py);
/metrics shows the reserve, the free space and whether puts are refused.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Callable

from haqueue import events
from haqueue.config.limits import RESERVE_OFF

POLL_SECONDS = 0.25  # the oldest reading a request is decided on
IDLE_POLL_SECONDS = 5.0  # the timer's reading, for the events and /metrics of a node nobody asks
DEFAULT_FLOOR_MAX = 64 << 20
DEFAULT_FLOOR_SHARE = 16  # the default floor: 1/16 of the file system, at most DEFAULT_FLOOR_MAX
RESUME_MIN = 1 << 20
PUT_OVERHEAD = 256  # a put's journal record besides its body: framing, pickled fields
OFF = RESERVE_OFF  # ClientLimits.disk_reserve: no reserve at all


def reserve_bytes(floor: int, journal_limit: int | None, snapshot_bytes: int, journal_bytes: int) -> int:
    """Free bytes a node must keep to fold its journal into a snapshot (module docstring)."""
    if journal_limit is None:  # -n: the journal is never folded
        return floor
    return floor + max(journal_limit, snapshot_bytes, journal_bytes) + snapshot_bytes


def default_floor(filesystem_bytes: int) -> int:
    return min(DEFAULT_FLOOR_MAX, filesystem_bytes // DEFAULT_FLOOR_SHARE)


def resume_margin(reserve: int) -> int:
    return max(RESUME_MIN, reserve // 16)


def _mib(size: int) -> str:
    return f"{size / (1 << 20):.1f} MiB"


class DiskReserve:
    """Whether new work still fits above the disk reserve; a node without a data directory,
    or with the reserve off, always admits."""

    def __init__(self, loop, data_dir: str | None, floor: int | None, journal_limit: int | None,
                 sizes: Callable[[], tuple[int, int]], clock: Callable[[], float] = time.monotonic) -> None:
        self.loop = loop
        self.clock = clock
        self.data_dir = data_dir
        self.floor_setting = floor  # None: the default; OFF: no reserve
        self.journal_limit = journal_limit
        self.sizes = sizes  # () -> (last snapshot bytes, journal bytes)
        self.enabled = data_dir is not None and floor != OFF
        self.free = 0  # bytes free to unprivileged users at the last reading
        self.reserve = 0  # the reserve at the last reading
        self.pending = 0  # bytes admitted since the last reading
        self.below = False  # puts are refused
        self.refused = 0  # requests refused because of the reserve
        self.read_at = float("-inf")  # when the last reading was taken (clock())
        self._handle = None

    # ---------------------------------------------------------------- the decision
    def observe(self, free: int, filesystem_bytes: int, snapshot_bytes: int, journal_bytes: int) -> bool:
        """A new reading; True while new work is refused."""
        floor = default_floor(filesystem_bytes) if self.floor_setting is None else self.floor_setting
        self.free = free
        self.read_at = self.clock()
        self.reserve = reserve_bytes(floor, self.journal_limit, snapshot_bytes, journal_bytes)
        self.pending = 0
        if self.below:
            self._note(free < self.reserve + resume_margin(self.reserve))
        else:
            self._note(free < self.reserve)
        return self.below

    def admits(self, size: int) -> bool:
        """May a request that adds `size` bytes of data go to the log? Counts it if so."""
        if not self.enabled:
            return True
        self.refresh()
        if not self.below:
            cost = size + PUT_OVERHEAD
            if self.free - self.pending - cost >= self.reserve:
                self.pending += cost
                return True
            self._note(True)
        self.refused += 1
        return False

    # ---------------------------------------------------------------- sampling
    def start(self) -> None:
        if self.enabled:
            self._poll()

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def refresh(self) -> None:
        """Read again if the last reading is older than POLL_SECONDS."""
        if self.clock() - self.read_at >= POLL_SECONDS:
            self.read()

    def read(self) -> None:
        """A reading of the file system and the two file sizes, decided on."""
        try:
            disk = os.statvfs(self.data_dir)
            snapshot_bytes, journal_bytes = self.sizes()
        except OSError:
            # The directory is being set up, or gone: keep the last decision, and ask
            # again after POLL_SECONDS, not on every request meanwhile.
            self.read_at = self.clock()
        else:
            self.observe(disk.f_bavail * disk.f_frsize, disk.f_blocks * disk.f_frsize, snapshot_bytes,
                         journal_bytes)

    def _poll(self) -> None:
        self.refresh()  # a request may have just read it
        self._handle = self.loop.call_later(IDLE_POLL_SECONDS, self._poll)

    def _note(self, below: bool) -> None:
        if below == self.below:
            return
        self.below = below
        if below:
            events.record("disk_reserve_crossed",
                          "disk reserve: %s free on %s, below the reserve of %s: puts, Gearman submits and "
                          "id reservations are refused until space returns", _mib(self.free - self.pending),
                          self.data_dir, _mib(self.reserve), level=logging.WARNING, below=True,
                          free=self.free - self.pending, reserve=self.reserve)
        else:
            events.record("disk_reserve_crossed",
                          "disk reserve: %s free on %s, above the reserve of %s again: new work is accepted",
                          _mib(self.free), self.data_dir, _mib(self.reserve), below=False, free=self.free,
                          reserve=self.reserve)
