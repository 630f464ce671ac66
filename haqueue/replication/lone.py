"""LoneReplica: a cluster of one, which needs no Raft.

A lone node is its own majority: an entry is committed the moment it is in
its own journal, synced as its fsync policy says (`-f0`: before anything
that depends on it is answered). So it needs none of pysyncobj's machinery:
no Raft ticks, no Raft port, no election, no hand-off between threads.
`submit` runs in the event loop's thread and does, in order: write the entry
to the journal, fsync it (`-f0`; with `-f MS` a timer syncs at most every MS
ms, as beanstalkd does), apply it, and call back with its results and
effects. While the fsync runs, the loop reads nothing: the commands that
arrive meanwhile wait in their sockets and ride together in the next entry
(group commit by construction, as in beanstalkd's own loop). Syncing in the
journal's worker instead, the apply following the sync's end, was tried and
measured slower with the node on one core (cycle, window 1, -f0, alternating
runs on a quiet machine: 1,601-1,719 against 1,849-2,156 cycles/s inline):
at a 0.1 ms fsync the thread hand-offs cost more than the overlap saves.

Measured against the pysyncobj path it replaces (docs/benchmarks-log.md, issue
9): two thread hand-offs per entry and pysyncobj's per-tick work were most of
a lone command's cost. And a lone node that never imports pysyncobj (nor the
cryptography it loads) starts listening and answering sooner (issue 10).

Files: the same as a Raft node's (journal records framed as pysyncobj frames
its commands, the `.meta` file with the term, the snapshot with the two
entries it covers), so `haqueue node replay` reads either, and so do the
crash tests. Each start is a new term, as a lone Raft node's election was.

Start-up: load the snapshot if there is one and line the journal up with it
(snapshot.align_journal), then apply every journal entry after it, all of
them: whatever is in a lone node's journal was committed. Compaction: once
the journal is past `journal_limit` bytes and past the last snapshot's size
(snapshot.journal_due, the one trigger, as on a Raft node), the node's
SnapshotWriter (snapshot_writer.py, shared with raft_node.py) forks a child
that writes the snapshot while the loop goes on, and backs off after a
failure; when the writer has finished (its pidfd is readable on the loop),
the journal prefix it covers is dropped, keeping its last two entries, which
is what a Raft node keeps too.

Storage errors are fatal (journal.py): the first JournalError stops the node
with one line; the entry being submitted is answered with outcome unknown
(its connection closes) and nothing after it is applied.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from typing import Callable

from haqueue.core.commands import LogFormatError, decode_batch
from haqueue.core.effects import Applied
from haqueue.core.state import QueueState
from haqueue.replication import applying, replay, snapshot, snapshot_writer
from haqueue.replication.journal import DurableJournal, JournalError, fatal_message, frame
from haqueue.replication.observed import RaftObservations
from haqueue.replication.snapshot_writer import SnapshotWriter

log = logging.getLogger(__name__)

_CANDIDATE, _LEADER = 1, 2  # pysyncobj's role numbers, for RaftObservations


class LoneReplica:
    """The Replica interface (replica.py) for a node without peers."""

    def __init__(self, config, *, on_role_change: Callable[[str, int], None],
                 on_fatal: Callable[[str], None]) -> None:
        self.config = config
        self.on_role_change = on_role_change
        self.on_fatal = on_fatal
        self.observations = RaftObservations()
        self.leader_fallback = (config.timing.leader_fallback if config.timing is not None else 0.5)
        self.state = QueueState()
        self.fatal_error: str | None = None
        self.policy = config.policy
        self.last_index = 0
        self.snapshot_writer: SnapshotWriter | None = None
        self._snapshot_fd = -1  # the running writer's pidfd, watched by the loop
        self._sync_timer: asyncio.TimerHandle | None = None
        self._meta_timer: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.journal: DurableJournal | None = None
        self.dump_path: str | None = None
        if config.data_dir is None:
            self.term = 1
            return
        os.makedirs(config.data_dir, exist_ok=True)
        self.dump_path = os.path.join(config.data_dir, "raft.snapshot")
        # Synced under -F too (in the child, off the loop): the snapshot holds the id counters.
        self.snapshot_writer = SnapshotWriter(self.dump_path, self.observations, sync=True)
        self.journal = journal = DurableJournal(os.path.join(config.data_dir, "raft.journal"), self.policy)
        try:
            self._recover(journal)
            self.term = journal.getCurrentTerm() + 1
            journal.setCurrentTerm(self.term, config.self_address)
        except BaseException:
            journal._destroy()
            raise

    def _recover(self, journal: DurableJournal) -> None:
        applied = 0
        if os.path.isfile(self.dump_path):
            with self.observations.restoring(self.dump_path):
                self.state, raft_data = snapshot.read(self.dump_path)
            snapshot.align_journal(journal, raft_data)
            last, before = raft_data[0], raft_data[1]
            applied = last[1]
            if len(journal) < 2 or journal[0] != before or journal[1] != last:
                # The journal does not continue this snapshot (it ends before it):
                # start it afresh from the snapshot's two entries, as Raft does.
                journal.clear()
                journal.add(*before)
                journal.add(*last)
        elif len(journal) and journal[0][1] > 1:
            # Compacted against a snapshot that is gone: the entries before the
            # journal's first exist nowhere, and replaying the rest would hand
            # out their job ids again. Refuse, as a Raft node does (snapshot.py).
            raise snapshot.SnapshotError(
                f"the journal {journal.path} starts at entry {journal[0][1]} but there is no snapshot "
                f"{self.dump_path}: the entries before it exist nowhere on this node")
        try:
            # Every entry after the snapshot: what a lone node's journal holds was committed.
            replay.apply_entries(self.state, journal.entries, after=applied)
        except LogFormatError as exc:
            raise LogFormatError(f"cannot apply a log entry: {exc}; refusing to run with "
                                 f"a diverged state") from None
        self.last_index = journal[len(journal) - 1][1] if len(journal) else applied
        journal.setRaftCommitIndex(self.last_index)

    # ------------------------------------------------------------ lifecycle
    def start(self) -> None:
        """Lead at once (call from the event loop that will submit)."""
        self._loop = asyncio.get_running_loop()
        self.observations.role_changed(_CANDIDATE, _LEADER, self.term)
        self.on_role_change("leader", self.term)
        if self.journal is not None:
            self._meta_timer = self._loop.call_later(1.0, self._every_second)

    def _every_second(self) -> None:
        # journal.onOneSecondTimer: the periodic policy's sync. (The commit index,
        # which only tells `haqueue node replay` how far the journal is known
        # committed, is stored with the term at start and at a clean stop.)
        if self._on_journal(DurableJournal.onOneSecondTimer):
            self._meta_timer = self._loop.call_later(1.0, self._every_second)

    def _on_journal(self, operation) -> bool:
        """operation(journal) from a timer, unless the node is stopping; a JournalError
        stops it. True if it ran and succeeded."""
        journal = self.journal
        if journal is None or self.fatal_error is not None:
            return False
        try:
            operation(journal)
        except JournalError as exc:
            self._fatal(exc)
            return False
        return True

    def stop(self) -> None:
        for timer in (self._sync_timer, self._meta_timer):
            if timer is not None:
                timer.cancel()
        self._sync_timer = self._meta_timer = None
        if self.snapshot_writer is not None:
            self._forget_snapshot_writer()
            self.snapshot_writer.end(0.0 if self.fatal_error is not None else snapshot_writer.GRACE)
        journal, self.journal = self.journal, None
        if journal is not None:
            try:
                journal._destroy()  # syncs what the policy left unsynced, and the meta file
            except JournalError as exc:
                log.error("%s", exc)

    # ---------------------------------------------------------------- write
    def submit(self, entry: bytes, on_applied: Callable[[Applied | None], None]) -> None:
        """Log, sync (per policy), apply: `on_applied` runs before this returns."""
        if self.fatal_error is not None:
            on_applied(None)
            return
        index = self.last_index + 1
        journal = self.journal
        if journal is not None:
            try:
                journal.add(frame(entry), index, self.term)
                journal.setRaftCommitIndex(index)  # stored lazily (_every_second)
                if self.policy.durable or journal.owed_end > journal.synced_end:
                    journal.sync()  # ids are synced whatever the policy (journal.py)
                elif not self.policy.never and self._sync_timer is None:
                    self._sync_timer = self._loop.call_later(self.policy.interval_ms / 1000, self._sync_due)
            except JournalError as exc:
                self._fatal(exc)
                on_applied(None)
                return
        self.last_index = index
        stamp, commands = decode_batch(entry)  # what replay will apply: the logged bytes
        applied = applying.apply_entry(self.state, stamp, commands)
        self.observations.note_commit(index, time.monotonic())
        on_applied(applied)
        if journal is not None:
            self._maybe_snapshot(journal)

    def _sync_due(self) -> None:
        self._sync_timer = None
        self._on_journal(DurableJournal.force_sync)

    def _fatal(self, exc: JournalError) -> None:
        if self.fatal_error is None:
            self.fatal_error = message = fatal_message(exc)
            log.critical(message)
            self.on_fatal(message)

    # ------------------------------------------------------------ snapshots
    def _maybe_snapshot(self, journal: DurableJournal) -> None:
        limit = self.config.journal_limit
        writer = self.snapshot_writer
        if (limit is not None and len(journal) >= 2 and writer.may_start()
                and snapshot.journal_due(journal.size, limit, self.observations.last_snapshot_bytes or 0)):
            last, before = journal[len(journal) - 1], journal[len(journal) - 2]
            if writer.start(self.state, (last, before, ())):
                self._snapshot_fd = os.pidfd_open(writer.pid)
                self._loop.add_reader(self._snapshot_fd, self._snapshot_written)
            else:
                writer.poll()  # the failed fork: its event is recorded, its backoff set

    def _forget_snapshot_writer(self) -> None:
        if self._snapshot_fd >= 0:
            self._loop.remove_reader(self._snapshot_fd)
            os.close(self._snapshot_fd)
            self._snapshot_fd = -1

    def _snapshot_written(self) -> None:
        self._forget_snapshot_writer()
        writer = self.snapshot_writer
        last, before, _ = writer.covers
        if writer.poll(block=True) != snapshot_writer.DONE:
            return  # recorded as an event; retried once the writer's backoff is over
        journal = self.journal
        if journal is None or self.fatal_error is not None:
            return
        # Keep the snapshot's two entries at the journal's head (what a restart
        # and snapshot.align_journal expect); drop everything before them.
        position = before[1] - journal[0][1]
        if position > 0:
            try:
                journal.deleteEntriesTo(position)
            except JournalError as exc:
                self._fatal(exc)

    # ----------------------------------------------------------- leadership
    @property
    def ticked_at(self) -> float:
        return time.monotonic()  # no Raft to tick: never overdue

    def is_leader(self) -> bool:
        return self.fatal_error is None

    def leads_in(self, term: int) -> bool:
        return self.is_leader() and term == self.term

    def read_lease_valid(self) -> bool:
        return True  # nobody else can lead

    def is_followed(self) -> bool:
        return self.is_leader()

    # --------------------------------------------------------------- status
    def status(self) -> dict:
        return {
            "role": "leader" if self.is_leader() else "follower",
            "term": self.term,
            "leader": self.config.self_address,
            "commit_index": self.last_index,
            "applied_index": self.last_index,
            "log_length": len(self.journal) if self.journal is not None else 0,
            "has_quorum": True,
        }

    def peers_connected(self) -> dict[str, bool]:
        return {}

    def follower_lag(self) -> dict[str, dict]:
        return {}
