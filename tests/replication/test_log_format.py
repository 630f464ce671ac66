"""Nodes refuse log entries of another log format version, with a clear message."""

from __future__ import annotations

import pickle
import subprocess
import sys

import haqueue.replication.pysyncobj_patches  # noqa: F401  (pysyncobj imported safely first)
import pysyncobj.pickle

from haqueue.core import commands as C
from haqueue.config.fsync_policy import DURABLE
from haqueue.replication.journal import DurableJournal
from tests.support.servers import RawConn, start_haqueue

REGULAR = b"\x00"  # pysyncobj's entry type byte for a replicated method call


def _append_foreign_entry(journal_path: str, version: int) -> None:
    journal = DurableJournal(journal_path, DURABLE)
    _, last_idx, last_term = journal.entries[-1]
    batch = pickle.dumps((version, 0, [(C.TICK,)]), protocol=5)
    # haqueue has exactly one replicated method, so its id is always 0.
    journal.add(REGULAR + pysyncobj.pickle.dumps((0, (batch,))), last_idx + 1, last_term)
    journal.force_sync()
    journal._destroy()


def test_a_node_refuses_an_entry_of_another_log_format_version(tmp_path):
    data = tmp_path / "data"
    srv = start_haqueue("-f0", data_dir=str(data))
    try:
        with RawConn(srv.host, srv.port) as conn:
            conn.send(b"put 0 0 60 1\r\nx\r\n")
            assert conn.recv_until(1).startswith(b"INSERTED")
    finally:
        srv.stop()
    _append_foreign_entry(str(data / "raft.journal"), C.LOG_FORMAT_VERSION + 1)
    result = subprocess.run(
        [sys.executable, "-m", "haqueue", "serve", "-l", "127.0.0.1", "-p", "0", "-b", str(data)],
        capture_output=True, text=True, timeout=20,
    )
    assert result.returncode == 1
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(f"haqueue: cannot apply a log entry: log format version {C.LOG_FORMAT_VERSION + 1}, "
                           f"this node speaks {C.LOG_FORMAT_VERSION}")


def test_the_one_replicated_method_has_id_zero():
    # pysyncobj numbers replicated methods by sorted name: with one method the
    # number cannot shift when code changes, which the journal format relies on.
    from haqueue.replication.raft_node import ReplicatedQueue

    names = [m for m in dir(ReplicatedQueue) if getattr(getattr(ReplicatedQueue, m), "replicated", False)
             and not m.endswith("_v0")]
    assert names == ["apply_entry"]


def test_every_node_logs_an_entry_framed_as_the_lone_node_and_the_tools_frame_it():
    # A replicated node logs journal.frame(entry) (pickle protocol 5), not what
    # pysyncobj's decorator would (protocol 2); the lone node, replay and recover
    # read one framing, and every follower applies it.
    from haqueue.replication.journal import frame, unframe
    from tests.support.ticked import ticked_cluster

    entry = C.encode_batch(1_000, [(C.PUT, "default", 0, 0, 60_000, b"framed")])
    with ticked_cluster() as cluster:
        leader = cluster.leader()
        applied, error = cluster.commit(leader, entry)
        assert applied is not None, error
        cluster.run_until(cluster.caught_up, seconds=0.5, what="every node applied it")
        for node in cluster.nodes:
            command = node._SyncObj__raftLog[-1][0]
            assert command == frame(entry) and unframe(command) == entry
            assert node.state.tube("default").ready_count == 1
