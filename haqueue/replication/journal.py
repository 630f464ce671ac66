"""The Raft journal on disk, made durable: a pysyncobj Journal that fsyncs.

pysyncobj 0.3.17's FileJournal writes entries into an mmap that is never
synced, and its term/vote metadata without fsync; a crash can lose entries a
follower already acknowledged, or a vote it already cast. This journal keeps
the same interface (add, clear, deleteEntriesFrom, deleteEntriesTo, indexing,
term and vote, commit index) with an append-only file written with pwrite and
synced according to the node's FsyncPolicy. `sync()` is called by the
transport before an acknowledgement leaves the node and by the node before a
committed entry is applied (see raft_node.py), which gives docs/design.md I1/I7.

File format (little endian), a checklist for changing it:
    header:  b"HAQJRNL1"
    record:  u32 length of payload | u32 crc32 of payload | payload
    payload: u64 index | u64 term | command bytes
    then zero bytes to the end of the file: room written ahead (below)
1. A torn or corrupt tail (short record, bad crc) is cut off at open: it was
   never acknowledged, because acknowledgement waits for the fsync. Zeros
   after the last record are not a tail: no record has length 0.
2. Changing the layout means a new magic, and code that reads the old one.

Room written ahead: records are written over zeros that are already part of
the file (PREALLOCATE bytes at a time, as beanstalkd fills its binlog files
with zeros). An append that grows the file makes its fdatasync also commit
the new size to the file system's own journal, a second flush per commit on
ext4 and XFS; an overwrite of written blocks needs only the data's. Real
zeros, not fallocate: fallocated extents are "unwritten", and the first
write into them is a metadata change as well. The room is small (a full disk
still stops the node within PREALLOCATE bytes of writes) and is written, and
synced, with the first record that does not fit.

Metadata (current term, vote, commit index) lives in `<journal>.meta`, written
to a temporary file, fsynced and renamed, so a vote is on disk before the
message that reveals it is sent (Raft §5.2). Whatever the policy says, `-F`
included: a vote forgotten in an OS crash lets a node vote twice in one term,
and two leaders of one term can both commit. Votes are rare (one write per
election), so this costs nothing in steady state. The commit index need not be
durable (a restarted node relearns it): it rides along when the term or vote
is stored and at a clean close, never on its own; storing it once a second
cost the event loop a rename and two fsyncs every second on a busy node.

Entries that must be durable whatever the policy: an entry reserving ids
(core/commands.reserves_ids) is synced before it is acknowledged, and before
a leader applies it (a follower applies what a majority holds, and hands out
nothing), even with `-f MS` or `-F`, since the values it hands out must never be handed
out again after a power loss (docs/id-service.md, "Durability"); and under
`-f0` the no-op a new leader appends is synced as it is written, because
pysyncobj counts the leader's own copy towards a commit without asking
whether it is on disk.

The leader syncs in the background (`sync_in_background`, one worker thread):
its own fsync then overlaps the followers' round trip without stopping the
event loop, where Raft ticks, from reading their acknowledgements, and applying an entry waits
only for the bytes of that entry (`sync(through=...)`), not for entries
appended since. A follower's acknowledgements wait for their bytes in the same
worker (`synced_through`, which waits at most a given time), so a slow disk
delays its answers but not its loop. Truncations wait for a background sync to finish first, so
`synced_end` never counts bytes of a file that was cut and written again.

Compaction after a snapshot (deleteEntriesTo) drops the covered entries from
memory at once and the file's prefix later: the worker copies the kept records
to `<journal>.compact` and syncs the copy while appends go on, and the loop, at
its next add (or its one-second timer), copies what was appended since and
renames the copy into place. Until then the file keeps the prefix, which is
consistent with the snapshot (snapshot.align_journal drops it at a restart).
Positions (end, offsets, synced_end, owed_end) are logical and never move; the
file offset of a position is position - base.

Failures are final. Any error writing, syncing, truncating or renaming the
journal (EIO, ENOSPC, a short write) poisons it: that call and every later
one raise JournalError naming the file and the error, and nothing after the
failure is ever claimed durable. Linux reports a writeback error to one
fdatasync only, so a sync that succeeds after a failed one proves nothing;
the node must stop (raft_node.py makes it fatal) and be restarted, which
reads back what really reached the disk. Likewise at open: a torn or corrupt
*tail* is cut (never acknowledged), but a bad record with intact records
after it is corruption of acknowledged history, and the journal refuses to
open rather than silently drop everything after it. Opening fsyncs once, so
a tail that a killed process left in the page cache is on disk before this
run acknowledges anything that builds on it.
"""

