"""A Raft node without a data directory keeps its log in memory: `-s` bounds it as it
bounds the journal on disk, so the log cannot hold a copy of every put since the last
snapshot (20,000 entries of up to hundreds of puts each, before this bound).

A real ReplicatedQueue in memory on loopback, with its own tick thread; alone, for a
small test (`haqueue serve` without peers runs lone.py instead, which keeps no log in
memory at all), but the bound is the same code a cluster member runs.
"""

from __future__ import annotations

from haqueue.core import commands as C
from haqueue.replication.fsync_policy import NEVER
from haqueue.replication.raft_node import ReplicatedQueue
from tests.replication.raft_nodes import free_ports, wait_for

LIMIT = 64 * 1024
BODY_SIZE = 4096


def _fill(node: ReplicatedQueue, entries: int) -> None:
    applied = []
    for i in range(entries):
        puts = [(C.PUT, "default", 0, 0, 60_000, bytes([i, k]) * (BODY_SIZE // 2)) for k in range(4)]
        node.submit(C.encode_batch(1_000 + i, puts),
                    lambda applied_entry, error: applied.append(applied_entry))
    assert wait_for(lambda: len(applied) == entries, 20), f"{len(applied)} of {entries} entries applied"
    assert all([r[0] for r in entry.results] == ["INSERTED"] * 4 for entry in applied), applied


def _node(journal_limit: int | None) -> ReplicatedQueue:
    node = ReplicatedQueue(f"127.0.0.1:{free_ports(1)[0]}", [], data_dir=None, policy=NEVER,
                           journal_limit=journal_limit)
    node.start()
    assert wait_for(node._isLeader, 10), "a lone node did not elect itself"
    return node


def test_an_in_memory_log_past_the_journal_size_is_folded_into_a_snapshot():
    node = _node(LIMIT)
    try:
        _fill(node, 8)  # 8 entries of 4 x 4 KiB: twice the limit
        assert wait_for(lambda: node.observations.snapshots >= 1, 20), "no snapshot past the limit"
        assert node.log_bytes_since_snapshot <= LIMIT
        assert len(node.state.jobs) == 32
    finally:
        node.stop()


def test_without_a_journal_size_an_in_memory_log_is_not_folded_by_size():
    node = _node(None)
    try:
        _fill(node, 8)
        assert node.log_bytes_since_snapshot > 2 * LIMIT
        assert node.observations.snapshots == 0
    finally:
        node.stop()
