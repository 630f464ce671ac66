"""Ids survive a power loss whatever `-f` says (docs/id-service.md, "Durability").

A power loss keeps only what was fsynced (tests/support/power_loss.py). With
`-f MS` or `-F` a queue may lose its last moments of changes, as beanstalkd's
does; an id service may not: a counter that restarts below ids already handed
out hands them out again. So an entry reserving ids is synced before any of its
values is handed out: by the lone node before it applies the entry, and in a
cluster by a majority (each follower before it acknowledges, the leader before
it applies). Term and vote are synced whatever the policy too: a vote forgotten
in an OS crash lets a node vote twice in one term.
"""

from __future__ import annotations

import asyncio
from contextlib import ExitStack

import pytest

from haqueue.core import commands as C
from haqueue.core.results import Tag
from haqueue.config.fsync_policy import DURABLE, NEVER, FsyncPolicy
from haqueue.replication.journal import DurableJournal, frame
from haqueue.config.replication import ReplicationSettings
from haqueue.replication.replica import open_replica
from tests.support.power_loss import PowerLoss
from tests.support.ticked import free_ports
from tests.support.ticked_on_disk import cluster_on_disk

STAMP = 1_700_000_000_000
POLICIES = [pytest.param(FsyncPolicy(60_000), id="f60000"), pytest.param(NEVER, id="F")]


def reserve(n: int = 1) -> bytes:
    return C.encode_batch(STAMP, [(C.ID_RESERVE, "counter", "orders", n)])


def values(applied) -> range:
    tag, first, count, step, _now = applied.results[0]
    assert tag == Tag.RESERVED
    return range(first, first + count * step, step)


# ------------------------------------------------------------------ a lone node
def lone_reserves(config: ReplicationSettings, entries: int) -> list[int]:
    """Open the lone node, reserve one id per entry, and let the power go before it stops."""
    handed_out: list[int] = []

    async def main() -> None:
        replica = open_replica(config, on_role_change=lambda role, term: None, on_fatal=lambda message: None)
        replica.start()
        for _ in range(entries):
            replica.submit(reserve(), lambda applied: handed_out.extend(values(applied)))
        await asyncio.sleep(0)
        loss.crash()
        replica.stop()

    with PowerLoss(config.data_dir) as loss:
        asyncio.run(main())
        loss.restore()
    return handed_out


@pytest.mark.parametrize("policy", POLICIES)
def test_a_lone_node_never_hands_out_an_id_again_after_a_power_loss(tmp_path, policy):
    config = ReplicationSettings("127.0.0.1:0", [], data_dir=str(tmp_path), policy=policy)
    before = lone_reserves(config, 5)
    after = lone_reserves(config, 1)
    assert before == [0, 1, 2, 3, 4]
    assert after[0] > max(before)


def test_a_queue_entry_under_the_periodic_policy_is_not_synced_at_once(tmp_path):
    # The counterpart: only entries that reserve ids are owed to the disk.
    journal = DurableJournal(str(tmp_path / "j"), FsyncPolicy(60_000))
    syncs = journal.syncs
    journal.add(frame(C.encode_batch(STAMP, [(C.PUT, "t", 14, 0, 1, b"K\x0e")])), 1, 1)
    journal.sync()
    assert journal.dirty and journal.syncs == syncs
    journal._destroy()


@pytest.mark.parametrize("policy", [NEVER, FsyncPolicy(60_000)], ids=["F", "f60000"])
def test_term_and_vote_survive_a_power_loss_whatever_the_policy(tmp_path, policy):
    with PowerLoss(str(tmp_path)) as loss:
        journal = DurableJournal(str(tmp_path / "raft.journal"), policy)
        journal.setCurrentTerm(7, "127.0.0.1:1")
        loss.crash()
        journal._destroy()
        loss.restore()
    reopened = DurableJournal(str(tmp_path / "raft.journal"), NEVER)
    assert (reopened.getCurrentTerm(), reopened.getVotedForNodeId()) == (7, "127.0.0.1:1")


# ------------------------------------------------------------------ a cluster
@pytest.mark.parametrize("policy", POLICIES)
def test_a_cluster_never_hands_out_an_id_again_after_every_node_loses_power(tmp_path, policy):
    addresses = [f"127.0.0.1:{p}" for p in free_ports(3)]
    for n in range(3):
        (tmp_path / f"n{n}").mkdir()
    handed_out: list[int] = []
    with ExitStack() as stack:
        losses = [stack.enter_context(PowerLoss(str(tmp_path / f"n{n}"))) for n in range(3)]
        with cluster_on_disk(tmp_path, addresses, policy) as cluster:
            for _ in range(3):
                applied, error = cluster.commit(cluster.leader(), reserve(2))
                handed_out.extend(values(applied))
            for loss in losses:
                loss.crash()
        for loss in losses:
            loss.restore()
    with cluster_on_disk(tmp_path, addresses, policy) as cluster:
        applied, _ = cluster.commit(cluster.leader(), reserve(1), seconds=5.0)
    assert handed_out == [0, 1, 2, 3, 4, 5]
    assert values(applied)[0] > max(handed_out)


def test_a_new_leaders_no_op_is_on_its_disk_before_it_counts_towards_a_commit(tmp_path):
    # pysyncobj counts the leader's own copy of an entry towards a commit without
    # asking whether it is on disk. Here the leader's background fsync never ends
    # (a slow disk): the no-op it appends on election must be on its disk anyway
    # by the time its commit is counted.
    addresses = [f"127.0.0.1:{p}" for p in free_ports(3)]
    for n in range(3):
        (tmp_path / f"n{n}").mkdir()

    def slow_disk(node):
        node.journal.sync_in_background = lambda: None

    with cluster_on_disk(tmp_path, addresses, DURABLE, prepare=slow_disk) as cluster:
        leader = cluster.leader()
        journal = leader.journal
        noop = next(idx for command, idx, term in journal.entries
                    if term == leader.raftCurrentTerm and command == b"\x01")
        cluster.run_until(lambda: leader.raftCommitIndex >= noop, seconds=1.0, what="the no-op committed")
        assert journal.synced_end >= journal.end_of_index(noop)


def test_a_snapshot_is_written_synced_under_F_since_it_holds_the_counters(tmp_path, monkeypatch):
    # Once the journal prefix is dropped, the snapshot is the only copy of the
    # reservations in it: under -F it must be synced too (in the forked writer,
    # which PowerLoss cannot watch, so the writer's instruction is checked).
    from haqueue.replication import snapshot
    from haqueue.replication.lone import LoneReplica

    asked: list = []
    real = snapshot.write_in_child

    def write_in_child(path, state, raft_data, sync, **kwargs):
        asked.append(sync)
        return real(path, state, raft_data, sync, **kwargs)

    monkeypatch.setattr(snapshot, "write_in_child", write_in_child)
    # A journal of one byte is due to be folded as soon as it holds two entries.
    config = ReplicationSettings("127.0.0.1:0", [], data_dir=str(tmp_path), policy=NEVER, journal_limit=1)

    async def main() -> None:
        replica = LoneReplica(config, on_role_change=lambda role, term: None, on_fatal=lambda message: None)
        replica.start()
        for _ in range(3):
            replica.submit(reserve(), lambda applied: None)
        replica.stop()

    asyncio.run(main())
    assert asked and all(asked)
