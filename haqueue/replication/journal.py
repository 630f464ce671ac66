"""The Raft journal on disk, made durable: a pysyncobj Journal that fsyncs.

pysyncobj 0.3.17's FileJournal writes entries into an mmap that is never
synced, and its term/vote metadata without fsync; a crash can lose entries a
follower already acknowledged, or a vote it already cast. This journal keeps
the same interface (add, clear, deleteEntriesFrom, deleteEntriesTo, indexing,
term and vote, commit index) with an append-only file written by os.write and
synced according to the node's FsyncPolicy. `sync()` is called by the
transport before an acknowledgement leaves the node and by the node before a
committed entry is applied (see raft_node.py), which gives design.md I1/I7.

File format (little endian), a checklist for changing it:
    header:  b"HAQJRNL1"
    record:  u32 length of payload | u32 crc32 of payload | payload
    payload: u64 index | u64 term | command bytes
1. A torn or corrupt tail (short record, bad crc) is cut off at open: it was
   never acknowledged, because acknowledgement waits for the fsync.
2. Changing the layout means a new magic, and code that reads the old one.

Metadata (current term, vote, commit index) lives in `<journal>.meta`, written
to a temporary file, fsynced and renamed, so a vote is on disk before the
message that reveals it is sent (Raft §5.2).
"""

from __future__ import annotations

import logging
import os
import pickle
import struct
import time
import zlib

from pysyncobj.journal import Journal

from haqueue.replication.fsync_policy import FsyncPolicy

log = logging.getLogger(__name__)

MAGIC = b"HAQJRNL1"
_RECORD_HEAD = struct.Struct("<II")
_PAYLOAD_HEAD = struct.Struct("<QQ")


