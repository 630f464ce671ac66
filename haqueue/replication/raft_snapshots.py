"""A Raft node's snapshots: pysyncobj's serializer hooks, and when a snapshot is due.

ReplicatedQueue (raft_node.py) hands pysyncobj `write` as its serializer,
`read` as its deserializer and `progress` as its serializeChecker (mapped to
pysyncobj's SERIALIZER_STATE there: this module imports nothing of pysyncobj),
and asks `due` after every tick (docs/pysyncobj.md D5). The rules:

- At start-up the snapshot is read before the node joins the cluster, so a
  bad one stops it first, and the journal is lined up with it
  (snapshot.align_journal); pysyncobj loads it at the first tick, and `read`
  hands it that copy.
- `write` runs in a tick between entries, so the state is exactly that of the
  last applied entry; the SnapshotWriter forks (snapshot_writer.py). pysyncobj
  then renames its own temporary file over the dump; that file never exists,
  the rename fails, and pysyncobj's serializer stays busy (it neither compacts
  nor sends a snapshot to a follower) until `progress` says SUCCESS or FAILED.
  So a fork that failed is reported FAILED at the next tick: answering "not
  serializing" left it busy for good (issue 23, B1).
- `due` is the only trigger (pysyncobj's own, by entries and time, is off):
  on disk, the journal past `-s` and past the last snapshot's size
  (snapshot.journal_due); in memory, where the log is the journal, the bytes
  applied since the last snapshot past `-s`. By entry count alone (20,000
  entries of up to hundreds of puts) the log held a copy of every put since
  the last snapshot, 90 of the 645 bytes a queued 100-byte job cost after
  1,000,000 puts. The writer's backoff decides when a failed one is retried.
- A snapshot the leader sent: pysyncobj wrote it without fsync and clears the
  journal next (synced), so `read` syncs it first; one it cannot sync or read
  stops the node (pysyncobj would only log it and go on as a zombie).
- Building the state of a received snapshot is the slow part of reading it
  (500,000 jobs: 0.5 s to unpickle, 4-12 s to build), so `read` checks the file
  and unpickles it on the loop, hands pysyncobj its raft data at once, and
  builds the state in a thread (StateBuild). Meanwhile the node goes on as a
  follower: it appends and acknowledges the leader's entries (so a cluster with
  a node down still has its majority), votes, and answers keepalives, but it
  applies nothing (raft_node holds applying back while `loading`), takes no
  snapshot of its own and does not campaign; its state is the old one until
  `poll_build`, at a tick, puts the new one in place. A second snapshot received
  meanwhile replaces the build under way (issue 23, B7).
"""

from __future__ import annotations

import os
import threading
from typing import Callable

from haqueue.replication import snapshot, snapshot_writer
from haqueue.replication.snapshot import SnapshotError
from haqueue.replication.snapshot_writer import SnapshotWriter


class StateBuild:
    """A received snapshot's state, built in a thread while the loop keeps ticking."""

    def __init__(self, records, path: str, build: Callable) -> None:
        self.path = path
        self.state = None
        self.error: SnapshotError | None = None
        self.done = threading.Event()
        thread = threading.Thread(target=self._run, args=(records, build), name="snapshot-load", daemon=True)
        try:
            thread.start()
        except RuntimeError:  # no thread to be had (memory, limits): build it here instead
            self._run(records, build)

    def _run(self, records, build) -> None:
        try:
            self.state = build(records, self.path)
        except SnapshotError as exc:
            self.error = exc
        except BaseException as exc:  # MemoryError, a bug: this node cannot hold the state
            self.error = SnapshotError(f"snapshot {self.path}: building its state failed: "
                                       f"{type(exc).__name__}: {exc}")
        finally:
            self.done.set()


