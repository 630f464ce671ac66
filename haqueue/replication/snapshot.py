"""The snapshot file: its format, reading it safely, and making it the journal's base.

A snapshot is the queue state after Raft entry S, plus the two entries pysyncobj
keeps beside it (S-1 and S: its journal must start with exactly those two):

    pickle of (SNAPSHOT_MAGIC, QueueState records, (entry S, entry S-1, cluster))

Format checklist: a new layout gets a new magic (HAQSNAP2, ...), `read` learns
to read the old one, and a node that meets a magic newer than it knows refuses
to start with a message saying so, rather than run on an empty state.

Why reading is strict: pysyncobj catches and only logs an exception from the
deserializer. The node then applies nothing ever again, yet can still win
elections: a zombie leader stops the whole cluster. So an unreadable snapshot
raises SnapshotError, which stops the node with one line (raft_node.py).

Why `align_journal` exists: the snapshot writer renames its file into place,
and only at the node's next tick does pysyncobj drop the journal prefix the
snapshot covers. A crash in between leaves a snapshot at S beside a journal
that still starts before S. pysyncobj, finding that the journal's first two
entries are not S-1 and S, clears the whole journal, acknowledged entries
after S included (and their job ids were handed out again). Before pysyncobj
looks, `align_journal` drops that covered prefix itself, so every crash point
leaves a pair pysyncobj reads as one consistent base: the swap to a new
snapshot is atomic as far as recovery can tell.
"""

from __future__ import annotations

import logging
import os
import pickle

from haqueue.core.state import QueueState

log = logging.getLogger(__name__)

SNAPSHOT_MAGIC = b"HAQSNAP1"
WRITER_NICENESS = 10  # added to the node's: nice(1)'s default for background work (write_in_child)
_MAGIC_FAMILY = b"HAQSNAP"


class SnapshotError(Exception):
    """The snapshot cannot be used; the node must not run. str() is one line."""


def read(path: str) -> tuple[QueueState, tuple]:
    """(state, (entry S, entry S-1, cluster)) from the snapshot at `path`."""
    records, raft_data = read_records(path)
    return build_state(records, path), raft_data


def read_records(path: str) -> tuple[object, tuple]:
    """(the state's records, (entry S, entry S-1, cluster)) from the snapshot at `path`:
    the file read and checked, the state not yet built (build_state, the slow part:
    about 8 times the unpickling)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise SnapshotError(f"snapshot {path}: cannot read it: {exc.strerror or exc}") from exc
    if not data:
        raise SnapshotError(f"snapshot {path}: the file is empty (a crash while it was received?)")
    try:
        magic, records, raft_data = pickle.loads(data)
    except Exception as exc:
        raise SnapshotError(f"snapshot {path}: unreadable ({type(exc).__name__}: {exc})") from exc
    if magic != SNAPSHOT_MAGIC:
        if isinstance(magic, bytes) and magic.startswith(_MAGIC_FAMILY):
            raise SnapshotError(f"snapshot {path}: format {magic.decode(errors='replace')} is not one this "
                                f"haqueue reads ({SNAPSHOT_MAGIC.decode()}); run the version that wrote it")
        raise SnapshotError(f"snapshot {path}: not a haqueue snapshot")
    return records, tuple(raft_data)


def build_state(records, path: str) -> QueueState:
    """The queue state from a snapshot's records (read_records); `path` names it in errors."""
    try:
        return QueueState.from_records(records)
    except Exception as exc:
        raise SnapshotError(f"snapshot {path}: its records do not load ({type(exc).__name__}: {exc})") from exc


def journal_due(journal_bytes: int, limit: int, snapshot_bytes: int) -> bool:
    """Whether a journal of `journal_bytes` is to be folded into a new snapshot now:
    past `limit` (beanstalkd's -s) and past the size of the last snapshot.

    A snapshot writes the whole state (a forked writer serialising every job). With
    the limit alone, a queue whose snapshot is many times the limit rewrote all of
    it for every `limit` bytes logged: at 10 MiB and a 150 MB queue, 15 bytes
    written, and their serialising, per byte logged, without pause under load.
    Waiting until the journal is also as large as the last snapshot makes each
    logged byte pay for at most one snapshot byte, whatever the queue's size. The
    price: a journal up to the snapshot's size, replayed at start (no longer than
    reading the snapshot) and held in memory (which --max-memory counts)."""
    return journal_bytes > max(limit, snapshot_bytes)


def encode(state: QueueState, raft_data) -> bytes:
    return pickle.dumps((SNAPSHOT_MAGIC, state.to_records(), tuple(raft_data)), protocol=5)


