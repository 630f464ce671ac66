"""The mark a Raft member leaves in its data directory, read without importing pysyncobj.

A node whose cluster file names it alone runs as a lone node (lone.py, no
Raft) unless its data directory says a Raft member keeps its log there: a
survivor of `node recover --force-new-cluster`, or the last member after
remove-node, is a group of one that grows again with add-node, and its log
holds Raft's membership entries, which a lone node does not read.
"""

from __future__ import annotations

import os

MEMBER_FILE = "raft.member"


def mark_member(data_dir: str | None) -> None:
    """Leave the mark (a Raft node does at every start with -b DIR), synced: a group
    of one that lost it to a power cut would start as a lone node, which cannot grow."""
    from haqueue.replication.journal import JournalError, write_atomically

    if data_dir is None:
        return
    path = os.path.join(data_dir, MEMBER_FILE)
    if not os.path.exists(path):
        try:
            write_atomically(path, b"a Raft member's data directory (haqueue/replication/member_dir.py)\n",
                             sync=True)
        except OSError as exc:  # storage errors are fatal: one line at start (replica.startup_errors)
            raise JournalError(f"{path}: cannot write it: {exc.strerror or exc}") from None


def is_member_dir(data_dir: str | None) -> bool:
    return data_dir is not None and os.path.exists(os.path.join(data_dir, MEMBER_FILE))