from __future__ import annotations

import errno
import logging
import os
import pickle
import struct
import threading
import time
import zlib
from array import array
from contextlib import contextmanager

from haqueue.config.fsync_policy import FsyncPolicy
from haqueue.core.commands import ID_RESERVE_MARK, reserves_ids
from haqueue.replication.observed import FsyncTimer

log = logging.getLogger(__name__)

MAGIC = b"HAQJRNL1"
CLOSE_COMPACTION_WAIT = 5.0  # seconds a clean close waits for a compaction under way
COMPACT_CHUNK = 1 << 20  # the worker's compaction copies this much between syncs it is asked for


# What a record's command holds: pysyncobj's framing of a replicated call, a type
# byte (REGULAR) then the pickle of (method id, args). haqueue has one replicated
# method, id 0 (docs/pysyncobj.md D1); a lone node frames its entries the same way, so
# every tool reads either node's journal.
REGULAR_COMMAND = 0  # pysyncobj's _COMMAND_TYPE.REGULAR
_REGULAR_BYTE = bytes([REGULAR_COMMAND])
_NO_OP_COMMAND = bytes([1])  # pysyncobj's _COMMAND_TYPE.NO_OP: a new leader's first entry


def frame(entry: bytes) -> bytes:
    """A journal command carrying `entry`, framed as pysyncobj frames apply_entry(entry)."""
    return _REGULAR_BYTE + pickle.dumps((0, (entry,)), protocol=pickle.HIGHEST_PROTOCOL)


def unframe(command: bytes) -> bytes | None:
    """The entry inside a journal command, or None for Raft's own (no-op) entries."""
    if command[0] != REGULAR_COMMAND:
        return None
    _method, args = pickle.loads(command[1:])
    return args[0]


def fatal_message(exc: "JournalError") -> str:
    """The one line a node stops with when its journal failed."""
    return f"{exc}; stopping: this node can no longer make its log durable"


class JournalError(Exception):
    """The journal cannot be trusted or written; the node must stop. str() is one line."""
PREALLOCATE = 64 << 10  # bytes of zeros written ahead of the records (see the docstring)
_RECORD_HEAD = struct.Struct("<II")
_PAYLOAD_HEAD = struct.Struct("<QQ")


