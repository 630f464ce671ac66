"""Restoring a backup: a data directory a new cluster's node starts from.

The directory gets one file, `raft.snapshot`, in the snapshot format every node
reads at start (replication/snapshot.py): the backup's state on the clock of
the restore, and the two log entries a snapshot carries beside it, made here as
pysyncobj's own no-op entries (term 0, indexes S-1 and S, S the backup's
applied index and at least 2). A node started on it (Raft member or lone node)
loads it as it loads its own snapshot; its journal starts empty after S. Every
node of the new cluster must start from the same directory (restore once and
copy it, or name every directory with -b on one run): the entries are equal
everywhere, so Raft's log matching sees no difference between states made by
two restores (docs/operations.md, "Backup and restore").

An entry at S >= 2 also keeps a node that was not restored (an empty data
directory, whose log begins with a no-op at index 1) from taking entries after
S without the state: the leader's log starts after index 1, so it sends such a
node the snapshot instead.
"""

from __future__ import annotations

import os

from haqueue.backup import records as R
from haqueue.core.state import QueueState

# pysyncobj's no-op command (syncobj.py, _COMMAND_TYPE.NO_OP): never applied here,
# since the snapshot covers it, and applied as nothing should a follower get it.
NO_OP = b"\x01"
SNAPSHOT_NAME = "raft.snapshot"


class RestoreError(Exception):
    """The directory cannot be prepared; str() is one line."""


def restored_state(records: tuple, now: int, skip: int) -> QueueState:
    """The state a restored node starts with (QueueState.from_records checks it)."""
    try:
        return QueueState.from_records(R.restored_records(records, now, skip))
    except Exception as exc:
        raise RestoreError(f"the backup's state does not load ({type(exc).__name__}: {exc})"[:300]) from None


def raft_data(index: int) -> tuple:
    """(entry S, entry S-1, cluster) as a snapshot keeps them (snapshot.py)."""
    last = max(2, index)
    return ((NO_OP, last, 0), (NO_OP, last - 1, 0), ())


def check_empty(directory: str) -> None:
    """A restore writes only into a directory that is missing or empty: a node's old
    journal beside the restored snapshot would be lined up with it, or refused."""
    if os.path.exists(directory):
        if not os.path.isdir(directory):
            raise RestoreError(f"{directory}: exists and is not a directory")
        if os.listdir(directory):
            raise RestoreError(f"{directory}: not empty; restore into a new data directory")


def snapshot_bytes(state: QueueState, index: int) -> bytes:
    """The snapshot file every restored directory gets."""
    from haqueue.replication import snapshot

    return snapshot.encode(state, raft_data(index))


def write(directory: str, data: bytes) -> str:
    """Write the snapshot `data` into `directory` (made if missing), synced; its path."""
    from haqueue.replication.journal import write_atomically

    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, SNAPSHOT_NAME)
    write_atomically(path, data, sync=True, tmp=path + ".writing")
    return path
