"""A follower's own snapshot writer never renames an older snapshot over the one its leader sent.

Found by the storage campaign (2026-11-28, seed 31): a follower forked its writer
for entry 5631, then received the leader's snapshot for a later entry, which
pysyncobj renamed into place and cut the journal to; the writer, finishing after,
renamed its older snapshot over it. The node ran on, and after its next crash
refused to start: "the snapshot ends at entry 5631 but the journal starts at
entry 5849". Now the last chunk of the leader's snapshot kills and reaps a writer
still running first (raft_snapshots.superseded). Here the follower's writer is
held at a gate the test opens only after the leader's snapshot is in place, so
without that kill it would rename its older file last, every time.
"""

from __future__ import annotations

import os

from haqueue.core import commands as C
from haqueue.replication import snapshot, snapshot_writer
from haqueue.replication.journal import write_atomically
from tests.replication.test_snapshot_writer import LIMIT, _fill
from tests.support.ticked import drop_messages, heal, raft_node, ticked_cluster


def test_the_leaders_snapshot_kills_a_writer_of_the_followers_own_that_is_still_running(tmp_path, monkeypatch):
    gate_read, gate_write = os.pipe()
    real_write_in_child = snapshot.write_in_child
    held: list[int] = []

    with ticked_cluster(journal_limit=LIMIT, data_root=str(tmp_path)) as cluster:
        leader = cluster.leader()
        follower, other = cluster.followers()
        other.journal_limit = None

        def write_in_child(path, state, raft_data, sync, errors_fd=-1):
            if path != follower.dump_path or held:
                return real_write_in_child(path, state, raft_data, sync, errors_fd)
            body = snapshot.encode(state, raft_data)  # the follower's state as of now
            pid = os.fork()
            if pid == 0:  # a writer that renames only once the gate opens
                try:
                    os.read(gate_read, 1)
                    write_atomically(path, body, sync=sync, tmp=path + ".writing")
                finally:
                    os._exit(0)
            held.append(pid)
            return pid

        monkeypatch.setattr(snapshot_writer.snapshot, "write_in_child", write_in_child)
        _fill(cluster, 4)  # past the limit on the follower too: its held writer starts
        cluster.run_until(lambda: held and follower.snapshot_writer.pid == held[0], seconds=2,
                          what="the follower's own writer running")
        held_index = follower.snapshot_writer.covers[0][1]

        cut = drop_messages([follower], [leader, other]) + drop_messages([leader, other], [follower])
        follower_last = follower._SyncObj__getCurrentLogIndex()
        first = 4
        while leader._SyncObj__raftLog[0][1] <= follower_last:  # until it compacted past the follower's log
            assert first < 100, "the leader never compacted past the follower's log"
            _commit(cluster, 4, first=first)
            first += 4
            if leader.snapshot_writer.pid:  # a snapshot under way: let it finish and compact
                cluster.until_snapshots(leader, leader.observations.snapshots + 1, seconds=5)
            cluster.run(seconds=0.05)
        heal(cut)
        cluster.run_until(lambda: follower.raftLastApplied > held_index + 4 and not follower.snapshots.loading,
                          seconds=5, what="the follower installed the leader's snapshot")
        os.write(gate_write, b"go")  # a writer still alive would rename its older snapshot now
        assert follower.snapshot_writer.pid == 0
        cluster.run(seconds=0.5)
        records, raft_data = snapshot.read_records(follower.dump_path)
        assert raft_data[0][1] > held_index  # the leader's, not the follower's older one

        # And the node starts again on its files (the campaign's node refused to).
        address = follower.selfNode.address
        data_dir = os.path.dirname(follower.dump_path)
        follower.stop()
        again = raft_node(address, [leader.selfNode.address, other.selfNode.address], data_dir=data_dir,
                          secret="s", timing=cluster.timing, journal_limit=LIMIT)
        again.transport.tryGetReady()
        cluster.nodes[cluster.nodes.index(follower)] = again
        assert again.fatal_error is None
        cluster.run_until(lambda: again.state.digest() == leader.state.digest(), seconds=5,
                          what="the restarted follower converged")
    os.close(gate_read)
    os.close(gate_write)


def _commit(cluster, entries: int, first: int) -> None:
    """_fill's entries, committed by the leader and the one follower it still hears."""
    leader = cluster.leader()
    outcomes = [cluster.submit(leader, C.encode_batch(1_000 + i, [(C.PUT, "default", 0, 0, 60_000,
                                                                   bytes([i % 256, k]) * 1024) for k in range(4)]))
                for i in range(first, first + entries)]
    cluster.run_until(lambda: all(outcomes), seconds=2, what="every entry applied")
