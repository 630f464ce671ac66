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
"""

from __future__ import annotations

import os
from typing import Callable

from haqueue.replication import snapshot, snapshot_writer
from haqueue.replication.snapshot import SnapshotError
from haqueue.replication.snapshot_writer import SnapshotWriter


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
        node = self.node
        limit = node.journal_limit
        if limit is None or not self.writer.may_start():
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
        node = self.node
        preloaded, self._preloaded = self._preloaded, None
        if preloaded is not None:
            state, raft_data = preloaded  # read, and its restore logged, at start-up
        else:
            with node.observations.restoring(path):
                try:
                    if not node.policy.never:
                        snapshot.sync_file(path)
                    state, raft_data = snapshot.read(path)
                except OSError as exc:
                    node._fatal(f"snapshot {path}: cannot sync it: {exc.strerror or exc}")
                    raise
                except SnapshotError as exc:
                    node._fatal(str(exc))
                    raise
        node.state = state
        return raft_data