def sync_file(path: str) -> None:
    """fsync `path` and the directory entry that names it."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    dir_fd = os.open(os.path.dirname(os.path.abspath(path)) or ".", os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def align_journal(journal, raft_data: tuple) -> None:
    """Drop the journal prefix that the snapshot covers (see the module docstring).

    `journal` holds (command, index, term) entries. Only an exact match of the
    snapshot's two entries is aligned; anything else is left to pysyncobj,
    which then starts the journal afresh from the snapshot: right when the
    journal ends before the snapshot, or disagrees with it (its entries there
    were never committed). A journal that starts after the snapshot ends has
    lost entries that exist nowhere on this node: refuse to start.
    """
    last, before = raft_data[0], raft_data[1]
    if not len(journal):
        return
    first_idx = journal[0][1]
    if before[1] < first_idx:
        if last[1] + 1 < first_idx:
            raise SnapshotError(
                f"the snapshot ends at entry {last[1]} but the journal {journal.path} starts at entry "
                f"{first_idx}: the entries between exist nowhere on this node. Move the data directory "
                f"away to rejoin the cluster from its leader")
        return
    position = before[1] - first_idx
    if position + 1 >= len(journal) or journal[position] != before or journal[position + 1] != last:
        return
    if position:
        log.info("journal starts %d entries before its snapshot (a crash after the snapshot was taken): "
                 "dropping the covered prefix", position)
        journal.deleteEntriesTo(position)


def write_in_child(path: str, state: QueueState, raft_data, sync: bool, errors_fd: int = -1) -> int:
    """Fork a child that writes the snapshot of `state` to `path` and exits; its pid.

    Forking gives the child the state exactly as it is now, for free (copy on
    write), while the parent goes on applying entries. The child first closes
    every descriptor it inherited (but `errors_fd`): the client listener would
    otherwise go on accepting after a step-down, and re-election would fail to
    bind it (EADDRINUSE). It writes a temporary file and renames it last, syncing
    the rename (unless `sync` is false), so a crash or a kill at any moment leaves
    the old snapshot or the new one, whole. If it fails, it writes one line saying
    why to `errors_fd` (when given) and exits with status 1. The fork's own
    failure (ENOMEM, EAGAIN) raises OSError here (snapshot_writer.py retries).

    The writer runs at WRITER_NICENESS: it is background work, and serialising a
    big state at the node's own priority took the CPU from serving it (three
    nodes sharing one core, windowed puts: 30,000 puts/s while snapshots ran,
    45,000-48,000 with the writer niced; docs/benchmarks-log.md). Not idle priority:
    against a busy node it still gets about a tenth of a core, so it finishes and
    the journal it folds stops growing.
    """
    from haqueue.replication.journal import write_atomically

    pid = os.fork()
    if pid == 0:  # the child: no threads, no locks; write and leave
        code = 1
        try:
            if errors_fd >= 0:
                os.closerange(3, errors_fd)
                os.closerange(errors_fd + 1, os.sysconf("SC_OPEN_MAX"))
            else:
                os.closerange(3, os.sysconf("SC_OPEN_MAX"))
            os.nice(WRITER_NICENESS)
            write_atomically(path, encode(state, raft_data), sync=sync, tmp=path + ".writing")
            code = 0
        except BaseException as exc:
            if errors_fd >= 0:
                try:
                    os.write(errors_fd, _reason(exc).encode())
                except BaseException:
                    pass
        finally:
            os._exit(code)
    return pid


def _reason(exc: BaseException) -> str:
    """One line for the parent's event: what the writer could not do."""
    if isinstance(exc, OSError) and exc.strerror:
        where = f" ({exc.filename})" if exc.filename else ""
        return f"cannot write the snapshot{where}: {exc.strerror}"
    return f"cannot write the snapshot: {type(exc).__name__}: {exc}"


def end_writer(pid: int, grace: float) -> None:
    """Let a snapshot writer finish within `grace` seconds, then kill it.

    A clean stop waits (the snapshot is nearly done, and the next start reads
    it); a node stopping on a fatal error passes 0, since its disk is failing.
    A writer stuck in that disk must never keep the node from exiting: systemd
    restarts only a node that exited. Killing it is safe at any moment: it
    writes a temporary file and renames it last.
    """
    import signal
    import time

    deadline = time.monotonic() + grace
    try:
        while True:
            done, _ = os.waitpid(pid, os.WNOHANG)
            if done:
                return
            if time.monotonic() >= deadline:
                log.warning("snapshot writer %d still running at stop: killing it", pid)
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                return
            time.sleep(0.01)  # polling a child process with a deadline: no event to await
    except ChildProcessError:
        pass
