"""The snapshot writer (haqueue/replication/snapshot_writer.py): fork failures, backoff, events.

Issue 23, B1 and B2. The failures are real: a fork that fails (os.fork replaced
by one that raises EAGAIN, what fork(2) answers at RLIMIT_NPROC; a real one
would need the machine starved) and a writer that cannot write (a directory
where its temporary file goes: open() fails with EISDIR in the child). The
cluster is three real ReplicatedQueue nodes ticked by hand in virtual time
(tests/support/ticked.py); a forked writer runs in real time, so the tests
wait for its exit (waitid without reaping it) with the virtual clock stopped.
"""

from __future__ import annotations

import errno
import os

import pytest

from haqueue import events
from haqueue.core import commands as C
from haqueue.core.state import QueueState
from haqueue.replication import snapshot_writer
from haqueue.replication.observed import RaftObservations
from haqueue.replication.snapshot_writer import SnapshotWriter
from tests.support.ticked import TickedCluster, VirtualClock, ticked_cluster

LIMIT = 16 * 1024


def _fill(cluster: TickedCluster, entries: int, first: int = 0) -> None:
    """`entries` entries of four 2 KiB puts each, committed and applied everywhere."""
    leader = cluster.leader()
    outcomes = []
    for i in range(first, first + entries):
        puts = [(C.PUT, "default", 0, 0, 60_000, bytes([i % 256, k]) * 1024) for k in range(4)]
        outcomes.append(cluster.submit(leader, C.encode_batch(1_000 + i, puts)))
    cluster.run_until(lambda: all(outcomes), seconds=1, what="every entry applied")
    cluster.run_until(cluster.caught_up, seconds=1, what="every node applying them")


def _record_forks(monkeypatch, cluster: TickedCluster, fail: list[bool],
                  wait_for_exit: bool = False) -> list[tuple[float, int]]:
    """Replace os.fork: raises EAGAIN while fail[0], else forks; returns the list it
    appends (virtual time, pid or 0 for a failed fork) to, in the parent.
    `wait_for_exit`: the parent waits (without reaping) until the child has exited, so
    no virtual time passes while it runs in real time."""
    real_fork = os.fork
    forks: list[tuple[float, int]] = []

    def fork() -> int:
        if fail[0]:
            forks.append((cluster.clock.now, 0))
            raise OSError(errno.EAGAIN, os.strerror(errno.EAGAIN))
        pid = real_fork()
        if pid:
            forks.append((cluster.clock.now, pid))
            if wait_for_exit:
                os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
        return pid

    monkeypatch.setattr(os, "fork", fork)
    return forks


def test_a_failed_fork_is_retried_and_a_wiped_follower_still_gets_a_snapshot(monkeypatch):
    # pysyncobj's serializer stayed "busy" for good after a fork that raised:
    # no compaction again, and no snapshot sent to a follower that needs one.
    events.clear()
    with ticked_cluster(journal_limit=LIMIT) as cluster:
        fail = [False]
        forks = _record_forks(monkeypatch, cluster, fail)
        leader = cluster.leader()
        for node in cluster.followers():
            node.journal_limit = None  # only the leader snapshots: the failed fork is its
        _fill(cluster, 4)  # 32 KiB logged: twice the limit
        cluster.until_snapshots(leader, 1)
        compacted_from = leader._SyncObj__raftLog[0][1]

        fail[0] = True  # ENOMEM/EAGAIN from now on
        before = len(forks)
        _fill(cluster, 4, first=4)
        cluster.run_until(lambda: any(pid == 0 for _, pid in forks[before:]), seconds=1,
                          what="a snapshot attempted while forks fail")
        fail[0] = False

        follower = cluster.followers()[0]
        wiped = cluster.restart(follower)  # a new, empty node at its address: it needs the snapshot
        cluster.run_until(lambda: len(wiped.state.jobs) == len(leader.state.jobs) == 32, seconds=5,
                          what="the wiped follower restored from a snapshot and caught up")
        cluster.until_snapshots(leader, 2, seconds=5)  # compaction resumed
        assert leader._SyncObj__raftLog[0][1] > compacted_from
    failed = [e for e in events.recent() if e["event"] == "snapshot_failed"]
    assert failed and failed[0]["reason"] == "cannot fork the writer: Resource temporarily unavailable"
    assert failed[0]["retry_in"] == snapshot_writer.BACKOFF_FIRST