def fsync_dir(path: str) -> None:
    fd = os.open(os.path.dirname(os.path.abspath(path)) or ".", os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_all(fd: int, data, offset: int | None = None) -> None:
    """Write every byte of `data` (at `offset`, with pwrite, if given): a short
    write is not an error by itself, but the bytes it left must not be lost."""
    view = memoryview(data)
    while view:
        n = os.write(fd, view) if offset is None else os.pwrite(fd, view, offset)
        if n <= 0:
            raise OSError(errno.EIO, "write wrote nothing")
        view = view[n:]
        if offset is not None:
            offset += n


def write_atomically(path: str, data: bytes, sync: bool, tmp: str | None = None) -> None:
    """Replace `path` with `data` so that a crash leaves the old or the new file.

    With `sync`, the data and then the rename are on disk before this returns.
    """
    tmp = tmp or path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        if sync:
            os.fsync(f.fileno())
    os.replace(tmp, path)
    if sync:
        fsync_dir(path)


def _copy_range(src: int, dst: int, offset: int, length: int) -> None:
    """Copy `length` bytes of `src` from `offset` to the end of `dst`, in the kernel when it can."""
    copied = 0
    try:
        while copied < length:
            n = os.copy_file_range(src, dst, length - copied, offset + copied)
            if n == 0:
                raise OSError("copy_file_range copied nothing")
            copied += n
    except OSError:
        # Older kernels, odd file systems: the same bytes through user space.
        while copied < length:
            chunk = os.pread(src, min(1 << 20, length - copied), offset + copied)
            if not chunk:
                raise
            write_all(dst, chunk)
            copied += len(chunk)


class DurableJournal:
    """An append-only, checksummed, fsynced Raft journal.

    It has the interface of pysyncobj's Journal (which is a bare interface:
    pysyncobj only calls the methods) without importing pysyncobj, so that a
    lone node (lone.py) never loads it."""

    def __init__(self, path: str, policy: FsyncPolicy) -> None:
        self.path = path
        self.policy = policy
        self.entries: list[tuple[bytes, int, int]] = []
        # The file offset of each entry's record: 8 bytes each in an array, where a
        # list of ints cost 36 (the in-memory journal was 1.76x its file, now 1.6x).
        self.offsets = array("Q")
        self.meta_path = path + ".meta"
        self.failed: str | None = None  # set once: the reason this journal is unusable
        self.meta = self._read_meta()
        self.meta_dirty = False
        self.last_sync = time.monotonic()
        self.syncs = 0
        self.records_written = 0
        self.fsync_timer = FsyncTimer()  # latency histogram and slow-fsync log (observed.py)
        # Background sync: the worker syncs up to `_sync_target` (a file offset)
        # and then raises `synced_end` to it; both guarded by `_sync_state`.
        self._sync_state = threading.Condition()
        self._sync_target: int | None = None
        self._sync_worker: threading.Thread | None = None
        self._closing = False
        # Compaction (deleteEntriesTo) runs in the same worker: see _compact_in_worker.
        self._compact_from: int | None = None  # requested: copy the records from here
        self._compact_busy = False  # the worker is copying
        self._sync_running = False  # the worker is syncing _sync_target
        self._compact_cancel = False
        self._compacted: tuple[int, int, int] | None = None  # a copy ready to swap in
        self._old_fd = -1  # the file the swap replaced, closed by the worker
        self._dropped: list[list] = []  # entries compaction dropped, freed by the worker
        self._dir_unsynced = False  # a swap's rename is not yet durable
        # Positions (end, offsets, synced_end, owed_end, allocated) are logical: they
        # never move when a compaction drops the file's prefix, so an acknowledgement
        # waiting for `synced_end` to pass a position is not lost to a swap. The file
        # offset of a position is position - base.
        self.base = 0
        self.fd = -1
        with self._io("open"):
            self._open()
        self.synced_end = self.end
        # The end of the last entry that must be synced whatever the policy
        # (the module docstring): sync() forces an fsync while it is unsynced.
        self.owed_end = 0

    @property
    def dirty(self) -> bool:
        """Bytes were written that are not yet known to be on disk."""
        return self.synced_end < self.end

    @property
    def file_bytes(self) -> int:
        """The journal file's size now (before a pending compaction, its old prefix too)."""
        return self.end - self.base

    @property
    def size(self) -> int:
        """The bytes the journal holds once compacted: its header and kept records.
        What the snapshot trigger weighs (snapshot.journal_due)."""
        first = self.offsets[0] if len(self.offsets) else self.end
        return len(MAGIC) + self.end - first

    # ------------------------------------------------------------- failure
    @contextmanager
    def _io(self, operation: str, path: str | None = None):
        """Run file I/O; an OSError poisons the journal (see the module docstring)."""
        self._check()
        try:
            yield
        except OSError as exc:
            raise self._fail(operation, exc, path) from exc

    def _fail(self, operation: str, exc: OSError, path: str | None = None) -> JournalError:
        if self.failed is None:
            reason = exc.strerror or str(exc)
            code = f"{errno.errorcode.get(exc.errno, exc.errno)}: " if exc.errno else ""
            self.failed = f"journal {path or self.path}: {operation} failed: {code}{reason}"
        return JournalError(self.failed)

    def _check(self) -> None:
        if self.failed is not None:
            raise JournalError(self.failed)

    # ------------------------------------------------------------------ file
    def _open(self) -> None:
        if not os.path.exists(self.path):
            # Synced even with -F, once per data directory: the file must outlive a
            # power loss for the entries owed to the disk (ids) to be in it.
            write_atomically(self.path, MAGIC, sync=True)
        self.fd = os.open(self.path, os.O_RDWR)
        with open(self.path, "rb") as f:
            data = f.read()
        if data[: len(MAGIC)] != MAGIC:
            raise JournalError(f"journal {self.path}: not a haqueue journal (bad magic)")
        pos = len(MAGIC)
        end = len(data)
        while pos < end:
            record = _read_record(data, pos)
            if record is None:
                break
            payload, next_pos = record
            idx, term = _PAYLOAD_HEAD.unpack_from(payload, 0)
            self.entries.append((payload[_PAYLOAD_HEAD.size :], idx, term))
            self.offsets.append(pos)
            pos = next_pos
        self.allocated = end
        if pos != end and data.count(0, pos) == end - pos:
            end = pos  # the room written ahead, no torn tail
        if pos != end:
            later = _find_later_record(data, pos, self.entries[-1][1] if self.entries else 0)
            if later is not None:
                raise JournalError(
                    f"journal {self.path}: corrupt record at offset {pos} with intact entries after it "
                    f"(entry {later[0]} at offset {later[1]}); refusing to drop acknowledged "
                    f"history. A cluster node can be restored by moving its data directory away "
                    f"(it catches up from the leader)")
            log.warning("%s: cutting a torn tail of %d bytes at offset %d", self.path, end - pos, pos)
            os.ftruncate(self.fd, pos)
            self.allocated = pos
        self.end = pos
        os.lseek(self.fd, pos, os.SEEK_SET)
        if not self.policy.never:
            # A killed process leaves its unsynced tail in the page cache, where
            # this run would read it back and treat it as durable (an entry
            # received again would be acknowledged on the strength of it).
            os.fdatasync(self.fd)
            self.syncs += 1

    def _read_meta(self) -> dict:
        try:
            with open(self.meta_path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return {}
        except OSError as exc:
            raise self._fail("reading metadata", exc, self.meta_path) from exc
        try:
            return pickle.loads(data)
        except Exception as exc:
            raise JournalError(f"journal metadata {self.meta_path}: unreadable ({exc}); refusing to start "
                               f"without the stored term and vote") from exc

    def _store_meta(self, sync: bool) -> None:
        with self._io("storing term and vote", self.meta_path):
            write_atomically(self.meta_path, pickle.dumps(self.meta, protocol=5), sync=sync)
        self.meta_dirty = False

    def sync(self, through: int | None = None) -> None:
        """fsync, if the policy wants it now, so that the file is durable up to
        offset `through` (default: everything written)."""
        self._check()
        target = self.end if through is None else through
        if self.synced_end >= target:
            return
        owed = self.synced_end < min(target, self.owed_end)
        if self.policy.never and not owed:
            return
        if not self.policy.durable and not owed:
            if (time.monotonic() - self.last_sync) * 1000 < self.policy.interval_ms:
                return
        self._wait_for_background()
        if self.synced_end < target:
            self.force_sync()

    def force_sync(self) -> None:
        self._wait_for_background()
        if self.dirty:
            target = self.end
            with self._io("fdatasync"):
                self._sync_swap_rename()
                self._fdatasync(self.fd)
            self.syncs += 1
            self.synced_end = max(self.synced_end, target)
        self.last_sync = time.monotonic()

    def _sync_swap_rename(self) -> None:
        """Make the last compaction's rename durable, if it is not yet: bytes written
        to the new file count as synced only once its name is (a power loss would
        bring the old file back without them)."""
        if self._dir_unsynced:
            fsync_dir(self.path)
            self._dir_unsynced = False

    def _fdatasync(self, fd: int) -> None:
        started = time.monotonic()
        os.fdatasync(fd)
        self.fsync_timer.observe(time.monotonic() - started, self.path)

    def end_of_index(self, idx: int) -> int:
        """The file offset just past Raft entry `idx` (the end, if unknown)."""
        if self.entries:
            position = idx - self.entries[0][1]
            if 0 <= position < len(self.offsets) - 1:
                return self.offsets[position + 1]
        return self.end

    def sync_in_background(self) -> None:
        """Start an fsync of everything written so far; do not wait for it."""
        self._check()
        if self.policy.never or not self.dirty:
            return
        with self._sync_state:
            if self._sync_target is not None:
                return  # one at a time: the caller asks again on its next round
            self._start_worker()
            self._sync_target = self.end
            self._sync_state.notify_all()

    def _start_worker(self) -> None:
        """Start the worker thread if it is not running (called holding _sync_state)."""
        if self._sync_worker is None:
            worker = threading.Thread(target=self._sync_in_worker, name="journal-sync", daemon=True)
            try:
                worker.start()
            except RuntimeError as exc:  # "can't start new thread": out of threads or memory
                # Nothing would ever sync: a node waiting for it would wait forever.
                self.failed = f"journal {self.path}: cannot start its sync thread: {exc}"
                raise JournalError(self.failed) from exc
            self._sync_worker = worker

    def _sync_in_worker(self) -> None:
        try:
            self._serve_background_syncs()
        except BaseException as exc:
            # A bug, or MemoryError: whoever waits for this sync would wait
            # forever. Poison the journal instead, which stops the node.
            log.debug("journal sync thread died", exc_info=True)
            with self._sync_state:
                if self.failed is None:
                    self.failed = f"journal {self.path}: its sync thread died: {type(exc).__name__}: {exc}"
                self._sync_target = None
                self._compact_busy = False
                self._sync_state.notify_all()

    def _serve_background_syncs(self) -> None:
        """The worker's jobs, most urgent first: close the file a swap replaced (and
        make the swap's rename durable), free dropped entries, sync, compact."""
        state = self._sync_state
        while True:
            with state:
                while (self._sync_target is None and self._old_fd < 0 and self._compact_from is None
                       and not self._dropped and not self._closing):
                    state.wait()
                old_fd, self._old_fd = self._old_fd, -1
                dropped, self._dropped = self._dropped, []
                sync = self._sync_target is not None
                compact = self._compact_from is not None and self.failed is None
            if old_fd >= 0:
                self._after_swap(old_fd)
            del dropped  # the last references to the dropped entries: freed here, not on the loop
            if sync:
                self._serve_one_sync()
            elif compact:
                self._compact_in_worker()
            elif old_fd < 0 and self._closing:
                return

    def _serve_one_sync(self) -> None:
        state = self._sync_state
        with state:
            if self._sync_target is None:
                return
            target, fd = self._sync_target, self.fd
            self._sync_running = True
        error = None
        try:
            # The fd stays open meanwhile: whatever would close or cut the
            # file waits for _sync_target to clear (_wait_for_background).
            self._sync_swap_rename()
            self._fdatasync(fd)
        except OSError as exc:
            error = exc
        with state:
            if error is None:
                self.syncs += 1
                self.synced_end = max(self.synced_end, target)
            else:
                self._fail("fdatasync", error)
            self._sync_target = None
            self._sync_running = False
            state.notify_all()

    def synced_through(self, target: int, timeout: float) -> bool:
        """Is the file durable up to offset `target`? Starts a background sync if
        none runs and waits for it at most `timeout` seconds, never longer: a
        follower on a slow disk keeps its loop (issue 23; docs/pysyncobj.md D3)."""
        self._check()
        if self.policy.never or self.synced_end >= target:
            return True
        self.sync_in_background()
        with self._sync_state:
            deadline = time.monotonic() + timeout
            while self._sync_target is not None and self.synced_end < target:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._sync_state.wait(left)
        self._check()
        if self.synced_end < target:
            self.sync_in_background()  # the one that finished started before target was written
        return self.synced_end >= target

    def _wait_for_background(self) -> None:
        worker = self._sync_worker
        if worker is not None:
            with self._sync_state:
                if self._sync_target is not None and self._compact_busy and not self._sync_running:
                    # The worker is compacting: the caller syncs on its own rather
                    # than wait for the copy (a sync asked for meanwhile is served
                    # between its chunks, but not during the copy's own fsync).
                    self._sync_target = None
                    self._sync_state.notify_all()
                while self._sync_target is not None:
                    # The worker clears the target even when it dies (_sync_in_worker);
                    # the timeout is a second guard against waiting on a dead thread.
                    if not self._sync_state.wait(timeout=1.0) and not worker.is_alive():
                        if self.failed is None:
                            self.failed = f"journal {self.path}: its sync thread is gone"
                        self._sync_target = None
        self._check()

    # ------------------------------------------------------- Journal interface
    def add(self, command, idx, term):
        command = bytes(command)
        payload = _PAYLOAD_HEAD.pack(idx, term) + command
        record = _RECORD_HEAD.pack(len(payload), zlib.crc32(payload)) + payload
        # pwrite at the known end: no reliance on the file position after a
        # truncation or reopen (and the journal's writes are the only pwrite
        # calls of the process, which lets libfiu fail exactly them in tests).
        with self._io("write"):
            if self._compacted is not None:
                self._swap_compacted()
            if self.end + len(record) > self.allocated and not self.policy.never:
                self._write_ahead(self.end + len(record) + PREALLOCATE)
            write_all(self.fd, record, self.end - self.base)
        self.entries.append((command, idx, term))
        self.offsets.append(self.end)
        self.end += len(record)
        self.records_written += 1
        if ID_RESERVE_MARK in command and _reserves_ids(command):
            self.owed_end = self.end
        elif command == _NO_OP_COMMAND and self.policy.durable:
            self.force_sync()

    def _write_ahead(self, allocated: int) -> None:
        """Zeros from the end of the records to `allocated`: the records' next room. Synced
        with the record written now; the file's new size rides that one sync."""
        write_all(self.fd, bytes(allocated - self.end), self.end - self.base)
        self.allocated = allocated

    def _truncate(self, end: int) -> None:
        self._abandon_compaction()
        self._wait_for_background()
        with self._io("truncate"):
            # Cut the room written ahead too: records cut here must not be left
            # behind the new end, where the next open would read them back.
            self._sync_swap_rename()
            os.ftruncate(self.fd, end - self.base)
            os.lseek(self.fd, end - self.base, os.SEEK_SET)
            self.end = self.allocated = end
            self.synced_end = min(self.synced_end, end)
            self.owed_end = min(self.owed_end, end)
            # A truncation must reach the disk before anything after it is acked.
            if not self.policy.never:
                os.fdatasync(self.fd)
                self.syncs += 1
                self.synced_end = end
        self._request_compaction()  # the prefix an abandoned compaction was to drop

    def clear(self):
        self.entries = []
        self.offsets = array("Q")
        self._truncate(self.base + len(MAGIC))

    def deleteEntriesFrom(self, entryFrom):
        # Raft truncates a conflicting, never-committed suffix.
        if entryFrom >= len(self.entries):
            return
        end = self.offsets[entryFrom]
        del self.entries[entryFrom:]
        del self.offsets[entryFrom:]
        self._truncate(end)

    def deleteEntriesTo(self, entryTo):
        # After a snapshot: drop the covered entries now, and the file's prefix in
        # the journal's worker (_compact_in_worker), off the loop Raft ticks on: the copy
        # and its fsync took 90-160 ms of the loop per snapshot (docs/reliability.md,
        # B7). Until the swap the file keeps the old prefix, which is consistent with
        # the snapshot (raft_node.align_journal_to_snapshot drops it at a restart).
        dropped = self.entries
        self.entries = dropped[entryTo:]
        self.offsets = self.offsets[entryTo:]
        self._request_compaction(dropped)

    def _request_compaction(self, dropped: list | None = None) -> None:
        """Ask the worker to copy the kept records into a new file, if the file has a
        prefix to drop. `dropped`, the entries' old list, is freed by the worker too:
        freeing 100,000 entries took the loop 10-15 ms."""
        if self.failed is not None or self.fd < 0:
            return
        first = self.offsets[0] if len(self.offsets) else self.end
        if first <= self.base + len(MAGIC) and dropped is None:
            return
        with self._sync_state:
            if first > self.base + len(MAGIC):
                self._compact_from = first
            if dropped is not None:
                self._dropped.append(dropped)
            self._start_worker()
            self._sync_state.notify_all()

    def _compact_in_worker(self) -> None:
        """The worker's part of a compaction: the kept records, as far as written now,
        copied byte for byte into `<journal>.compact` and synced. Appends go on
        meanwhile; the loop copies what they added and swaps the file in
        (_swap_compacted, at its next add)."""
        state = self._sync_state
        with state:
            start, self._compact_from = self._compact_from, None
            if start is None or self._compacted is not None:
                # A copy waits for its swap, which asks again; whoever waits for the
                # request to be taken (settle_compaction) hears it was.
                state.notify_all()
                return
            self._compact_busy, self._compact_cancel = True, False
            copy_end, fd, base = self.end, self.fd, self.base
        tmp = self.path + ".compact"
        out = -1
        error: OSError | None = None
        try:
            out = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
            write_all(out, MAGIC)
            position = start
            while position < copy_end and not self._compact_cancel:
                length = min(COMPACT_CHUNK, copy_end - position)
                _copy_range(fd, out, position - base, length)
                position += length
                self._serve_one_sync()  # one asked for meanwhile waits a chunk at most
            # Synced whatever the policy when it holds an entry owed to the disk (ids):
            # the rename replaces a file where that entry is on disk.
            if not self._compact_cancel and (not self.policy.never or self.owed_end > start):
                os.fsync(out)
        except OSError as exc:
            error = exc
        if (error is not None or self._compact_cancel) and out >= 0:
            os.close(out)  # before the loop hears the copy is over: it may start the next one
            _unlink(tmp)
            out = -1
        with state:
            self._compact_busy = False
            if error is not None:
                self._fail("compacting", error, tmp)
            elif not self._compact_cancel:
                self._compacted = (out, start, copy_end)
            state.notify_all()

    def _swap_compacted(self) -> None:
        """The loop's part: copy what was appended since the worker's copy, put the new
        file in place of the old, and hand the old descriptor and the rename's sync
        to the worker. Bytes already synced in the old file are synced in the new
        one before the rename replaces it; bytes written after the swap count as
        synced only once the rename is (_sync_swap_rename)."""
        self._wait_for_background()  # no sync of the old descriptor in flight
        # `_compacted` stays set until the copy has left the `.compact` path and the
        # new descriptor and base are in place: while it is set the worker starts no
        # other compaction (_compact_in_worker), which would open that same path with
        # O_TRUNC, truncating the copy being renamed and keeping a result whose path
        # the rename takes away (the next swap then failed with ENOENT). A request
        # the worker drops meanwhile is made again at the end of the swap.
        out, start, copy_end = self._compacted
        tmp = self.path + ".compact"
        sync = not self.policy.never or self.owed_end > start
        try:
            if self.end > copy_end:
                _copy_range(self.fd, out, copy_end - self.base, self.end - copy_end)
                if sync and self.synced_end > copy_end:
                    os.fdatasync(out)
            os.replace(tmp, self.path)
        except OSError:
            with self._sync_state:
                self._compacted = None
            os.close(out)
            raise
        old_fd, self.fd = self.fd, out
        self.base = start - len(MAGIC)
        self.allocated = self.end  # the copy has no room ahead: the next add writes it
        os.lseek(self.fd, self.end - self.base, os.SEEK_SET)
        if sync:
            self.synced_end = max(self.synced_end, copy_end)
            self._dir_unsynced = True
        else:
            self.synced_end = self.end
        with self._sync_state:
            self._compacted = None  # the next compaction copies from the new file
            self._old_fd = old_fd  # closing it frees the old file's blocks: 20-50 ms
            self._start_worker()
            self._sync_state.notify_all()
        self._request_compaction()  # a snapshot taken during the copy

    def _after_swap(self, old_fd: int) -> None:
        """The worker's end of a swap: the rename made durable, the old file closed."""
        error = None
        try:
            self._sync_swap_rename()
        except OSError as exc:
            error = exc
        os.close(old_fd)
        if error is not None:
            with self._sync_state:
                self._fail("syncing the directory after compacting", error, os.path.dirname(self.path))
                self._sync_state.notify_all()

    def _abandon_compaction(self) -> None:
        """Stop a compaction and forget its copy (a cut or a clear changes what it copied)."""
        with self._sync_state:
            self._compact_from = None
            self._compact_cancel = True
            while self._compact_busy:
                self._sync_state.wait(1.0)
            ready, self._compacted = self._compacted, None
        if ready is not None:
            os.close(ready[0])
            _unlink(self.path + ".compact")

    def settle_compaction(self, timeout: float = 10.0) -> bool:
        """Wait for a requested compaction to be copied, and swap it in. (For tests and
        tools; the node swaps at its next add or its one-second timer.)"""
        deadline = time.monotonic() + timeout
        with self._sync_state:
            while (self._compact_from is not None or self._compact_busy) and self.failed is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._sync_state.wait(left)
        self._check()
        if self._compacted is not None:
            with self._io("compacting", self.path + ".compact"):
                self._swap_compacted()
        return True

    def __getitem__(self, item):
        return self.entries[item]

    def __len__(self):
        return len(self.entries)

    def _destroy(self):
        try:
            # A clean close finishes a compaction under way (a restart then reads the
            # smaller file), but does not wait long for it: the old file is whole.
            if self._sync_worker is not None and self.failed is None:
                self.settle_compaction(timeout=CLOSE_COMPACTION_WAIT)
        finally:
            self._close()

    def _close(self) -> None:
        worker = self._sync_worker
        if worker is not None:
            self._abandon_compaction()
            with self._sync_state:
                self._closing = True
                self._sync_state.notify_all()
            worker.join()
        try:
            if self.failed is None:
                if not self.policy.never:
                    self.force_sync()
                if self.meta_dirty:
                    self._store_meta(sync=True)
        finally:
            if self.fd >= 0:
                os.close(self.fd)
                self.fd = -1

    def setRaftCommitIndex(self, raftCommitIndex):
        # The commit index need not be durable for safety (a restarted node
        # relearns it); it is stored with the term and vote, and at close.
        if self.meta.get("raftCommitIndex") != raftCommitIndex:
            self.meta["raftCommitIndex"] = raftCommitIndex
            self.meta_dirty = True

    def getRaftCommitIndex(self):
        return self.meta.get("raftCommitIndex", 1)

    def setCurrentTerm(self, term, votedForNodeId):
        self.meta["currentTerm"] = term
        self.meta["votedForNodeId"] = votedForNodeId
        self._store_meta(sync=True)  # even with -F: see the module docstring

    def getCurrentTerm(self):
        return self.meta.get("currentTerm", 0)

    def getVotedForNodeId(self):
        return self.meta.get("votedForNodeId")

    def onOneSecondTimer(self):
        # pysyncobj's hook for storing metadata once a second: nothing to store
        # (setRaftCommitIndex). The periodic policy's own sync is the tick's.
        if self._compacted is not None:
            with self._io("compacting", self.path + ".compact"):
                self._swap_compacted()
        if not self.policy.durable:
            self.sync()


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _reserves_ids(command: bytes) -> bool:
    """Does this journal command carry an entry that reserves ids? (A command
    that does not unframe reserves nothing: applying it stops the node.)"""
    try:
        entry = unframe(command)
    except Exception:
        return False
    return entry is not None and reserves_ids(entry)


def _read_record(data: bytes, pos: int) -> tuple[bytes, int] | None:
    """(payload, next position) of an intact record at `pos`, else None."""
    end = len(data)
    if pos + _RECORD_HEAD.size > end:
        return None
    length, crc = _RECORD_HEAD.unpack_from(data, pos)
    start = pos + _RECORD_HEAD.size
    if length < _PAYLOAD_HEAD.size or start + length > end:
        return None
    payload = data[start : start + length]
    if zlib.crc32(payload) != crc:
        return None
    return payload, start + length


def _find_later_record(data: bytes, bad: int, last_idx: int) -> tuple[int, int] | None:
    """(Raft index, offset) of an intact record after the bad one at `bad`, if any.

    A crash tears only the tail: what was being appended when it struck. An
    intact record further on (one of the next few Raft indexes) means the bad
    bytes are in the middle of acknowledged history instead. Candidates are
    cheap to rule out: most offsets fail the index test before any checksum.
    """
    wanted = range(last_idx + 1, last_idx + 65)
    find = data.find
    for idx in wanted:
        needle = _PAYLOAD_HEAD.pack(idx, 0)[:8]  # the index field of a payload
        at = find(needle, bad + 1)
        while at != -1:
            pos = at - _RECORD_HEAD.size
            if pos > bad and _read_record(data, pos) is not None:
                return idx, pos
            at = find(needle, at + 1)
    return None
