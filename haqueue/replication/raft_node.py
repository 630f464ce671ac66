"""ReplicatedQueue: a QueueState replicated by pysyncobj, ticked on the server's loop.

This is the only module that subclasses pysyncobj's SyncObj (transport.py
subclasses its TCPTransport). What they change, and why, is the numbered list
in docs/pysyncobj.md (D1-D17, D24, D26, D27 and D29; D18-D23 and D25 are pysyncobj_patches.py's,
D31 membership.py's, D32 and D34 hot_path.py's);
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
import time

from haqueue.replication import pysyncobj_patches
from haqueue.replication.pysyncobj_patches import JournalSpec, monotonic

pysyncobj_patches.install()

from pysyncobj import SyncObj, SyncObjConf, replicated  # noqa: E402
from pysyncobj.config import FAIL_REASON, SERIALIZER_STATE  # noqa: E402

from haqueue.core.commands import LogFormatError, decode_batch
from haqueue.core.state import QueueState
from haqueue.replication import applying
from haqueue.replication import peer_link
from haqueue.replication.member_dir import is_member_dir, mark_member
from haqueue.replication.hot_path import HotPathMixin
from haqueue.replication.membership import MembershipMixin, queued_commands
from haqueue.replication import transport as links
from haqueue.replication.keepalives import NEVER, KeepalivePeriods, NextKeepalive
from haqueue.replication.prevote import ASK, CAMPAIGN, Campaign
from haqueue.replication.transport import SyncingTransport
from haqueue.config.replication import RaftTiming, ReplicationSettings
from haqueue.replication.journal import REGULAR_COMMAND, JournalError, fatal_message, frame, unframe
from haqueue.replication import snapshot_writer
from haqueue.replication.raft_snapshots import RaftSnapshots
from haqueue.replication.observed import RaftObservations
from haqueue.replication.on_loop import EpollPoller, LoopTicker

log = logging.getLogger(__name__)

# Seconds between timer ticks while something is polled rather than timed (timer_wait).
POLLED_PERIOD = 0.02
# Seconds a full tick's periodic checks hold for the light ticks that follow (D32):
# under load a node ticks only for messages, and its checks still run this often.
FULL_PERIOD = 0.02
# ...and for a leader at rest (at_rest, D36), whose timer's ticks are light too.
RESTING_FULL_PERIOD = 0.5

# pysyncobj's state constants (_RAFT_STATE in syncobj.py).
FOLLOWER, CANDIDATE, LEADER = 0, 1, 2
ROLE_NAMES = {FOLLOWER: "follower", CANDIDATE: "candidate", LEADER: "leader"}


class ReplicatedQueue(MembershipMixin, HotPathMixin, SyncObj):
    def __init__(
        self,
        settings: ReplicationSettings,
        *,
        on_role_change=None,
        on_fatal=None,
    ) -> None:
        # The settings, read here once: pysyncobj's SyncObjConf below is built from them.
        self_address, partner_addresses, data_dir = settings.self_address, settings.partners, settings.data_dir
        policy, journal_limit = settings.policy, settings.journal_limit
        if not partner_addresses and not is_member_dir(data_dir):
            # A member left alone (node recover, remove-node) keeps Raft, to grow again
            # (member_dir.py); a cluster that was always one node is lone.LoneReplica.
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
        timing = settings.timing or RaftTiming()
        self._keepalives = KeepalivePeriods.for_timing(timing.heartbeat, timing.connection_timeout, timing.hear_window)
        self._keepalive_slack = timing.heartbeat / 5
        self._next_keepalive = NextKeepalive(0.0, 0.0)
        self._heartbeat = timing.heartbeat
        self.leader_fallback = timing.leader_fallback
        self._hear_window = timing.hear_window
        self._hears_majority = False
        self.election_min = timing.election_min
        self.campaign = Campaign(retry=timing.heartbeat)  # pre-vote rounds (prevote.py, D9)
        self.campaign_ready = False  # an answer just made the round a majority: tick fully
        self.stepdown_reason: str | None = None  # why the next step-down happens, when a handler knows
        self.transport: SyncingTransport | None = None  # set by SyncingTransport itself
        # A link buffers frames up to what an append of this node's may carry (peer_link.py).
        peer_link.allow_frames_of(2 * (settings.max_entry_bytes + 1) + (1 << 20))
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
            serializer=lambda tmp, raft_data: self.snapshots.write(tmp, self.group_at_snapshot(raft_data)),
            deserializer=self.snapshots.read,
            serializeChecker=lambda: _SERIALIZER_STATES[self.snapshots.progress()],
            # pysyncobj's own triggers (entries, seconds) are off: a snapshot
            # starts only when snapshots.due() says so (docs/pysyncobj.md D5).
            logCompactionMinEntries=float("inf"),
            logCompactionMinTime=float("inf"),
            onStateChanged=self._state_changed,
            password=settings.secret,
            dynamicMembershipChange=True,  # add-node, remove-node (membership.py)
            commandsQueueSize=200000,
            # pysyncobj splits an entry at least this big into chunks, and
            # decides which chunk is the last from the entry's raw length,
            # not its pickled length (longer: bytes >= 0x80 expand), so the
            # follower gets a premature "finish", fails to unpickle, and the
            # leader retries later (docs/pysyncobj.md D13). Above the largest entry the
            # batcher makes, that path is never taken.
            appendEntriesBatchSizeBytes=settings.max_entry_bytes + 1,
            maxBindRetries=5,
            bindRetryTime=0.1,
            tcp_keepalive=(1, 1, 3),
            # pysyncobj binds 0.0.0.0 unless told otherwise: nodes sharing a
            # host on distinct addresses would collide, and Raft traffic
            # belongs on the node's own address only.
            bindAddress=self_address,
        )
        super().__init__(self_address, partner_addresses, conf, transportClass=SyncingTransport)
        if self._methodToID != {"apply_entry_v0": 0}:  # what journal.frame writes (submit)
            raise RuntimeError(f"replicated methods {self._methodToID}: apply_entry must be the only one, id 0")
        self.journal = journal_file.journal if journal_file is not None else None
        self.snapshots.load_at_start(self.journal)
        self.adopt_logged_changes()  # the log's group, not only the file's (membership.py)
        mark_member(data_dir)
        self.epoll_poller: EpollPoller = self._poller  # pysyncobj_patches installs it (on_loop.py)
        self._poll_sockets = self._poller.poll
        self._poller.poll = self._sync_then_poll
        self._ticker: LoopTicker | None = None
        self._destroyed = False
        self._full_until = 0.0  # a light tick (D32) is full from then on (monotonic())

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
        if not self._destroyed:
            self.resign("resigned: this node is stopping")  # a successor at once, not after a timeout (D37)
        self._destroy()
        # A clean stop lets a snapshot being written finish; a failing node does not wait.
        self.snapshot_writer.end(0.0 if self.fatal_error is not None else snapshot_writer.GRACE)
        if self._temp_dir is not None:
            shutil.rmtree(self._temp_dir, ignore_errors=True)

    def _checkCommandsToApply(self):
        # D29: pysyncobj asks its command queue on every tick, and an empty one answers by
        # raising queue.Empty under a lock: a tenth of an idle node's Python time. The
        # queue is filled on this thread (submit), so a glance at it is enough.
        if self._SyncObj__commandsQueue._FastQueue__queue:
            # D38: pysyncobj sends to every follower after each command it logs; hold
            # those sends, then send once, to the followers the commit needs.
            logged = self._SyncObj__raftLog[-1][1]
            self.deferring_sends = True
            try:
                SyncObj._checkCommandsToApply(self)
            finally:
                self.deferring_sends = False
            if self._SyncObj__raftLog[-1][1] > logged and self._isLeader():
                self.send_appends(everyone=False)

    def _SyncObj__applyLogEntries(self):
        # Point 16: apply, but do not make the leader announce the new commit index.
        # Nothing is applied while a received snapshot's state is built (raft_snapshots.py).
        if not self.snapshots.loading:
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

    def tick_once(self, *, events_first: bool = False, light: bool = False) -> bool:
        """One tick, its failures handled; False once the node must stop ticking.
        `events_first`: hand out the sockets' pending events before the tick's
        work, which then acts on them (the loop asks when a socket is ready).
        `light`: for messages or commands, not timed work (`tick`)."""
        try:
            if events_first:
                self._poller.poll(0)
            self.tick(0, light=light)
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

    def tick(self, timeout: float, *, light: bool = False) -> None:
        """One pysyncobj tick (waiting up to `timeout` for its sockets), then this
        node's own periodic work: keepalives, the majority watch, the fsync
        policy, the snapshot trigger. The loop's ticker calls it (on_loop.py); a
        test may instead tick nodes it never started, by hand (tests/support/ticked.py).

        `light`: the tick is for messages or a submitted command, not for timed
        work; unless the last full tick is FULL_PERIOD old, it does only what
        messages and commands need (`_light_tick`, D32)."""
        if light and monotonic() < self._full_until and self._light_tick():
            return
        self._full_until = monotonic() + FULL_PERIOD
        self.snapshots.poll_build()  # a received snapshot's state, once built
        self.doTick(timeout)
        self.drive_hand_off()  # a hand-off under way: done once a follower caught up (membership.py)
        self.ticked_at = time.monotonic()  # the server's clock (server/turns.py), not Raft's
        self.observations.note_commit(self.raftCommitIndex, self.ticked_at)
        if self._isLeader():
            self.observations.note_followers(self.peer_match_indexes, self.ticked_at)
        transport = self.transport
        if transport is not None and not self._isLeader():
            # Early: a tick that runs anyway (a heartbeat arrived) sends the keepalives, so
            # the timer need not wake the node for them, nor they the peer on their own.
            # By up to the slack; while the leader's heartbeats come, the quiet links' by up
            # to half of one (they ride the heartbeat that comes nearest before they fall
            # due, however late it is, and not the one before it: D35).
            now = monotonic()
            slack = self._keepalive_slack
            ride = (self._heartbeat / 2 if transport.leader_heard() > now - self._keepalives.leader_quiet_after
                    else slack)
            if now >= self._keepalive_due() - slack or now >= self._next_keepalive.latest - ride:
                self._next_keepalive = transport.keep_alive(self._keepalives, slack, ride)
        self._watch_majority()
        if self.transport is not None and self._isLeader():
            self.transport.watch_lease(self._hear_window)
        journal = self.journal
        if journal is not None:
            if not self.policy.durable:
                journal.sync()
            if journal.failed is not None:  # raised somewhere pysyncobj swallowed it
                raise JournalError(journal.failed)
        if self.snapshots.due():
            self.forceLogCompaction()  # pysyncobj calls snapshots.write at its next tick
        elif self.at_rest():
            # Nothing a full tick checks can change while a leader rests (D36): its lease
            # holds, so its leader fallback cannot strike; its links are up; its log and
            # journal stand still. Its heartbeats go out in light ticks meanwhile.
            self._full_until = monotonic() + RESTING_FULL_PERIOD

    def _light_tick(self) -> bool:
        """A tick for messages or commands (D32): pysyncobj's part is hot_path.py's
        `light_tick`; of this node's own work, only what an entry needs now (the
        server's tick time, the commit time, a hand-off under way, a failed journal).
        False (nothing done) when only a full tick will do."""
        if self.fatal_error is not None or not self.light_tick():
            return False
        if self.campaign_ready:
            # The pre-votes it read make a majority (transport's reply handler says so):
            # campaign in this tick's full part, not at the next timer. Two followers whose
            # timeouts ran out within that wait (50 ms of 300) granted each other and
            # campaigned together: a split vote a third of the time after a leader died
            # (docs/pysyncobj.md D9). A flag, so that a light tick pays one attribute read.
            self.campaign_ready = False
            return False
        if self._transfer is not None:
            self.drive_hand_off()
        self.ticked_at = time.monotonic()
        self.observations.note_commit(self._SyncObj__raftCommitIndex, self.ticked_at)
        if self.transport is not None and self._isLeader():
            # The lease watch, although periodic: the acknowledgements a light tick
            # reads are what make a new leader's lease hold, and a leader paused (or cut
            # off) within 20 ms of it holding must still say, as it steps down, that it
            # lost the lease (election_events; tests/cluster/test_election_events.py).
            self.transport.watch_lease(self._hear_window)
        journal = self.journal
        if journal is not None and journal.failed is not None:
            raise JournalError(journal.failed)
        return True

    def _keepalive_due(self) -> float:
        # While the leader is heard, only the links' longer periods fall due (keepalives.py, D35).
        if self.transport is None:
            return self._next_keepalive.at(self._keepalives, NEVER)
        return self.transport.keepalive_due(self._keepalives, self._next_keepalive)

    def timer_wait(self) -> float:
        """Seconds until this node next has timed work, if no message arrives and
        nothing is submitted meanwhile: the loop's timer sleeps until then (on_loop.py)
        instead of ticking every 20 ms whatever was due.

        A leader's heartbeat, a follower's election deadline, keepalives; never later
        than a heartbeat and its slack from now for a leader (its leader fallback and
        lease watch are checked as ticks pass), nor than the hear window for a follower
        (a safety net: each heartbeat's tick sets the timer later). While something is
        polled rather than timed (a link being (re)connected, a campaign, a snapshot
        writer, the periodic fsync policy's owed sync) the old short period applies."""
        now = monotonic()
        # The keepalives' own time a little late: a tick that comes anyway sends them early.
        # A leader's cap is as late: capped at a heartbeat from the tick a heartbeat brought, a
        # follower's timer fired just as the next heartbeat was due, and when it won the
        # race it found nothing due, 4-5 wake-ups a second for nothing (docs/benchmarks.md).
        # A follower that hears its leader has nothing due before the leader falls quiet
        # (keepalives.py, D35): its timer never fires while the heartbeats come.
        if self._isLeader():  # (which sends no keepalives: its heartbeats go to every peer)
            due = min(self._SyncObj__newAppendEntriesTime, now + self._heartbeat + self._keepalive_slack / 2)
        else:
            due = min(self._keepalive_due() + self._keepalive_slack / 2, now + self._hear_window)
            deadline = self._SyncObj__raftElectionDeadline
            due = min(due, deadline if deadline > now else now + POLLED_PERIOD)
        transport = self.transport
        journal = self.journal
        if (transport is None or len(transport.peers_up) < len(self._SyncObj__otherNodes)
                or self.snapshot_writer.pid or (journal is not None and not self.policy.durable and journal.dirty)):
            due = min(due, now + POLLED_PERIOD)
        return max(0.0, due - now)

    def at_rest(self) -> bool:
        """Is this a leader with nothing under way (D36)? Every entry committed and
        applied and held by every follower, every link up with nothing left to write, no
        command queued, no hand-off, no snapshot written or owed. Only heartbeats and
        their acknowledgements go on, and those it may read a heartbeat late: the lease
        and the leader fallback time an acknowledgement from when its append was sent
        (lease.py), not when it is read."""
        if (not self._isLeader() or self._transfer is not None or self.fatal_error is not None
                or not self.snapshots.settled()):
            return False
        last = self._SyncObj__getCurrentLogIndex()
        if self._SyncObj__raftCommitIndex != last or self.raftLastApplied != last:
            return False
        for index in self._SyncObj__raftMatchIndex.values():
            if index != last:
                return False
        if queued_commands(self._SyncObj__commandsQueue):
            return False
        transport = self.transport
        if transport is None or len(transport.peers_up) < len(self._SyncObj__otherNodes) or transport.writing():
            return False
        # Acknowledgements read a heartbeat late must still find the read lease held:
        # otherwise the sockets are watched, and a lapsed lease is renewed as soon as
        # the answers come (a read waits for it: server/connection.py).
        return transport.lease.valid(links.lease_clock() + self._heartbeat, self.peers_for_majority(),
                                     self._hear_window)

    def _watch_majority(self) -> None:
        """D9: track whether this node hears a majority; on regaining it, wait afresh."""
        if self.transport is None:
            return
        transport = self.transport
        heard = (self._is_majority(transport.peers_heard_within(self._hear_window) + 1)
                 # A follower that hears its leader stands with the majority that leader
                 # answers to (D35): its links to the other followers fall quiet meanwhile,
                 # and when the leader does, they wake long before any election timeout.
                 or (not self._isLeader() and transport.leader_heard() > monotonic() - self._hear_window))
        if heard and not self._hears_majority and not self._isLeader():
            self._SyncObj__raftElectionDeadline = monotonic() + self._SyncObj__generateRaftTimeout()
        self._hears_majority = heard

    def read_lease_valid(self) -> bool:
        """May this leader answer a read, or hand out a reservation, now? Only
        while its read lease holds (lease.py; docs/pysyncobj.md D12, D24)."""
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
        clients waited out the whole stall. A follower on a slow disk that
        answered within SLOW_ACK and was heard within `seconds` counts too (D26).
        """
        transport = self.transport
        if transport is None or not self._isLeader():
            return False
        acked_since = links.lease_clock() - seconds
        acked = {node for node, sent_at in transport.lease.acks.items() if sent_at > acked_since}
        return len(acked | transport.slow_followers(seconds)) >= self.peers_for_majority()

    def peers_for_majority(self) -> int:
        """Peers that make a majority with this node (of the members now: membership.py)."""
        return (self.partner_count() + 1) // 2

    def _is_majority(self, nodes: int) -> bool:
        """Do `nodes` (this one included) make a majority of the cluster?"""
        return nodes > (self.partner_count() + 1) / 2

    def _SyncObj__connectedToAnyone(self) -> bool:
        # pysyncobj asks this (name-mangled) on every tick once a follower's
        # election timeout has run out; True starts a campaign (docs/pysyncobj.md D9).
        if (not self._hears_majority or self.transport is None or self.handing_off()
                or self.snapshots.loading):
            return False  # (a node still building a received snapshot's state cannot lead)
        step = self.campaign.step(self.raftCurrentTerm, monotonic(), self._is_majority)
        if step == CAMPAIGN:
            self.campaign_ready = False  # (a full tick got there first)
            self.transport.elections.election_started(self.raftCurrentTerm + 1)
        elif step == ASK:
            self.transport.ask_for_prevotes(self.campaign.term, self.campaign.round)
        return step == CAMPAIGN

    def back_campaigner(self, asker, term: int) -> None:
        """This node granted `asker`'s pre-vote for `term`: let that one campaign alone. Its
        own round, and the timeout that would start the next, would otherwise run on, and two
        followers whose rounds crossed each granted the other and split the vote (D9). When
        both asked for the same term, the node with the higher address keeps its round,
        both deciding alike: backing off on both sides lost the term as surely."""
        if self._isLeader() or (self.campaign.term == term and self.selfNode.address > asker.address):
            return
        self.campaign.abandon()
        self.campaign_ready = False
        self._SyncObj__raftElectionDeadline = monotonic() + self._SyncObj__generateRaftTimeout()

    def step_down(self, term: int, reason: str) -> None:
        """A leader learns of a higher term outside pysyncobj (transport.py's stale-term
        notice, D24): adopt it and follow, as pysyncobj does for a vote request of that term."""
        self.stepdown_reason = reason
        self._SyncObj__setCurrentTerm(term, None)
        self._SyncObj__setState(FOLLOWER)
        self._SyncObj__raftLeader = None

    # --------------------------------------------------------- replication
    def submit(self, data: bytes, callback) -> None:
        """Append an encoded batch; callback(applied, error) runs in a tick, on the loop
        (`applied`: haqueue.core.effects.Applied, or None if this node is stopping).
        During a leadership hand-off it waits, unsent (membership.py)."""
        if self.hold(data, callback):
            return
        # What apply_entry(data, callback=callback) logs, framed as the lone node and
        # the tools frame it (journal.frame): pysyncobj's decorator pickles with
        # protocol 2, where bytes become a latin-1 string and a call to
        # _codecs.encode to turn them back, on every node (issue 24).
        self._applyCommand(frame(data), callback)

    @replicated
    def apply_entry(self, data):
        """The one replicated method (D1, method id 0): what a log entry does."""
        return self._apply_entry(data)

    def _SyncObj__doApplyCommand(self, command):
        # pysyncobj unpickles with its Python 2 fallback, then calls through the
        # decorator with keyword arguments; a regular entry is always apply_entry's.
        if command[0] == REGULAR_COMMAND:
            return self._apply_entry(unframe(command))
        return super()._SyncObj__doApplyCommand(command)

    def _apply_entry(self, data):
        if self.fatal_error is not None:
            return None  # stopping: apply nothing more (the connections close)
        self.snapshots.log_bytes += len(data)
        journal = self.journal
        if journal is not None and self._isLeader():
            # This entry is on this node's disk before any reply reports it. Only a
            # leader replies; a follower applies what a majority already holds, and
            # waiting here for a slow disk (issue 23) stopped its loop, so its leader
            # heard nothing from it and stepped down (D3).
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
            # D11, D37: no heartbeat or acknowledgement after this; only the word that
            # frees the followers to elect a successor now rather than after a timeout.
            self.resign(f"resigned: {message}")
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
            "members": self.members(),  # Raft addresses, as this node knows them (membership.py)
        }


_SERIALIZER_STATES = {None: SERIALIZER_STATE.NOT_SERIALIZING, snapshot_writer.RUNNING: SERIALIZER_STATE.SERIALIZING,
                      snapshot_writer.DONE: SERIALIZER_STATE.SUCCESS, snapshot_writer.FAILED: SERIALIZER_STATE.FAILED}


FAIL_SUCCESS = FAIL_REASON.SUCCESS