@pytest.mark.parametrize("on_disk", [True, False], ids=["journal", "in-memory"])
def test_a_failing_writer_is_retried_after_one_two_four_eight_seconds_not_at_every_tick(monkeypatch, tmp_path,
                                                                                        on_disk):
    # On disk the journal stays due after a failure, and a writer was forked at
    # every tick (about 19 a second, idle); in memory a failure was never retried.
    events.clear()
    with ticked_cluster(journal_limit=LIMIT, data_root=str(tmp_path) if on_disk else None) as cluster:
        leader = cluster.leader()
        for node in cluster.followers():
            node.journal_limit = None  # only the leader snapshots: its forks alone are counted
        os.mkdir(leader.dump_path + ".writing")  # the writer's open() fails: EISDIR, at every attempt
        # Each writer has exited before virtual time moves on: its failure is noticed at
        # the next tick, however long it took in real time.
        forks = _record_forks(monkeypatch, cluster, [False], wait_for_exit=True)
        _fill(cluster, 4)  # past the limit; then idle
        for attempt in range(5):
            cluster.run_until(lambda: len(forks) > attempt, seconds=20, what=f"attempt {attempt + 1}")
        gaps = [later[0] - earlier[0] for earlier, later in zip(forks, forks[1:])]
        # Timed from when each failure was noticed: a tick or so after the writer's exit.
        assert all(wait <= gap <= wait + 0.1 for gap, wait in zip(gaps, [1, 2, 4, 8])), gaps
        assert leader.observations.snapshot_failures >= 4 and leader.observations.snapshots == 0
    reasons = {e["reason"] for e in events.recent() if e["event"] == "snapshot_failed"}
    assert reasons == {f"cannot write the snapshot ({leader.dump_path}.writing): Is a directory"}
    assert [e["retry_in"] for e in events.recent() if e["event"] == "snapshot_failed"][:4] == [1, 2, 4, 8]


def test_the_backoff_doubles_up_to_a_minute_and_a_snapshot_written_resets_it(tmp_path):
    clock = VirtualClock(100.0)
    path = str(tmp_path / "raft.snapshot")
    writer = SnapshotWriter(path, RaftObservations(), sync=False, clock=clock)
    raft_data = (("e2", 2, 1), ("e1", 1, 1), ())
    os.mkdir(path + ".writing")
    waits = []
    for _ in range(8):
        assert writer.may_start()
        assert writer.start(QueueState(), raft_data)
        assert not writer.may_start()  # one writer at a time
        assert writer.poll(block=True) == snapshot_writer.FAILED
        waits.append(writer.retry_at - clock.now)
        assert not writer.may_start()
        clock.now = writer.retry_at
    assert waits == [1, 2, 4, 8, 16, 32, 60, 60]
    os.rmdir(path + ".writing")
    assert writer.start(QueueState(), raft_data)
    assert writer.poll(block=True) == snapshot_writer.DONE
    assert writer.poll() is None  # reported once
    assert writer.failures == 0 and writer.may_start()
    assert writer.observations.snapshots == 1 and writer.observations.last_snapshot_bytes == os.path.getsize(path)


def test_a_failed_fork_is_reported_once_as_failed_then_backs_off(tmp_path, monkeypatch):
    clock = VirtualClock(100.0)
    writer = SnapshotWriter(str(tmp_path / "raft.snapshot"), RaftObservations(), sync=False, clock=clock)

    def no_fork() -> int:
        raise OSError(errno.ENOMEM, os.strerror(errno.ENOMEM))

    monkeypatch.setattr(os, "fork", no_fork)
    assert not writer.start(QueueState(), (("e2", 2, 1), ("e1", 1, 1), ()))
    assert writer.pid == 0 and not writer.may_start()
    assert writer.poll() == snapshot_writer.FAILED  # what pysyncobj's serializer must hear
    assert writer.poll() is None
    clock.now += snapshot_writer.BACKOFF_FIRST
    assert writer.may_start()