class RaftSnapshots:
    """The snapshots of one ReplicatedQueue (`node`: its state, journal, policy,
    observations, journal_limit and _fatal are read here)."""

    def __init__(self, node, dump_path: str, clock: Callable[[], float]) -> None:
        self.node = node
        self.dump_path = dump_path
        # Synced under -F too (in the child, off the loop): the snapshot holds the id counters.
        self.writer = SnapshotWriter(dump_path, node.observations, sync=True, clock=clock)
        # Bytes of the entries applied since the last snapshot: what the log
        # holds in memory beyond it, near enough (apply_entry adds to it).
        self.log_bytes = 0
        self._covered = 0  # of those, what the snapshot being written covers
        self._preloaded: tuple | None = None
        self.build_state = snapshot.build_state  # what a StateBuild runs (a test may hold it)
        self._build: StateBuild | None = None
        self._restoring = None  # the restore's log context, open while the build runs

    @property
    def loading(self) -> bool:
        """Is a received snapshot's state still being built? (see the module docstring)"""
        return self._build is not None

    def superseded(self) -> None:
        """The leader's snapshot is complete and about to replace this node's file: a
        writer of this node's own still running must not rename its older one over it."""
        self.writer.abandon("the leader's snapshot replaces it")

    def poll_build(self) -> None:
        """At a tick: put a finished build's state in place; a failed one stops the node."""
        build = self._build
        if build is None or not build.done.is_set():
            return
        self._build = None
        restoring, self._restoring = self._restoring, None
        if build.error is not None:
            self.node._fatal(str(build.error))
            return
        self.node.state = build.state
        if restoring is not None:
            restoring.__exit__(None, None, None)

    def load_at_start(self, journal) -> None:
        """Read the snapshot now and line `journal` (None in memory) up with it."""
        if not os.path.isfile(self.dump_path):
            return
        with self.node.observations.restoring(self.dump_path):
            state, raft_data = snapshot.read(self.dump_path)
        if journal is not None:
            snapshot.align_journal(journal, raft_data)
        self._preloaded = (state, raft_data)

    def due(self) -> bool:
        """Fold the log into a snapshot now? (the one trigger; see the module docstring)"""
        return not self.loading and self.writer.may_start() and self._past_limit()

    def settled(self) -> bool:
        """Nothing for a tick to watch or start: no writer running, no received state
        being built, the log short of its limit (a snapshot owed waits only for a
        failed writer's retry time, which only a full tick would see come)."""
        return not (self.loading or self.writer.pid or self._past_limit())

    def _past_limit(self) -> bool:
        """Has the log grown past what makes a snapshot due (-s)?"""
        node = self.node
        limit = node.journal_limit
        if limit is None:
            return False
        if node.journal is not None:
            return snapshot.journal_due(node.journal.size, limit, node.observations.last_snapshot_bytes or 0)
        return self.log_bytes > limit

    def write(self, _pysyncobj_tmp: str, raft_data) -> None:
        """pysyncobj's serializer: fork the writer for the state as it is now."""
        self._covered = self.log_bytes  # what it covers, once written
        self.writer.start(self.node.state, raft_data)

    def progress(self) -> str | None:
        """pysyncobj's serializeChecker: the writer's outcome (snapshot_writer's names)."""
        outcome = self.writer.poll()
        if outcome == snapshot_writer.DONE:
            self.log_bytes -= self._covered
        return outcome

    def read(self, path: str):
        """pysyncobj's deserializer: put the snapshot's state in place; its raft data."""
        return _with_group(self._read(path), self.node)

    def _read(self, path: str):
        node = self.node
        preloaded, self._preloaded = self._preloaded, None
        if preloaded is not None:
            state, raft_data = preloaded  # read, and its restore logged, at start-up
            node.state = state
            return raft_data
        restoring = node.observations.restoring(path)
        restoring.__enter__()  # left when the state is in place (poll_build)
        try:
            if not node.policy.never:
                snapshot.sync_file(path)
            records, raft_data = snapshot.read_records(path)
        except OSError as exc:
            node._fatal(f"snapshot {path}: cannot sync it: {exc.strerror or exc}")
            raise
        except SnapshotError as exc:
            node._fatal(str(exc))
            raise
        # A build still under way is for an older snapshot: this one replaces it.
        if self._restoring is not None:
            self._restoring.__exit__(None, None, None)
        self._build = StateBuild(records, path, self.build_state)
        self._restoring = restoring
        return raft_data


def _with_group(raft_data: tuple, node) -> tuple:
    """The snapshot's raft data, with a group. A snapshot that names none (`haqueue
    restore`'s, a lone node's) keeps the node's own: pysyncobj, with membership
    changes on, makes the snapshot's group the node's, and an empty one left each
    restored node a group of one, leading alone (issue 27)."""
    if len(raft_data) > 2 and not raft_data[2]:
        return (raft_data[0], raft_data[1], node.group(), *raft_data[3:])
    return raft_data
