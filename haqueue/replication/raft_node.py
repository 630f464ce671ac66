"""ReplicatedQueue: a QueueState replicated by pysyncobj, ticked on the server's loop.

This is the only module that subclasses pysyncobj's SyncObj (transport.py
subclasses its TCPTransport). What they change, and why, is the numbered list
in docs/pysyncobj.md (D1-D17 and D24; D18-D23 are pysyncobj_patches.py's);
comments here cite those numbers. The election and lease decisions are
prevote.py's and lease.py's (pure); this module and transport.py read
pysyncobj's state into them.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import tempfile
import threading
import time

from haqueue.replication import pysyncobj_patches
from haqueue.replication.pysyncobj_patches import JournalSpec, monotonic

pysyncobj_patches.install()

from pysyncobj import SyncObj, SyncObjConf, replicated  # noqa: E402
from pysyncobj.config import FAIL_REASON, SERIALIZER_STATE  # noqa: E402

from haqueue.core.commands import LogFormatError, decode_batch
from haqueue.core.state import QueueState
from haqueue.replication import snapshot
from haqueue.replication import applying
from haqueue.replication import transport as links
from haqueue.replication.prevote import ASK, CAMPAIGN, Campaign
from haqueue.replication.transport import SyncingTransport
from haqueue.replication.fsync_policy import FsyncPolicy
from haqueue.replication.timing import RaftTiming  # noqa: F401  (re-exported: tests build clusters with it)
from haqueue.replication.journal import JournalError, fatal_message
from haqueue.replication.snapshot import SnapshotError
from haqueue.replication.observed import RaftObservations
from haqueue.replication.on_loop import EpollPoller, LoopTicker

log = logging.getLogger(__name__)

# pysyncobj's state constants (_RAFT_STATE in syncobj.py).
FOLLOWER, CANDIDATE, LEADER = 0, 1, 2
ROLE_NAMES = {FOLLOWER: "follower", CANDIDATE: "candidate", LEADER: "leader"}


class ReplicatedQueue(SyncObj):
    def __init__(
        self,
        self_address: str,
        partner_addresses: list[str],
        *,
        data_dir: str | None,
        policy: FsyncPolicy,
        secret: str | None = None,
        timing: RaftTiming | None = None,
        compaction_entries: int = 20000,
        compaction_seconds: float = 120.0,
        journal_limit: int | None = None,
        max_entry_bytes: int = 8 << 20,
        on_role_change=None,
        on_fatal=None,
    ) -> None:
        self.state = QueueState()
        self.state_lock = threading.RLock()
        self.on_role_change = on_role_change
        self.on_fatal = on_fatal
        self.fatal_error: str | None = None
        # When the tick thread last finished a tick (time.monotonic()): the
        # server's turns (server/turns.py) yield to it once this is overdue.
        self.ticked_at = time.monotonic()
        # Bytes of the entries applied since the last snapshot began: what the log
        # holds in memory beyond it, near enough (see _run).
        self.log_bytes_since_snapshot = 0
        self.observations = RaftObservations()  # elections, snapshots, commit times (observed.py)
        self._snapshot_pid = 0
        self.journal_limit = journal_limit
        self._stopping = threading.Event()
        self._temp_dir = None
        if data_dir is None:
            # In memory: the journal stays in RAM, but snapshots still need a
            # file for the forked writer and for followers catching up.
            self._temp_dir = tempfile.mkdtemp(prefix="haqueue-")
            dump_dir = self._temp_dir
            journal_file = None
        else:
            os.makedirs(data_dir, exist_ok=True)
            dump_dir = data_dir
            journal_file = JournalSpec(os.path.join(data_dir, "raft.journal"), policy)
        self.dump_path = os.path.join(dump_dir, "raft.snapshot")
        self.policy = policy
        self._partners = list(partner_addresses)
        self._commit_pending = False
        timing = timing or (RaftTiming.single_node() if not partner_addresses else RaftTiming())
        self._keepalive_period = timing.heartbeat
        self._next_keepalive = 0.0
        self.leader_fallback = timing.leader_fallback
        self._hear_window = timing.hear_window
        self._hears_majority = not partner_addresses
        self.election_min = timing.election_min
        self.campaign = Campaign(retry=timing.heartbeat)  # pre-vote rounds (prevote.py, D9)
        self.stepdown_reason: str | None = None  # why the next step-down happens, when a handler knows
        self.transport: SyncingTransport | None = None  # set by SyncingTransport itself
        conf = SyncObjConf(
            autoTick=False,
            appendEntriesUseBatch=False,  # True makes every commit wait for a heartbeat
            appendEntriesPeriod=timing.heartbeat,
            raftMinTimeout=timing.election_min,
            raftMaxTimeout=timing.election_max,
            leaderFallbackTimeout=timing.leader_fallback,
            connectionTimeout=timing.connection_timeout,
            connectionRetryTime=timing.connection_retry,
            journalFile=journal_file,
            fullDumpFile=self.dump_path,
            serializer=self._write_snapshot,
            deserializer=self._read_snapshot,
            serializeChecker=self._snapshot_progress,
            logCompactionMinEntries=compaction_entries,
            logCompactionMinTime=compaction_seconds,
            onStateChanged=self._state_changed,
            password=secret,
            dynamicMembershipChange=False,
            commandsQueueSize=200000,
            # pysyncobj splits an entry at least this big into chunks, and
            # decides which chunk is the last from the entry's raw length,
            # not its pickled length (longer: bytes >= 0x80 expand), so the
            # follower gets a premature "finish", fails to unpickle, and the
            # leader retries later (docs/pysyncobj.md D13). Above the largest entry the
            # batcher makes, that path is never taken.
            appendEntriesBatchSizeBytes=max_entry_bytes + 1,
            maxBindRetries=5,
            bindRetryTime=0.1,
            tcp_keepalive=(1, 1, 3),
            # pysyncobj binds 0.0.0.0 unless told otherwise: nodes sharing a
            # host on distinct addresses would collide, and Raft traffic
            # belongs on the node's own address only.
            bindAddress=self_address,
        )
        super().__init__(self_address, partner_addresses, conf, transportClass=SyncingTransport)
        if not partner_addresses:
            # Nobody to wait for: campaign (and win) at the first tick instead of
            # after an election timeout; a client harness connects 0.1 s after exec.
            self._SyncObj__raftElectionDeadline = 0.0
        self.journal = journal_file.journal if journal_file is not None else None
        self._preloaded = None
        self._load_snapshot_at_start()
        self.epoll_poller: EpollPoller = self._poller  # pysyncobj_patches installs it (on_loop.py)
        self._poll_sockets = self._poller.poll
        self._poller.poll = self._poll_now_if_commit_pending  # see _checkCommandsToApply
        self._thread = threading.Thread(target=self._run, name="raft-tick", daemon=True)
        self._ticker: LoopTicker | None = None
        self._destroyed = False

    # ------------------------------------------------------------ lifecycle
    def start(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        """Tick on `loop` (the server's: on_loop.py), or without one in a thread of its own."""
        if loop is None:
            self._thread.start()
            return
        self._ticker = LoopTicker(self, loop)
        # pysyncobj wakes its tick thread through a pipe when a command is
        # submitted; on the loop, a call_soon does (no write, no wake-up).
        self._SyncObj__pipeNotifier = self._ticker
        self._ticker.start()

    def stop(self) -> None:
        """Stop ticking and release the node's files. On a loop, call it from the loop's thread."""
        self._stopping.set()
        if self._ticker is not None:
            self._ticker.stop()
            self._destroy()
        elif self._thread.ident is None:
            self._destroy()  # never started (ticked by hand, or not at all): nobody else will
        elif self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout=5)
        if self._snapshot_pid:
            self._end_snapshot_writer()
        if self._temp_dir is not None:
            shutil.rmtree(self._temp_dir, ignore_errors=True)

    SNAPSHOT_WRITER_GRACE = 5.0  # seconds a clean stop waits for a snapshot being written

    def _end_snapshot_writer(self) -> None:
        """Let a running snapshot writer finish, within a bound (none after a fatal error)."""
        pid, self._snapshot_pid = self._snapshot_pid, 0
        snapshot.end_writer(pid, 0.0 if self.fatal_error is not None else self.SNAPSHOT_WRITER_GRACE)

    def _checkCommandsToApply(self):
        # pysyncobj moves submitted commands into its log here, late in a
        # tick, then polls its sockets; it commits at the start of the next
        # tick. A lone node has no follower whose answer would end that poll
        # early, so every entry sat out the whole poll timeout before it
        # committed. Note that the log grew, and let the poll return at once.
        before = self.raftCommitIndex, self._getRaftLogSize()
        super()._checkCommandsToApply()
        if not self._partners and self._getRaftLogSize() != before[1]:
            self._commit_pending = True

    def _SyncObj__applyLogEntries(self):
        # Point 16: apply, but do not make the leader announce the new commit index.
        SyncObj._SyncObj__applyLogEntries(self)
        return False

    def _poll_now_if_commit_pending(self, timeout):
        journal = self.journal
        if journal is not None and journal.dirty and self.policy.durable:
            # The leader has just sent new entries to its followers; syncing
            # its own copy now, in the journal's worker, overlaps with their
            # round trip, and this thread still reads their acknowledgements
            # meanwhile (apply_entry waits for the entry's own bytes). A lone
            # node has no round trip to overlap: the handoff would only add
            # a thread wakeup before every apply.
            if self._partners:
                journal.sync_in_background()
            else:
                journal.sync()
        if self._commit_pending:
            self._commit_pending = False
            timeout = 0
        try:
            return self._poll_sockets(timeout)
        finally:
            if self.transport is not None:
                self.transport.flush_acknowledgements()

    def _run(self) -> None:
        while not self._stopping.is_set() and self.tick_once(0.02):
            pass
        self._destroy()

    def tick_once(self, timeout: float = 0.0, *, events_first: bool = False) -> bool:
        """One tick, its failures handled; False once the node must stop ticking.
        `events_first`: hand out the sockets' pending events before the tick's
        work, which then acts on them (a loop calls it when a socket is ready)."""
        try:
            if events_first:
                self._poller.poll(0)
            self.tick(timeout)
        except JournalError as exc:
            # Point 11: a node that cannot write its journal must not say
            # another word to its peers (no heartbeat, no acknowledgement):
            # stop ticking at once, so a healthy node takes over.
            self._fatal(fatal_message(exc))
        except Exception:
            log.exception("raft tick failed")
        return self.fatal_error is None

    def _destroy(self) -> None:
        if self._destroyed:
            return
        self._destroyed = True
        try:
            self._doDestroy()
        except Exception:
            log.exception("raft shutdown failed")
        self.epoll_poller.close()

    def tick(self, timeout: float) -> None:
        """One pysyncobj tick (waiting up to `timeout` for its sockets), then this
        node's own periodic work: keepalives, the majority watch, the fsync
        policy, the journal bound. The tick thread calls it in a loop; a test
        may instead tick nodes it never started, by hand (tests/support/ticked.py)."""
        self.doTick(timeout)
        self.ticked_at = time.monotonic()  # the server's clock (server/turns.py), not Raft's
        self.observations.note_commit(self.raftCommitIndex, self.ticked_at)
        if self._isLeader():
            self.observations.note_followers(self.peer_match_indexes, self.ticked_at)
        if monotonic() >= self._next_keepalive and self.transport is not None:
            self._next_keepalive = monotonic() + self._keepalive_period
            self.transport.keep_alive(self._keepalive_period)
        self._watch_majority()
        if self._partners and self.transport is not None and self._isLeader():
            self.transport.watch_lease(self._hear_window)
        journal = self.journal
        if journal is not None:
            if not self.policy.durable:
                journal.sync()
            if self.journal_limit is not None and snapshot.journal_due(journal.end, self.journal_limit,
                                                                         self.observations.last_snapshot_bytes or 0):
                # beanstalkd's -s, and the last snapshot's size: fold the journal into a snapshot.
                self.forceLogCompaction()
            if journal.failed is not None:  # raised somewhere pysyncobj swallowed it
                raise JournalError(journal.failed)
        elif self.journal_limit is not None and self.log_bytes_since_snapshot > self.journal_limit:
            # In memory the log is the journal, and the same size bounds it: by
            # entry count alone (20,000 entries of up to hundreds of puts) it
            # held a copy of every put since the last snapshot, 90 of the 645
            # bytes a queued 100-byte job cost after 1,000,000 puts.
            self.forceLogCompaction()

    def _watch_majority(self) -> None:
        """Point 9: track whether this node hears a majority; on regaining it, wait afresh."""
        if not self._partners or self.transport is None:
            return
        heard = self._is_majority(self.transport.peers_heard_within(self._hear_window) + 1)
        if heard and not self._hears_majority and not self._isLeader():
            self._SyncObj__raftElectionDeadline = monotonic() + self._SyncObj__generateRaftTimeout()
        self._hears_majority = heard

    def read_lease_valid(self) -> bool:
        """May this leader answer a read, or hand out a reservation, now? Only
        while its read lease holds (lease.py; docs/pysyncobj.md D12, D24)."""
        if not self._partners:
            return True
        transport = self.transport
        if transport is None or not self._isLeader():
            return False
        return transport.lease.valid(links.lease_clock(), self.peers_for_majority(), self._hear_window)

    def followed_within(self, seconds: float) -> bool:
        """Has a majority acknowledged this leader's appends sent within `seconds`?

        The leader check (admin /leader, what keepalived and LVS ask) uses it
        with the leader fallback: pysyncobj steps a leader down after that long
        without answers, but only when its tick runs. A leader whose tick
        thread is stuck (an fsync stalled for seconds) never steps down while
        the others elect a new leader; without this the VIP stayed on it and
        clients waited out the whole stall.
        """
        if not self._partners:
            return True
        transport = self.transport
        if transport is None or not self._isLeader():
            return False
        return transport.lease.majority_acknowledged_at(self.peers_for_majority()) > links.lease_clock() - seconds

    def peers_for_majority(self) -> int:
        """Peers that make a majority with this node."""
        return (len(self._partners) + 1) // 2

    def _is_majority(self, nodes: int) -> bool:
        """Do `nodes` (this one included) make a majority of the cluster?"""
        return nodes > (len(self._partners) + 1) / 2

    def _SyncObj__connectedToAnyone(self) -> bool:
        # pysyncobj asks this (name-mangled) on every tick once a follower's
        # election timeout has run out; True starts a campaign (docs/pysyncobj.md D9).
        if not self._partners:
            return True
        if not self._hears_majority or self.transport is None:
            return False
        step = self.campaign.step(self.raftCurrentTerm, monotonic(), self._is_majority)
        if step == CAMPAIGN:
            self.transport.elections.election_started(self.raftCurrentTerm + 1)
        elif step == ASK:
            self.transport.ask_for_prevotes(self.campaign.term, self.campaign.round)
        return step == CAMPAIGN

    def step_down(self, term: int, reason: str) -> None:
        """A leader learns of a higher term outside pysyncobj (transport.py's stale-term
        notice, D24): adopt it and follow, as pysyncobj does for a vote request of that term."""
        self.stepdown_reason = reason
        self._SyncObj__setCurrentTerm(term, None)
        self._SyncObj__setState(FOLLOWER)
        self._SyncObj__raftLeader = None

    # --------------------------------------------------------- replication
    def submit(self, data: bytes, callback) -> None:
        """Append an encoded batch; callback(applied, error) runs in the tick thread
        (`applied`: haqueue.core.effects.Applied, or None if this node is stopping)."""
        self.apply_entry(data, callback=callback)

    @replicated
    def apply_entry(self, data):
        if self.fatal_error is not None:
            return None  # stopping: apply nothing more (the connections close)
        self.log_bytes_since_snapshot += len(data)
        journal = self.journal
        if journal is not None:
            # This entry is on this node's disk before any reply reports it.
            journal.sync(through=journal.end_of_index(self.raftLastApplied + 1))
        try:
            stamp, commands = decode_batch(data)
        except LogFormatError as exc:
            self._fatal(f"cannot apply a log entry: {exc}; refusing to run with a diverged state")
            return None
        return applying.apply_entry(self.state, self.state_lock, stamp, commands)

    def _fatal(self, message: str) -> None:
        if self.fatal_error is None:
            self.fatal_error = message
            log.critical(message)
            if self.on_fatal is not None:
                self.on_fatal(message)

    # ---------------------------------------------------------- leadership
    def _state_changed(self, old: int, new: int) -> None:
        if self.transport is not None:
            self.transport.role_changed(old == LEADER, new == LEADER)
        self.observations.role_changed(old, new, self.raftCurrentTerm)
        if self.on_role_change is not None:
            self.on_role_change(ROLE_NAMES.get(new, str(new)))

    def peer_match_indexes(self) -> dict[str, int]:
        """On the leader: each follower's highest replicated index, by Raft address."""
        if not self._isLeader():
            return {}
        return {node.address: index for node, index in list(self._SyncObj__raftMatchIndex.items())}

    def peers_connected(self) -> dict[str, bool]:
        """Each peer's Raft address, and whether its link is up."""
        up = self.transport.peers_up if self.transport is not None else set()
        return {node.address: node in up for node in self._SyncObj__otherNodes}

    def status(self) -> dict:
        status = self.getStatus()
        leader = status.get("leader")
        return {
            "role": ROLE_NAMES.get(status["state"], "?"),
            "term": status["raft_term"],
            "leader": leader.address if leader is not None else None,
            "commit_index": status["commit_idx"],
            "applied_index": status["last_applied"],
            "log_length": status["log_len"],
            "has_quorum": status["has_quorum"],
        }

    # ------------------------------------------------------------ snapshots
    def _load_snapshot_at_start(self) -> None:
        """Read the snapshot now, so a bad one stops the node before it joins
        the cluster, and line the journal up with it (snapshot.align_journal).
        pysyncobj loads it at the first tick; _read_snapshot hands it this copy."""
        if not os.path.isfile(self.dump_path):
            return
        with self.observations.restoring(self.dump_path):
            state, raft_data = snapshot.read(self.dump_path)
        if self.journal is not None:
            snapshot.align_journal(self.journal, raft_data)
        self._preloaded = (state, raft_data)

    def _write_snapshot(self, _pysyncobj_tmp: str, raft_data) -> None:
        # Called in the tick thread between entries, so the state is exactly
        # that of the last applied entry. pysyncobj will then try to rename its
        # own temporary file over the dump; that file never exists, the rename
        # fails harmlessly, and serializeChecker (ours) reports the truth.
        self.observations.snapshot_started()
        self.log_bytes_since_snapshot = 0  # the snapshot covers every entry applied so far
        # The rename is synced before the parent drops the journal prefix.
        self._snapshot_pid = snapshot.write_in_child(self.dump_path, self.state, raft_data,
                                                     sync=not self.policy.never)

    def _snapshot_progress(self) -> int:
        pid = self._snapshot_pid
        if not pid:
            return SERIALIZER_STATE.NOT_SERIALIZING
        try:
            done, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            self._snapshot_pid = 0
            return SERIALIZER_STATE.FAILED
        if done == 0:
            return SERIALIZER_STATE.SERIALIZING
        self._snapshot_pid = 0
        if os.waitstatus_to_exitcode(status) == 0:
            self.observations.snapshot_finished(True, _file_size(self.dump_path))
            return SERIALIZER_STATE.SUCCESS
        self.observations.snapshot_finished(False, None)
        log.warning("snapshot writer failed with status %s", status)
        return SERIALIZER_STATE.FAILED

    def _read_snapshot(self, path: str):
        preloaded, self._preloaded = self._preloaded, None
        if preloaded is not None:
            state, raft_data = preloaded  # read, and its restore logged, at start-up
        else:
            # A snapshot the leader sent: pysyncobj wrote it without fsync and
            # clears the journal next (synced). Put the snapshot on disk first.
            with self.observations.restoring(path):
                try:
                    if not self.policy.never:
                        snapshot.sync_file(path)
                    state, raft_data = snapshot.read(path)
                except OSError as exc:
                    self._fatal(f"snapshot {path}: cannot sync it: {exc.strerror or exc}")
                    raise
                except SnapshotError as exc:
                    self._fatal(str(exc))
                    raise
        with self.state_lock:
            self.state = state
        return raft_data


def _file_size(path: str) -> int | None:
    try:
        return os.path.getsize(path)
    except OSError:
        return None


FAIL_SUCCESS = FAIL_REASON.SUCCESS
