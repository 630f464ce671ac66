"""Rebuild a node's queue state offline from its data directory (snapshot + journal).

This is what a restarting node does before it serves, done without Raft: load
the snapshot if there is one, then apply every journal entry after it, in
order. Operators use it (`haqueue node replay -b DIR`) to inspect a stopped
node; the crash tests use it to show that replay gives the state the node had
acknowledged (docs/design.md I7).
"""

from __future__ import annotations

import os

from haqueue.config.fsync_policy import NEVER
from haqueue.core.commands import decode_batch
from haqueue.core.state import QueueState
from haqueue.replication import snapshot as snapshot_file
from haqueue.replication.journal import DurableJournal, unframe


def replay(data_dir: str, *, uncommitted: bool = False) -> tuple[QueueState, int]:
    """(state, last applied raft index) from `data_dir`.

    By default only entries known to be committed are applied: up to the
    commit index the node stored (lazily, so a lower bound) or its snapshot.
    A cluster node's journal may end in entries that were never committed and
    that the leader will cut on restart. With `uncommitted`, every entry is
    applied: what a lone node does when it restarts (it is its own majority).
    """
    state, applied, _ = replay_with_tail(data_dir, uncommitted=uncommitted)
    return state, applied


def replay_with_tail(data_dir: str, *, uncommitted: bool = False) -> tuple[QueueState, int, int]:
    """As `replay`, plus the number of journal entries left unapplied."""
    state = QueueState()
    applied = 0
    snapshot = os.path.join(data_dir, "raft.snapshot")
    if os.path.exists(snapshot):
        state, raft_data = snapshot_file.read(snapshot)
        applied = raft_data[0][1]  # the last applied entry's index
    journal_path = os.path.join(data_dir, "raft.journal")
    tail = 0
    if os.path.exists(journal_path):
        journal = DurableJournal(journal_path, NEVER)
        try:
            through = None if uncommitted else max(journal.getRaftCommitIndex(), applied)
            applied = apply_entries(state, journal.entries, after=applied, through=through)
            tail = sum(1 for _, idx, _ in journal.entries if idx > applied)
        finally:
            journal._destroy()
    return state, applied, tail


def apply_entries(state: QueueState, entries, *, after: int, through: int | None = None) -> int:
    """Apply journal `entries` with after < index <= through to `state`; the last index applied."""
    applied = after
    for command, idx, _term in entries:
        if idx <= after:
            continue
        if through is not None and idx > through:
            break
        entry = unframe(command)
        if entry is not None:
            stamp, commands = decode_batch(entry)
            state.apply_batch(stamp, commands)
        applied = idx
    return applied
