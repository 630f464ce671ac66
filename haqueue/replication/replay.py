"""Rebuild a node's queue state offline from its data directory (snapshot + journal).

This is what a restarting node does before it serves, done without Raft: load
the snapshot if there is one, then apply every journal entry after it, in
order. Operators use it (`haqueue node replay -b DIR`) to inspect a stopped
node; the crash tests use it to show that replay gives the state the node had
acknowledged (design.md I7).
"""

from __future__ import annotations

import os
import pickle

from haqueue.core.commands import decode_batch
from haqueue.core.state import QueueState
from haqueue.replication import snapshot as snapshot_file
from haqueue.replication.fsync_policy import NEVER
from haqueue.replication.journal import DurableJournal

# pysyncobj's entry framing: one type byte, then for REGULAR entries a pickle
# of (method id, args). haqueue has exactly one replicated method (id 0).
_REGULAR = 0


def replay(data_dir: str) -> tuple[QueueState, int]:
    """(state, last applied raft index) from `data_dir`."""
    state = QueueState()
    applied = 0
    snapshot = os.path.join(data_dir, "raft.snapshot")
    if os.path.exists(snapshot):
        state, raft_data = snapshot_file.read(snapshot)
        applied = raft_data[0][1]  # the last applied entry's index
    journal_path = os.path.join(data_dir, "raft.journal")
    if os.path.exists(journal_path):
        journal = DurableJournal(journal_path, NEVER)
        try:
            for command, idx, _term in journal.entries:
                if idx <= applied:
                    continue
                if command[0] == _REGULAR:
                    _method, args = pickle.loads(command[1:])
                    stamp, commands = decode_batch(args[0])
                    state.apply_batch(stamp, commands)
                applied = idx
        finally:
            journal._destroy()
    return state, applied
