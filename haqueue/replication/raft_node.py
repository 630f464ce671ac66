"""ReplicatedQueue: a QueueState replicated by pysyncobj, ticked on the server's loop.

This is the only module that subclasses pysyncobj's SyncObj and TCPTransport.
What it changes, and why, is the numbered list in docs/pysyncobj.md (D1-D17;
D18-D24 are pysyncobj_patches.py's); comments here cite those numbers.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import tempfile
import time
from collections import deque

from haqueue.replication import pysyncobj_patches
from haqueue.replication.pysyncobj_patches import JournalSpec, monotonic

pysyncobj_patches.install()

from pysyncobj import SyncObj, SyncObjConf, replicated  # noqa: E402
from pysyncobj.config import FAIL_REASON, SERIALIZER_STATE  # noqa: E402
from pysyncobj.transport import TCPTransport  # noqa: E402

from haqueue.core.commands import LogFormatError, decode_batch
from haqueue.core.state import QueueState
from haqueue.replication import append_guard
from haqueue.replication import applying
from haqueue.replication.fsync_policy import FsyncPolicy
from haqueue.replication.timing import RaftTiming  # noqa: F401  (re-exported: tests build clusters with it)
from haqueue.replication.journal import JournalError, fatal_message
from haqueue.replication import snapshot_writer
from haqueue.replication.raft_snapshots import RaftSnapshots
from haqueue.replication.observed import RaftObservations
from haqueue.replication.on_loop import EpollPoller, LoopTicker

log = logging.getLogger(__name__)

# pysyncobj's state constants (_RAFT_STATE in syncobj.py).
FOLLOWER, CANDIDATE, LEADER = 0, 1, 2
ROLE_NAMES = {FOLLOWER: "follower", CANDIDATE: "candidate", LEADER: "leader"}


# Any message type pysyncobj does not know is ignored on arrival (also by
# older haqueue nodes); reading it keeps the link alive.
KEEPALIVE = {"type": "haqueue-keepalive"}
PREVOTE = "haqueue-prevote"  # would you vote for me at this term? (docs/pysyncobj.md D9)
PREVOTE_REPLY = "haqueue-prevote-reply"
# Point 12: the leader numbers its append_entries; a follower's acknowledgement
# carries the number of the last one it processed from that leader.
APPEND_SEQ = "haq_seq"
MAX_UNACKED_APPENDS = 4096  # per peer; an older acknowledgement just extends nothing


def lease_clock() -> float:
    """The read lease's clock: CLOCK_BOOTTIME, which (unlike CLOCK_MONOTONIC)
    keeps counting while the machine is suspended, so a lease cannot outlive a
    suspend it did not see (docs/cluster.md, "The read lease")."""
    return time.clock_gettime(time.CLOCK_BOOTTIME)


class SyncingTransport(TCPTransport):
    """Syncs the journal before anything leaves the node (Raft: persist, then respond).

    It also refuses to forward commands (docs/pysyncobj.md D7): pysyncobj sends a
    command submitted on a non-leader to the leader as `apply_command`; we
    answer it here, locally, as the leader would refuse it (NOT_LEADER).
    """

    def __init__(self, syncObj, selfNode, otherNodes):
        self._outgoing: set = set()  # before super(): it adds the nodes
        super().__init__(syncObj, selfNode, otherNodes)
        self.peers_up: set = set()
        self.last_heard: dict = {}  # node -> when its last message came (pysyncobj_patches.monotonic)
        self.deferred_acks: list = []  # next_node_idx messages waiting for the journal's fsync
        self.leader_heard_at = float("-inf")  # append_entries of this node's term or later
        self.stale_leader_heard_at = float("-inf")  # append_entries of an older term
        # The read lease (docs/pysyncobj.md D12). As leader: the appends sent to each peer
        # not yet acknowledged, as (seq, lease_clock() at send, term), and per
        # peer the send time of the latest append it acknowledged in this
        # term. As follower: the seq of the last append processed per leader.
        self._append_seq = 0
        self._appends_sent: dict = {}
        self.lease_acks: dict = {}
        self.lease_until = float("-inf")  # read_lease_valid's last answer holds until then
        self._seq_from: dict = {}
        self._ack_through: dict = {}  # node -> cap on the next acknowledgement (append_guard)
        self._sent_at: dict = {}  # node -> when this node last sent it anything (keep_alive)
        syncObj.transport = self

    def setOnMessageReceivedCallback(self, callback):
        if callback is None:
            return super().setOnMessageReceivedCallback(None)
        last_heard = self.last_heard
        sync_obj = self._syncObj

        def received(node, message):
            now = last_heard[node] = monotonic()
            kind = message.get("type")
            if kind == PREVOTE or kind == PREVOTE_REPLY:
                sync_obj._on_prevote_message(node, message)
                return
            if kind == "append_entries":
                if message.get("term", -1) >= sync_obj.raftCurrentTerm:
                    self.leader_heard_at = now
                    self._seq_from[node] = message.get(APPEND_SEQ)  # pysyncobj answers it
                else:
                    self.stale_leader_heard_at = now
                # pysyncobj would truncate entries that do not conflict
                # (append_guard.py); hand it the message Raft would act on.
                trimmed = append_guard.trim(message, sync_obj._SyncObj__raftLog)
                self._ack_through[node] = trimmed.get(append_guard.ACK_THROUGH)
                callback(node, trimmed)
                return
            if kind == "next_node_idx":
                self._acknowledged(node, message.get(APPEND_SEQ))
            if kind == "next_node_idx" and message.get("success") and not message.get("reset"):
                # An acknowledgement of an older append_entries must not move
                # the leader's next-to-send position back: pysyncobj would
                # resend entries the follower has, and the follower would
                # truncate and rewrite entries it already acknowledged. If a
                # send was really lost, the follower's consistency check
                # answers with reset=True and the position is corrected.
                next_index = sync_obj._SyncObj__raftNextIndex
                sent = next_index.get(node)
                callback(node, message)
                if sent is not None and next_index.get(node, sent) < sent:
                    next_index[node] = sent
                return
            callback(node, message)

        return super().setOnMessageReceivedCallback(received)

    def _acknowledged(self, node, seq) -> None:
        """A peer answered our append number `seq`: it followed us when it did."""
        sent = self._appends_sent.get(node)
        if seq is None or not sent:
            return  # an older haqueue, or an answer to a previous leadership
        found = None
        while sent and sent[0][0] <= seq:
            found = sent.popleft()
        if found is None or found[0] != seq:
            return
        sync_obj = self._syncObj
        if found[2] == sync_obj.raftCurrentTerm and sync_obj._isLeader():
            if found[1] > self.lease_acks.get(node, float("-inf")):
                self.lease_acks[node] = found[1]

    def reset_lease(self) -> None:
        """A new role or term: nothing acknowledged before counts."""
        self.lease_acks.clear()
        self._appends_sent.clear()
        self.lease_until = float("-inf")

    def majority_acknowledged_at(self, peers_needed: int) -> float:
        """The send time (lease_clock) of the newest append of this term that
        `peers_needed` peers have acknowledged: with this node, a majority has
        everything sent up to then. -inf while too few have answered."""
        acks = sorted(self.lease_acks.values(), reverse=True)
        return acks[peers_needed - 1] if len(acks) >= peers_needed else float("-inf")

    def peers_heard_within(self, seconds: float) -> int:
        since = monotonic() - seconds
        return sum(1 for heard in self.last_heard.values() if heard > since)

    def _onNodeConnected(self, node):
        self.peers_up.add(node)
        super()._onNodeConnected(node)

    def _onNodeDisconnected(self, node):
        self.peers_up.discard(node)
        super()._onNodeDisconnected(node)

    def _onDisconnected(self, conn):
        super()._onDisconnected(conn)
        if conn not in self._outgoing:
            # pysyncobj gives each accepted connection callbacks that are
            # partials holding the connection itself: a cycle, which the
            # server's frozen collector would never find (server/gc_policy.py).
            # An accepted connection is never reused once it is down.
            conn.setOnMessageReceivedCallback(None)
            conn.setOnDisconnectedCallback(None)

    def addNode(self, node):
        super().addNode(node)
        conn = self._connections.get(node)
        if conn is not None:
            self._outgoing.add(conn)  # created once per peer and reconnected, never replaced

    def keep_alive(self, period: float) -> None:
        """Send a message pysyncobj ignores (docs/pysyncobj.md D8) to every peer this
        node has sent nothing to within `period`: any message keeps a link alive,
        and a busy link needs no keepalive of its own."""
        since = monotonic() - period
        sent_at = self._sent_at
        for node in list(self.peers_up):
            if sent_at.get(node, float("-inf")) <= since:
                self.send(node, KEEPALIVE)

    def send(self, node, message):
        if self._syncObj.fatal_error is not None:
            return False  # a node that must stop says nothing more (docs/pysyncobj.md D11)
        kind = message.get("type")
        if kind == "append_entries":
            self._append_seq += 1
            message[APPEND_SEQ] = self._append_seq
            sent = self._appends_sent.get(node)
            if sent is None:
                sent = self._appends_sent[node] = deque(maxlen=MAX_UNACKED_APPENDS)
            sent.append((self._append_seq, lease_clock(), self._syncObj.raftCurrentTerm))
        elif kind == "next_node_idx":
            message[APPEND_SEQ] = self._seq_from.get(node)
            cap = self._ack_through.pop(node, None)
            if cap is not None and message.get("success") and message["next_node_idx"] > cap + 1:
                message["next_node_idx"] = cap + 1
        if kind == "apply_command":
            request_id = message.get("request_id")
            if request_id is not None:
                self._onMessageReceived(node, {"type": "apply_command_response", "request_id": request_id,
                                               "error": FAIL_REASON.NOT_LEADER})
            return True
        if kind == "next_node_idx" and getattr(self._syncObj, "journal", None) is not None:
            # Acknowledge after the poll that brought the entries, with one
            # fsync for every append_entries that poll delivered (follower
            # group commit): see flush_acknowledgements.
            self.deferred_acks.append((node, message))
            return True
        self._sent_at[node] = monotonic()
        return super().send(node, message)

    def flush_acknowledgements(self) -> None:
        """Sync the journal once, then send the acknowledgements it covers."""
        if not self.deferred_acks:
            return
        acks, self.deferred_acks = self.deferred_acks, []
        self._syncObj.journal.sync()
        now = monotonic()
        for node, message in acks:
            self._sent_at[node] = now
            super().send(node, message)


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
        journal_limit: int | None = None,
        max_entry_bytes: int = 8 << 20,
        on_role_change=None,
        on_fatal=None,
    ) -> None:
        if not partner_addresses:
            raise ValueError("a Raft node needs partners; a cluster of one is lone.LoneReplica")
        self.state = QueueState()
        self.on_role_change = on_role_change
        self.on_fatal = on_fatal
        self.fatal_error: str | None = None
        # When the node last finished a tick (time.monotonic()): the server's
        # turns (server/turns.py) yield to its ticker once this is overdue.
        self.ticked_at = time.monotonic()
        self.observations = RaftObservations()  # elections, snapshots, commit times (observed.py)
        self.journal_limit = journal_limit
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
        self.snapshots = RaftSnapshots(self, self.dump_path, clock=monotonic)  # docs/pysyncobj.md D5
        self.snapshot_writer = self.snapshots.writer
        self._partners = list(partner_addresses)
        timing = timing or RaftTiming()
        self._keepalive_period = timing.heartbeat
        self._next_keepalive = 0.0
        self.leader_fallback = timing.leader_fallback
        self._hear_window = timing.hear_window
        self._hears_majority = False
        self._election_min = timing.election_min
        self._prevote_round = 0
        self._prevote_term: int | None = None  # the term the current pre-vote asks about
        self._prevote_started = float("-inf")
        self._prevote_grants: set = set()
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
            serializer=self.snapshots.write,
            deserializer=self.snapshots.read,
            serializeChecker=lambda: _SERIALIZER_STATES[self.snapshots.progress()],
            # pysyncobj's own triggers (entries, seconds) are off: a snapshot
            # starts only when snapshots.due() says so (docs/pysyncobj.md D5).
            logCompactionMinEntries=float("inf"),
            logCompactionMinTime=float("inf"),
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
        self.journal = journal_file.journal if journal_file is not None else None
        self.snapshots.load_at_start(self.journal)
        self.epoll_poller: EpollPoller = self._poller  # pysyncobj_patches installs it (on_loop.py)
        self._poll_sockets = self._poller.poll
        self._poller.poll = self._sync_then_poll
        self._ticker: LoopTicker | None = None
        self._destroyed = False

    # ------------------------------------------------------------ lifecycle
    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Tick on `loop`, the server's (on_loop.py). A test may instead call
        `tick` itself on a node it never starts (tests/support/ticked.py)."""
        self._ticker = LoopTicker(self, loop)
        # pysyncobj wakes its tick thread through a pipe when a command is
        # submitted; on the loop, a call_soon does (no write, no wake-up).
        self._SyncObj__pipeNotifier = self._ticker
        self._ticker.start()

    def stop(self) -> None:
        """Stop ticking and release the node's files (from the loop's thread, if it ticks on one)."""
        if self._ticker is not None:
            self._ticker.stop()
        self._destroy()
        # A clean stop lets a snapshot being written finish; a failing node does not wait.
        self.snapshot_writer.end(0.0 if self.fatal_error is not None else snapshot_writer.GRACE)
        if self._temp_dir is not None:
            shutil.rmtree(self._temp_dir, ignore_errors=True)

    def _SyncObj__applyLogEntries(self):
        # Point 16: apply, but do not make the leader announce the new commit index.
        SyncObj._SyncObj__applyLogEntries(self)
        return False

    def _sync_then_poll(self, timeout):
        journal = self.journal
        if journal is not None and journal.dirty and self.policy.durable:
            # The leader has just sent new entries to its followers; syncing
            # its own copy now, in the journal's worker, overlaps with their
            # round trip, and this thread still reads their acknowledgements
            # meanwhile (apply_entry waits for the entry's own bytes).
            journal.sync_in_background()
        try:
            return self._poll_sockets(timeout)
        finally:
            if self.transport is not None:
                self.transport.flush_acknowledgements()

    def tick_once(self, *, events_first: bool = False) -> bool:
        """One tick, its failures handled; False once the node must stop ticking.
        `events_first`: hand out the sockets' pending events before the tick's
        work, which then acts on them (the loop asks when a socket is ready)."""
        try:
            if events_first:
                self._poller.poll(0)
            self.tick(0)
        except JournalError as exc:
            # D11: a node that cannot write its journal must not say
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
        policy, the snapshot trigger. The loop's ticker calls it (on_loop.py); a
        test may instead tick nodes it never started, by hand (tests/support/ticked.py)."""
        self.doTick(timeout)
        self.ticked_at = time.monotonic()  # the server's clock (server/turns.py), not Raft's
        self.observations.note_commit(self.raftCommitIndex, self.ticked_at)
        if self._isLeader():
            self.observations.note_followers(self.peer_match_indexes, self.ticked_at)
        if monotonic() >= self._next_keepalive and self.transport is not None:
            self._next_keepalive = monotonic() + self._keepalive_period
            self.transport.keep_alive(self._keepalive_period)
        self._watch_majority()
        journal = self.journal
        if journal is not None:
            if not self.policy.durable:
                journal.sync()
            if journal.failed is not None:  # raised somewhere pysyncobj swallowed it
                raise JournalError(journal.failed)
        if self.snapshots.due():
            self.forceLogCompaction()  # pysyncobj calls snapshots.write at its next tick

    def _watch_majority(self) -> None:
        """Point 9: track whether this node hears a majority; on regaining it, wait afresh."""
        if not self._partners or self.transport is None:
            return
        heard = self._is_majority(self.transport.peers_heard_within(self._hear_window) + 1)
        if heard and not self._hears_majority and not self._isLeader():
            self._SyncObj__raftElectionDeadline = monotonic() + self._SyncObj__generateRaftTimeout()
        self._hears_majority = heard

    def read_lease_valid(self) -> bool:
        """May this leader answer a read, or hand out a reservation, now?

        Only while a majority (itself included) acknowledged appends that it
        sent in its current term within `hear_window` (shorter than the
        minimum election timeout): each of those followers reset its election
        timer on receiving one, after it was sent, and grants no pre-vote
        within election_min of that; so no other leader can exist until the
        oldest of those sends is `election_min` old, and the lease ends
        earlier, at `hear_window`. Timed from the send, not from when the
        answer arrived: a leader whose thread stalled reads old answers late,
        and they prove nothing about now. Keepalives, pre-votes and vote
        requests prove nothing about leadership and do not count (docs/pysyncobj.md D12).
        """
        if not self._partners:
            return True
        transport = self.transport
        if transport is None or not self._isLeader():
            return False
        now = lease_clock()
        if now < transport.lease_until:
            return True
        # The lease lasts until the send the majority acknowledged is hear_window
        # old. Within a term acknowledgements only move forward, so that end holds
        # until it passes (reset_lease forgets it on a new role): a read asked per
        # datagram (the id service) need not count peers each time.
        transport.lease_until = transport.majority_acknowledged_at(self._peers_for_majority()) + self._hear_window
        return now < transport.lease_until

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
        return transport.majority_acknowledged_at(self._peers_for_majority()) > lease_clock() - seconds

    def _peers_for_majority(self) -> int:
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
        now = monotonic()
        if now - self.transport.stale_leader_heard_at < self._election_min:
            return True  # our term outran a live leader's: only an election reconciles them
        term = self.raftCurrentTerm + 1
        if self._prevote_term == term and self._is_majority(len(self._prevote_grants) + 1):
            self._prevote_term = None  # spent: the next campaign asks again
            return True
        if self._prevote_term != term or now - self._prevote_started >= self._keepalive_period:
            self._start_prevote(term, now)
        return False

    def _start_prevote(self, term: int, now: float) -> None:
        self._prevote_round += 1
        self._prevote_term, self._prevote_started, self._prevote_grants = term, now, set()
        message = {"type": PREVOTE, "term": term, "round": self._prevote_round,
                   "last_log_index": self._SyncObj__getCurrentLogIndex(),
                   "last_log_term": self._SyncObj__getCurrentLogTerm()}
        for node in self._SyncObj__otherNodes:
            self.transport.send(node, message)

    def _on_prevote_message(self, node, message: dict) -> None:
        """Both sides of a pre-vote; runs in the tick thread (a received message)."""
        if message["type"] == PREVOTE:
            heard_leader = monotonic() - self.transport.leader_heard_at < self._election_min
            mine = (self._SyncObj__getCurrentLogTerm(), self._SyncObj__getCurrentLogIndex())
            granted = (not self._isLeader() and not heard_leader
                       and message["term"] > self.raftCurrentTerm
                       and (message["last_log_term"], message["last_log_index"]) >= mine)
            self.transport.send(node, {"type": PREVOTE_REPLY, "term": message["term"],
                                       "round": message["round"], "granted": granted})
        elif (message.get("granted") and message.get("round") == self._prevote_round
              and message.get("term") == self._prevote_term):
            self._prevote_grants.add(node)

    # --------------------------------------------------------- replication
    def submit(self, data: bytes, callback) -> None:
        """Append an encoded batch; callback(applied, error) runs in a tick, on the loop
        (`applied`: haqueue.core.effects.Applied, or None if this node is stopping)."""
        self.apply_entry(data, callback=callback)

    @replicated
    def apply_entry(self, data):
        if self.fatal_error is not None:
            return None  # stopping: apply nothing more (the connections close)
        self.snapshots.log_bytes += len(data)
        journal = self.journal
        if journal is not None:
            # This entry is on this node's disk before any reply reports it.
            journal.sync(through=journal.end_of_index(self.raftLastApplied + 1))
        try:
            stamp, commands = decode_batch(data)
        except LogFormatError as exc:
            self._fatal(f"cannot apply a log entry: {exc}; refusing to run with a diverged state")
            return None
        return applying.apply_entry(self.state, stamp, commands)

    def _fatal(self, message: str) -> None:
        if self.fatal_error is None:
            self.fatal_error = message
            log.critical(message)
            if self.on_fatal is not None:
                self.on_fatal(message)

    # ---------------------------------------------------------- leadership
    def _state_changed(self, old: int, new: int) -> None:
        if self.transport is not None:
            self.transport.reset_lease()
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


_SERIALIZER_STATES = {None: SERIALIZER_STATE.NOT_SERIALIZING, snapshot_writer.RUNNING: SERIALIZER_STATE.SERIALIZING,
                      snapshot_writer.DONE: SERIALIZER_STATE.SUCCESS, snapshot_writer.FAILED: SERIALIZER_STATE.FAILED}


FAIL_SUCCESS = FAIL_REASON.SUCCESS
