"""SnapshotWriter: the one forked snapshot writer of a node, its outcome, and when to retry.

Shared by a Raft node (raft_node.py, behind pysyncobj's serializer hooks) and a
lone node (lone.py, on the event loop). Its rules:

- At most one writer runs. `start` forks it (snapshot.write_in_child: the child
  closes what it inherited, runs at nice +10, writes a temporary file and
  renames it last), so the state is copied as it is now, for free, while the
  node goes on.
- `poll` reaps it without blocking and reports its outcome once: DONE or FAILED.
  A fork that failed (ENOMEM, EAGAIN) is an outcome too, reported by the next
  `poll` as FAILED: pysyncobj's serializer state machine must hear of it, or it
  waits for that writer forever (docs/pysyncobj.md D5).
- After a failure the next attempt waits: BACKOFF_FIRST, doubling up to
  BACKOFF_MAX; a snapshot written resets it. A writer that fails at once (a
  full disk, a read-only file system) was otherwise forked again at every
  tick, about 19 times a second, while the node sat idle. `may_start` says
  whether an attempt is allowed now; the caller decides whether one is due
  (snapshot.journal_due).
- Each start, finish and failure is an event (observed.py records it through
  haqueue/events.py), a failure with its reason: the fork's error, or what the
  child wrote on its error pipe before exiting non-zero, or the signal that
  killed it.

Time is read from `clock` (a Raft node passes the clock pysyncobj shares, so a
test's virtual time runs the backoff out: tests/support/ticked.py).
"""

from __future__ import annotations

import os
import signal
import time
from typing import Callable

from haqueue.replication import snapshot

BACKOFF_FIRST = 1.0  # seconds before the first retry after a failure
BACKOFF_MAX = 60.0  # and never longer than this between attempts
REASON_MAX = 512  # bytes of the child's error message kept
GRACE = 5.0  # seconds a clean stop waits for a snapshot being written (end)

RUNNING, DONE, FAILED = "running", "done", "failed"


class SnapshotWriter:
    """Forks, watches and retries the node's snapshot writer (see the module docstring)."""

    def __init__(self, path: str, observations, *, sync: bool,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.path = path
        self.observations = observations  # observed.RaftObservations: counts and events
        self.sync = sync
        self.clock = clock
        self.pid = 0  # the running writer's, 0 when none runs
        self.covers: tuple | None = None  # raft_data of the snapshot being written
        self.failures = 0  # in a row; 0 after a success
        self.retry_at = float("-inf")  # no attempt before this (clock)
        self._errors = -1  # read end of the running writer's error pipe
        self._unreported: str | None = None  # a fork failure, for the next poll

    # ------------------------------------------------------------- starting
    def may_start(self) -> bool:
        """No writer running, no outcome unreported, and any backoff over."""
        return not self.pid and self._unreported is None and self.clock() >= self.retry_at

    def start(self, state, raft_data) -> bool:
        """Fork a writer for `state` as of `raft_data` (entry S, entry S-1, cluster);
        False if the fork failed (then `poll` reports FAILED once)."""
        assert not self.pid, "a snapshot writer is running already"
        self.covers = tuple(raft_data)
        index = raft_data[0][1]
        self.observations.snapshot_started(index)
        read_end, write_end = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        try:
            self.pid = snapshot.write_in_child(self.path, state, raft_data, sync=self.sync, errors_fd=write_end)
        except OSError as exc:
            os.close(read_end)
            self._failed(f"cannot fork the writer: {exc.strerror or exc}")
            self._unreported = FAILED
            return False
        finally:
            os.close(write_end)
        self._errors = read_end
        return True

    # ------------------------------------------------------------- watching
    def poll(self, block: bool = False) -> str | None:
        """The writer's outcome once it is known (DONE or FAILED, reported once),
        RUNNING while it runs, None when there is nothing to report."""
        if self._unreported is not None:
            outcome, self._unreported = self._unreported, None
            return outcome
        if not self.pid:
            return None
        try:
            done, status = os.waitpid(self.pid, 0 if block else os.WNOHANG)
        except ChildProcessError:
            done, status = self.pid, None  # reaped elsewhere: nothing says it finished
        if done == 0:
            return RUNNING
        self.pid = 0
        reason = self._child_reason(status)
        if reason is None:
            self.failures, self.retry_at = 0, float("-inf")
            self.observations.snapshot_finished(self.covers[0][1], _file_size(self.path))
            return DONE
        self._failed(reason)
        return FAILED

    def _child_reason(self, status: int | None) -> str | None:
        """None if the writer succeeded, else why it did not."""
        try:
            written = os.read(self._errors, REASON_MAX).decode(errors="replace").strip()
        except OSError:
            written = ""
        os.close(self._errors)
        self._errors = -1
        if status is None:
            return "the writer's exit status was lost"
        if os.WIFSIGNALED(status):
            return f"the writer was killed by {signal.Signals(os.WTERMSIG(status)).name}"
        code = os.waitstatus_to_exitcode(status)
        if code == 0:
            return None
        return written or f"the writer exited with status {code}"

    def _failed(self, reason: str) -> None:
        self.failures += 1
        backoff = min(BACKOFF_MAX, BACKOFF_FIRST * 2 ** (self.failures - 1))
        self.retry_at = self.clock() + backoff
        self.observations.snapshot_failed(reason, retry_in=backoff)

    def abandon(self, reason: str) -> None:
        """Kill a running writer and wait for it: a newer snapshot is about to take the
        file's place (one the leader sent), and this writer, renaming its older one over
        it afterwards, left a snapshot behind the journal that a restart refused
        ("the entries between exist nowhere on this node"). Reported FAILED to the
        caller (pysyncobj must stop waiting for it), without a backoff: nothing failed."""
        if not self.pid:
            return
        pid, self.pid = self.pid, 0
        snapshot.end_writer(pid, 0.0)  # SIGKILL, then reaped: it renames nothing after this
        if self._errors >= 0:
            os.close(self._errors)
            self._errors = -1
        self._unreported = FAILED
        self.observations.snapshot_abandoned(self.covers[0][1], reason)

    # ------------------------------------------------------------- stopping
    def end(self, grace: float) -> None:
        """Let a running writer finish within `grace` seconds, then kill it (snapshot.end_writer)."""
        pid, self.pid = self.pid, 0
        if pid:
            snapshot.end_writer(pid, grace)
        if self._errors >= 0:
            os.close(self._errors)
            self._errors = -1


def _file_size(path: str) -> int | None:
    try:
        return os.path.getsize(path)
    except OSError:
        return None
