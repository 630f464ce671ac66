"""When a journal is folded into a snapshot, and how the snapshot writer runs (snapshot.py).

journal_due: past beanstalkd's -s and past the last snapshot's size, so that a big
queue is not rewritten whole for every -s bytes logged (tests/replication/test_lone.py
counts the bytes a lone node writes). The writer: a forked child at a lower priority
than the node, caught while it waits to open its file (a FIFO in its place, so the
test needs no timing).
"""

from __future__ import annotations

import os

from haqueue.core.state import QueueState
from haqueue.replication import snapshot

MIB = 1 << 20


def test_a_journal_is_due_past_the_limit_while_snapshots_are_smaller_than_it():
    assert not snapshot.journal_due(10 * MIB, 10 * MIB, 0)
    assert snapshot.journal_due(10 * MIB + 1, 10 * MIB, 0)
    assert snapshot.journal_due(10 * MIB + 1, 10 * MIB, 3 * MIB)


def test_past_a_snapshot_larger_than_the_limit_only_once_the_journal_is_as_large():
    assert not snapshot.journal_due(10 * MIB + 1, 10 * MIB, 150 * MIB)
    assert not snapshot.journal_due(150 * MIB, 10 * MIB, 150 * MIB)
    assert snapshot.journal_due(150 * MIB + 1, 10 * MIB, 150 * MIB)


def _nice(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[16])  # field 19: nice


def test_the_snapshot_writer_runs_at_a_lower_priority_than_the_node_and_writes_it_whole(tmp_path):
    path = str(tmp_path / "raft.snapshot")
    os.mkfifo(path + ".writing")  # where the writer writes first: its open waits for a reader
    state = QueueState()
    raft_data = (("e2", 2, 1), ("e1", 1, 1), ())
    pid = snapshot.write_in_child(path, state, raft_data, sync=False)
    try:
        with open(path + ".writing", "rb") as fifo:  # lets its open return: it niced before opening
            assert _nice(pid) == min(19, _nice(os.getpid()) + snapshot.WRITER_NICENESS)
            written = fifo.read()
    finally:
        _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert written == snapshot.encode(state, raft_data)
