"""A snapshot received from the leader is on disk before it replaces this node's own (docs/pysyncobj.md D25).

pysyncobj writes the chunks it receives to `<snapshot>.1.tmp` and renames that
over the snapshot once the last chunk is in; the journal is cleared right after.
Renamed before its bytes were synced, a power loss could leave an empty snapshot
and an empty journal. Here pysyncobj's own Serializer receives a transfer into
real files, and the order of fsyncs and the rename is recorded.
"""

from __future__ import annotations

import os

from haqueue.replication import raft_node  # noqa: F401  (installs the patches)
from pysyncobj.serializer import Serializer


def test_a_received_snapshot_is_synced_before_it_is_renamed_and_the_rename_after(tmp_path, monkeypatch):
    target = tmp_path / "raft.snapshot"
    target.write_bytes(b"the old snapshot")
    events: list = []
    real_fsync, real_rename = os.fsync, os.rename

    def fsync(fd):
        real_fsync(fd)
        events.append(("fsync", os.path.basename(os.readlink(f"/proc/self/fd/{fd}"))))

    def rename(source, destination):
        real_rename(source, destination)
        events.append(("rename", os.path.basename(source), os.path.basename(destination)))

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "rename", rename)
    serializer = Serializer(str(target), 1 << 20, False, None, None, None)
    assert not serializer.setTransmissionData((b"first half, ", True, False))
    assert serializer.setTransmissionData((b"second half", False, True))
    monkeypatch.undo()
    assert target.read_bytes() == b"first half, second half"
    assert events == [("fsync", "raft.snapshot.1.tmp"), ("rename", "raft.snapshot.1.tmp", "raft.snapshot"),
                      ("fsync", tmp_path.name)]