def fsync_dir(path: str) -> None:
    fd = os.open(os.path.dirname(os.path.abspath(path)) or ".", os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomically(path: str, data: bytes, sync: bool) -> None:
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        if sync:
            os.fsync(f.fileno())
    os.replace(tmp, path)
    if sync:
        fsync_dir(path)


class DurableJournal(Journal):
    """An append-only, checksummed, fsynced Raft journal."""

    def __init__(self, path: str, policy: FsyncPolicy) -> None:
        self.path = path
        self.policy = policy
        self.entries: list[tuple[bytes, int, int]] = []
        self.offsets: list[int] = []  # file offset of each entry's record
        self.meta_path = path + ".meta"
        self.meta = self._read_meta()
        self.meta_dirty = False
        self.dirty = False  # written but not yet fsynced
        self.last_sync = time.monotonic()
        self.syncs = 0
        self.records_written = 0
        self._open()

    # ------------------------------------------------------------------ file
    def _open(self) -> None:
        if not os.path.exists(self.path):
            write_atomically(self.path, MAGIC, sync=not self.policy.never)
        self.fd = os.open(self.path, os.O_RDWR)
        data = b""
        with open(self.path, "rb") as f:
            data = f.read()
        if data[: len(MAGIC)] != MAGIC:
            raise RuntimeError(f"{self.path}: not a haqueue journal (bad magic)")
        pos = len(MAGIC)
        end = len(data)
        while pos + _RECORD_HEAD.size <= end:
            length, crc = _RECORD_HEAD.unpack_from(data, pos)
            start = pos + _RECORD_HEAD.size
            if start + length > end:
                break
            payload = data[start : start + length]
            if zlib.crc32(payload) != crc or length < _PAYLOAD_HEAD.size:
                break
            idx, term = _PAYLOAD_HEAD.unpack_from(payload, 0)
            self.entries.append((payload[_PAYLOAD_HEAD.size :], idx, term))
            self.offsets.append(pos)
            pos = start + length
        if pos != end:
            log.warning("%s: cutting a torn tail of %d bytes at offset %d", self.path, end - pos, pos)
            os.ftruncate(self.fd, pos)
            os.fsync(self.fd)
        self.end = pos
        os.lseek(self.fd, pos, os.SEEK_SET)

    def _read_meta(self) -> dict:
        try:
            with open(self.meta_path, "rb") as f:
                return pickle.loads(f.read())
        except FileNotFoundError:
            return {}

    def _store_meta(self, sync: bool) -> None:
        write_atomically(self.meta_path, pickle.dumps(self.meta, protocol=5), sync=sync)
        self.meta_dirty = False

    def sync(self) -> None:
        """fsync what was written, if the policy wants it now."""
        if not self.dirty or self.policy.never:
            return
        if not self.policy.durable:
            if (time.monotonic() - self.last_sync) * 1000 < self.policy.interval_ms:
                return
        self.force_sync()

    def force_sync(self) -> None:
        if self.dirty:
            os.fdatasync(self.fd)
            self.syncs += 1
            self.dirty = False
        self.last_sync = time.monotonic()

    # ------------------------------------------------------- Journal interface
    def add(self, command, idx, term):
        command = bytes(command)
        payload = _PAYLOAD_HEAD.pack(idx, term) + command
        record = _RECORD_HEAD.pack(len(payload), zlib.crc32(payload)) + payload
        os.write(self.fd, record)
        self.entries.append((command, idx, term))
        self.offsets.append(self.end)
        self.end += len(record)
        self.dirty = True
        self.records_written += 1

    def clear(self):
        self.entries = []
        self.offsets = []
        os.ftruncate(self.fd, len(MAGIC))
        self.end = len(MAGIC)
        os.lseek(self.fd, self.end, os.SEEK_SET)
        self.dirty = True

    def deleteEntriesFrom(self, entryFrom):
        # Raft truncates a conflicting, never-committed suffix.
        if entryFrom >= len(self.entries):
            return
        self.end = self.offsets[entryFrom]
        del self.entries[entryFrom:]
        del self.offsets[entryFrom:]
        os.ftruncate(self.fd, self.end)
        os.lseek(self.fd, self.end, os.SEEK_SET)
        self.dirty = True
        # A truncation must reach the disk before anything after it is acked.
        if not self.policy.never:
            self.force_sync()

    def deleteEntriesTo(self, entryTo):
        # After a snapshot: rewrite the kept suffix into a new file and swap it
        # in atomically, so a crash leaves either the old or the new journal.
        kept = self.entries[entryTo:]
        tmp = self.path + ".compact"
        with open(tmp, "wb") as f:
            f.write(MAGIC)
            offsets = []
            pos = len(MAGIC)
            for command, idx, term in kept:
                payload = _PAYLOAD_HEAD.pack(idx, term) + command
                record = _RECORD_HEAD.pack(len(payload), zlib.crc32(payload)) + payload
                f.write(record)
                offsets.append(pos)
                pos += len(record)
            f.flush()
            if not self.policy.never:
                os.fsync(f.fileno())
        os.replace(tmp, self.path)
        if not self.policy.never:
            fsync_dir(self.path)
        os.close(self.fd)
        self.fd = os.open(self.path, os.O_RDWR)
        os.lseek(self.fd, pos, os.SEEK_SET)
        self.entries = kept
        self.offsets = offsets
        self.end = pos
        self.dirty = False

    def __getitem__(self, item):
        return self.entries[item]

    def __len__(self):
        return len(self.entries)

    def _destroy(self):
        try:
            if not self.policy.never:
                self.force_sync()
            if self.meta_dirty:
                self._store_meta(sync=not self.policy.never)
        finally:
            os.close(self.fd)

    def setRaftCommitIndex(self, raftCommitIndex):
        # The commit index need not be durable for safety (a restarted node
        # relearns it); it is stored lazily, once a second.
        if self.meta.get("raftCommitIndex") != raftCommitIndex:
            self.meta["raftCommitIndex"] = raftCommitIndex
            self.meta_dirty = True

    def getRaftCommitIndex(self):
        return self.meta.get("raftCommitIndex", 1)

    def setCurrentTerm(self, term, votedForNodeId):
        self.meta["currentTerm"] = term
        self.meta["votedForNodeId"] = votedForNodeId
        self._store_meta(sync=not self.policy.never)

    def getCurrentTerm(self):
        return self.meta.get("currentTerm", 0)

    def getVotedForNodeId(self):
        return self.meta.get("votedForNodeId")

    def onOneSecondTimer(self):
        if self.meta_dirty:
            self._store_meta(sync=not self.policy.never)
        if not self.policy.durable:
            self.sync()
