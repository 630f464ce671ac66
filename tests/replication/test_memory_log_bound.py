"""A Raft node without a data directory keeps its log in memory: `-s` bounds it as it
bounds the journal on disk, so the log cannot hold a copy of every put since the last
snapshot (20,000 entries of up to hundreds of puts each, before this bound).

Real ReplicatedQueue nodes in memory on loopback, ticked by hand in virtual time
(tests/support/ticked.py). The size is the only trigger (docs/pysyncobj.md D5): no
snapshot on a timer or an entry count, as pysyncobj would take every 120 s.
"""

from __future__ import annotations

from haqueue.core import commands as C
from tests.support.ticked import TickedCluster, ticked_cluster

LIMIT = 64 * 1024
BODY_SIZE = 4096


def _fill(cluster: TickedCluster, entries: int) -> None:
    node = cluster.leader()
    outcomes = []
    for i in range(entries):
        puts = [(C.PUT, "default", 0, 0, 60_000, bytes([i, k]) * (BODY_SIZE // 2)) for k in range(4)]
        outcomes.append(cluster.submit(node, C.encode_batch(1_000 + i, puts)))
    cluster.run_until(lambda: all(outcomes), seconds=1, what="every entry applied")
    assert all([r[0] for r in outcome[0][0].results] == ["INSERTED"] * 4 for outcome in outcomes), outcomes


def test_an_in_memory_log_past_the_journal_size_is_folded_into_a_snapshot():
    with ticked_cluster(journal_limit=LIMIT) as cluster:
        node = cluster.leader()
        _fill(cluster, 8)  # 8 entries of 4 x 4 KiB: twice the limit
        cluster.until_snapshots(node, 1)  # past the limit
        assert node.observations.snapshots == 1
        assert node.snapshots.log_bytes <= LIMIT
        assert len(node.state.jobs) == 32


def test_without_a_journal_size_an_in_memory_log_is_not_folded_by_size():
    with ticked_cluster() as cluster:
        node = cluster.leader()
        _fill(cluster, 8)
        cluster.run(seconds=1)  # time in which a snapshot would start
        assert node.snapshots.log_bytes > 2 * LIMIT
        assert node.observations.snapshots == 0 and not node.snapshot_writer.pid


def test_a_cluster_node_takes_no_snapshot_on_a_timer_below_the_journal_size():
    # pysyncobj's own trigger (logCompactionMinTime, 120 s) snapshotted every node
    # every two minutes whatever snapshot.journal_due said (issue 23, B6).
    with ticked_cluster(journal_limit=LIMIT, step=0.02) as cluster:
        _fill(cluster, 2)  # 32 KiB: half the limit
        cluster.run(seconds=150)
        assert [n.observations.snapshots + n.observations.snapshot_failures for n in cluster.nodes] == [0, 0, 0]
        assert not any(n.snapshot_writer.pid for n in cluster.nodes)
