"""SyncingTransport: pysyncobj's TCP transport, with haqueue's rules where messages arrive and leave.

Every message a node receives goes through `received`, which notes when the
peer was last heard and hands the message to the handler for its kind
(`_handlers`: kind -> handler); kinds without one go straight to pysyncobj.
Each handler says which deviation it implements (docs/pysyncobj.md):

  append_entries    note a current leader heard (stickiness, D24), trim to what
                    Raft would act on (D14), tell a leader of a lower term (D24)
  next_node_idx     the read lease's acknowledgement (D12); the next index never
                    moves back on a success (D15); when a follower last answered (D26)
  haqueue-keepalive a follower that answered within SLOW_ACK and talks at this
                    leader's term still counts for its leader fallback (D26)
  request_vote      leader stickiness for real votes (D24)
  haqueue-prevote   both sides of a pre-vote (D9)
  haqueue-stale-term  a follower's term outran ours: step down (D24)

What leaves goes through `send`: an acknowledgement waits until the entries it
covers are synced, in the journal's worker, the loop waiting at most
ACK_SYNC_WAIT for it (D3), keepalives carry the term (D26), appends are numbered for the lease (D12), forwarding
is answered locally with NOT_LEADER (D7), nothing leaves a node that must stop
(D11), and idle links get keepalives (D8).

The decisions are the pure modules' (prevote.py, lease.py); this module reads
pysyncobj's state into them and acts on the answers. It runs in whatever
drives the node's ticks (the server's loop, or a test ticking by hand).
"""

from __future__ import annotations

import selectors
import time

from haqueue.replication import pysyncobj_patches
from haqueue.replication.pysyncobj_patches import monotonic

pysyncobj_patches.install()  # before anything else imports pysyncobj (it checks the version)

from pysyncobj.config import FAIL_REASON  # noqa: E402
from pysyncobj.tcp_connection import CONNECTION_STATE  # noqa: E402
from pysyncobj.transport import TCPTransport  # noqa: E402

from haqueue.replication import append_guard, keepalives, prevote  # noqa: E402
from haqueue.replication.election_events import ElectionEvents  # noqa: E402
from haqueue.replication.lease import ReadLease  # noqa: E402

# Any message type pysyncobj does not know is ignored on arrival (also by
# older haqueue nodes); reading it keeps the link alive.
KEEPALIVE = {"type": "haqueue-keepalive"}
PREVOTE = "haqueue-prevote"  # would you vote for me at this term? (docs/pysyncobj.md D9)
PREVOTE_REPLY = "haqueue-prevote-reply"
# A follower whose term is above that of a leader it hears says so (D24): pysyncobj
# ignores such a leader's appends silently, and sticky peers ignore its votes.
STALE_TERM = "haqueue-stale-term"
# A leader that stopped leading for good (its journal failed, it is shutting down, it
# handed off) says so: it answers no read from then on, so its followers may stop
# being sticky to it and elect a successor at once (D37).
RESIGN = "haqueue-resign"
FINISH_WAIT = 0.1  # seconds a stopping node waits for its last bytes to leave and its peers to close (destroy)
# The leader numbers its append_entries; a follower's acknowledgement
# carries the number of the last one it processed from that leader (D12).
APPEND_SEQ = "haq_seq"
# A follower acknowledges only what is on its disk; a slow disk (issue 23: one write a
# second) delays its answers, not its keepalives. A leader keeps counting a follower
# that answered within SLOW_ACK and still sends keepalives at the leader's term (its
# leader fallback, the /leader check: D26); the read lease counts answers only.
SLOW_ACK = 3.0
ACK_SYNC_WAIT = 0.02  # seconds the loop waits for a follower's sync before it moves on
CONNECTED, DISCONNECTED = CONNECTION_STATE.CONNECTED, CONNECTION_STATE.DISCONNECTED


def lease_clock() -> float:
    """The read lease's clock: CLOCK_BOOTTIME, which (unlike CLOCK_MONOTONIC)
    keeps counting while the machine is suspended, so a lease cannot outlive a
    suspend it did not see (docs/cluster.md, "The read lease")."""
    return time.clock_gettime(time.CLOCK_BOOTTIME)


class SyncingTransport(TCPTransport):
    """Syncs the journal before anything leaves the node (Raft: persist, then respond),
    and applies haqueue's election, lease and forwarding rules to what arrives."""

    def __init__(self, syncObj, selfNode, otherNodes):
        self._outgoing: set = set()  # before super(): it adds the nodes
        super().__init__(syncObj, selfNode, otherNodes)
        self.peers_up: set = set()
        self.last_heard: dict = {}  # node -> when its last message came (pysyncobj_patches.monotonic)
        self.deferred_acks: list = []  # next_node_idx messages of this poll, not yet handed to the sync
        self._waiting_acks: list = []  # (journal offset they need on disk, node, message, term), in order
        self.ack_heard_at: dict = {}  # as leader: node -> its last acknowledgement (this role and term)
        self.slow_heard_at: dict = {}  # as leader: node -> its last keepalive counted by SLOW_ACK
        # append_entries of this node's term or later. A node starting now may
        # have acknowledged a leader just before it stopped: treat that leader
        # as just heard, so its lease holds against this node's votes too (D24).
        self.leader_heard_at = monotonic()
        self.lease = ReadLease()  # as leader (D12)
        self.round_trip: dict = {}  # as leader: node -> seconds its latest acknowledged append took (D38)
        self.elections = ElectionEvents()
        self._seq_from: dict = {}  # as follower: the seq of the last append processed per leader
        self._ack_through: dict = {}  # node -> cap on the next acknowledgement (append_guard)
        self._sent_at: dict = {}  # node -> when this node last sent it anything (keep_alive)
        self._handlers = {
            "append_entries": self._on_append_entries,
            "next_node_idx": self._on_next_node_idx,
            "request_vote": self._on_request_vote,
            PREVOTE: self._on_prevote,
            PREVOTE_REPLY: self._on_prevote_reply,
            STALE_TERM: self._on_stale_term,
            RESIGN: self._on_resign,
            KEEPALIVE["type"]: self._on_keepalive,
        }
        syncObj.transport = self

    # ------------------------------------------------------------ arriving
    def setOnMessageReceivedCallback(self, callback):
        if callback is None:
            return super().setOnMessageReceivedCallback(None)
        last_heard = self.last_heard
        handlers = self._handlers

        def received(node, message):
            now = last_heard[node] = monotonic()
            handler = handlers.get(message.get("type"))
            if handler is None:
                callback(node, message)
            else:
                handler(node, message, callback, now)

        return super().setOnMessageReceivedCallback(received)

    def _on_append_entries(self, node, message, deliver, now) -> None:
        sync_obj = self._syncObj
        term = message.get("term", -1)
        if term >= sync_obj.raftCurrentTerm:
            self.leader_heard_at = now
            serialized = message.get("serialized")
            if serialized is not None and serialized[2]:  # the last chunk of the leader's snapshot
                sync_obj.snapshots.superseded()
            self._seq_from[node] = message.get(APPEND_SEQ)  # pysyncobj answers it
            if term > sync_obj.raftCurrentTerm and sync_obj._isLeader():
                sync_obj.stepdown_reason = f"heard leader {node.address} of term {term}"
        else:
            # pysyncobj ignores a leader of a lower term without a word, and
            # our sticky peers ignore our votes while they hear it: tell it (D24).
            self.elections.stale_leader(node.address, term, sync_obj.raftCurrentTerm, now)
            self.send(node, {"type": STALE_TERM, "term": sync_obj.raftCurrentTerm})
        # pysyncobj would truncate entries that do not conflict
        # (append_guard.py); hand it the message Raft would act on.
        trimmed = append_guard.trim(message, sync_obj._SyncObj__raftLog)
        self._ack_through[node] = trimmed.get(append_guard.ACK_THROUGH)
        deliver(node, trimmed)

    def _on_next_node_idx(self, node, message, deliver, now) -> None:
        sync_obj = self._syncObj
        sent_at = self.lease.acknowledged(node, message.get(APPEND_SEQ), sync_obj.raftCurrentTerm,
                                          sync_obj._isLeader())
        if sent_at is not None:
            self.round_trip[node] = lease_clock() - sent_at
        self.ack_heard_at[node] = now
        if not message.get("success") or message.get("reset"):
            deliver(node, message)
            return
        # An acknowledgement of an older append_entries must not move the
        # leader's next-to-send position back (D15): pysyncobj would resend
        # entries the follower has, and the follower would truncate and
        # rewrite entries it already acknowledged. If a send was really lost,
        # the follower's consistency check answers with reset=True and the
        # position is corrected.
        next_index = sync_obj._SyncObj__raftNextIndex
        sent = next_index.get(node)
        deliver(node, message)
        if sent is not None and next_index.get(node, sent) < sent:
            next_index[node] = sent

    def _on_keepalive(self, node, message, deliver, now) -> None:
        # A follower that answered this leader within SLOW_ACK and still talks at its
        # term (so follows no other leader) is on a slow disk, not gone (D26):
        # pysyncobj's leader fallback counts only answers, and stepped down (issue 23).
        sync_obj = self._syncObj
        if (message.get("term") == sync_obj.raftCurrentTerm and sync_obj._isLeader()
                and now - self.ack_heard_at.get(node, float("-inf")) < SLOW_ACK):
            self.slow_heard_at[node] = now
            sync_obj._SyncObj__lastResponseTime[node] = now

    def slow_followers(self, seconds: float) -> set:
        """As leader: the followers that count by SLOW_ACK (D26) and were heard within `seconds`."""
        now = monotonic()
        return {node for node, heard in self.slow_heard_at.items()
                if now - heard < seconds and now - self.ack_heard_at.get(node, float("-inf")) < SLOW_ACK}

    def voter(self, now: float) -> prevote.Voter:
        """This node's side of a ballot, read from pysyncobj."""
        sync_obj = self._syncObj
        leading = sync_obj._isLeader()
        may_hold = leading and self.lease.may_hold(lease_clock(), sync_obj.peers_for_majority(),
                                                   sync_obj.election_min)
        return prevote.Voter(term=sync_obj.raftCurrentTerm, last_log_term=sync_obj._SyncObj__getCurrentLogTerm(),
                             last_log_index=sync_obj._SyncObj__getCurrentLogIndex(), leading=leading,
                             heard_leader_ago=now - self.leader_heard_at, lease_may_hold=may_hold,
                             voted_for=sync_obj._SyncObj__votedForNodeId)

    @staticmethod
    def _ask(message) -> prevote.Ask:
        return prevote.Ask(message["term"], message["last_log_term"], message["last_log_index"])

    def _on_request_vote(self, node, message, deliver, now) -> None:
        sync_obj = self._syncObj
        decision = prevote.vote(self.voter(now), self._ask(message), sync_obj.election_min)
        if decision.outcome == prevote.IGNORED:
            self.elections.answered("vote", node.address, message["term"], decision, now)
            return  # neither granted nor its term adopted (D24)
        if sync_obj._isLeader() and message["term"] > sync_obj.raftCurrentTerm:
            sync_obj.stepdown_reason = f"vote request of term {message['term']} from {node.address}"
        before = (sync_obj.raftCurrentTerm, sync_obj._SyncObj__votedForNodeId)
        deliver(node, message)  # pysyncobj decides; the event says what it did
        granted = (sync_obj._SyncObj__votedForNodeId == node.id
                   and before != (sync_obj.raftCurrentTerm, node.id))
        if granted != decision.granted:
            decision = prevote.Decision(prevote.GRANTED if granted else prevote.REFUSED,
                                        "" if granted else "pysyncobj refused it")
        self.elections.answered("vote", node.address, message["term"], decision, now)

    def _on_prevote(self, node, message, deliver, now) -> None:
        decision = prevote.prevote(self.voter(now), self._ask(message), self._syncObj.election_min)
        self.elections.answered("pre-vote", node.address, message["term"], decision, now)
        if decision.granted:
            self._syncObj.back_campaigner(node, message["term"])
        self.send(node, {"type": PREVOTE_REPLY, "term": message["term"], "round": message["round"],
                         "granted": decision.granted})

    def _on_prevote_reply(self, node, message, deliver, now) -> None:
        sync_obj = self._syncObj
        campaign = sync_obj.campaign
        campaign.answered(node, message.get("term"), message.get("round"), bool(message.get("granted")))
        if campaign.won(sync_obj.raftCurrentTerm, sync_obj._is_majority):
            sync_obj.campaign_ready = True  # campaign in this tick, not the next full one (D9)

    def _on_stale_term(self, node, message, deliver, now) -> None:
        sync_obj = self._syncObj
        term = message.get("term")
        if isinstance(term, int) and term > sync_obj.raftCurrentTerm and sync_obj._isLeader():
            sync_obj.step_down(term, f"{node.address} has term {term}, above ours")

    def _on_resign(self, node, message, deliver, now) -> None:
        # Only the leader this node follows, of this term, ends its own stickiness; a late
        # resignation of an older term, or one from any other node, changes nothing.
        sync_obj = self._syncObj
        term = message.get("term")
        if term != sync_obj.raftCurrentTerm or sync_obj._SyncObj__raftLeader != node:
            leader = sync_obj._SyncObj__raftLeader
            self.elections.resignation_ignored(node.address, term, sync_obj.raftCurrentTerm,
                                               leader.address if leader is not None else None)
            return
        self.leader_heard_at = float("-inf")
        sync_obj._SyncObj__raftLeader = None
        self.elections.leader_resigned(node.address, term)

    def announce_resignation(self, term: int, successor) -> None:
        """As a leader that has just stopped leading `term` (and answers nothing from
        now on): tell every peer (D37). `successor`, if any, is told last, and first
        gets pysyncobj's timeout_now, which makes it campaign at once: it still takes
        this node for its leader when it reads that, and the others have their
        resignation in flight before it asks them for a vote."""
        # _send, not send: a node that must stop says nothing else (D11), but this it says.
        resign = {"type": RESIGN, "term": term}
        for node in self._syncObj._SyncObj__otherNodes:
            if node != successor:
                self._send(node, resign)
        if successor is not None:
            self._send(successor, {"type": "timeout_now", "term": term})
            self._send(successor, resign)

    # ------------------------------------------------------------ elections and the lease
    def ask_for_prevotes(self, term: int, round_: int) -> None:
        """Would the peers vote for this node at `term`? (D9; their answers go to the campaign)"""
        sync_obj = self._syncObj
        message = {"type": PREVOTE, "term": term, "round": round_,
                   "last_log_index": sync_obj._SyncObj__getCurrentLogIndex(),
                   "last_log_term": sync_obj._SyncObj__getCurrentLogTerm()}
        for node in sync_obj._SyncObj__otherNodes:
            self.send(node, message)

    def watch_lease(self, window: float) -> None:
        """On a leader, every tick: say when the read lease lapses (election_events throttles it)."""
        sync_obj = self._syncObj
        if self.lease.lost(lease_clock(), sync_obj.peers_for_majority(), window):
            self.elections.lease_lost(sync_obj.raftCurrentTerm,
                                      f"no majority acknowledged an append sent within {window} s", monotonic())

    def role_changed(self, was_leader: bool, leads: bool) -> None:
        """A new role (pysyncobj's onStateChanged): say why a leader stepped down, and
        forget the lease: nothing acknowledged before counts (D12)."""
        sync_obj = self._syncObj
        if was_leader:
            reason, sync_obj.stepdown_reason = sync_obj.stepdown_reason, None
            self.elections.stepped_down(sync_obj.raftCurrentTerm, reason or (
                f"no answer from a majority within {sync_obj.leader_fallback} s"))
            if self.lease.dropped():
                self.elections.lease_lost(sync_obj.raftCurrentTerm, "stepped down", monotonic())
        if leads:
            sync_obj.stepdown_reason = None
        self.lease.reset()
        self.ack_heard_at.clear()
        self.slow_heard_at.clear()

    # ------------------------------------------------------------ links
    def peers_heard_within(self, seconds: float) -> int:
        since = monotonic() - seconds
        count = 0
        for heard in self.last_heard.values():  # every tick: a loop, not a generator
            if heard > since:
                count += 1
        return count

    def writing(self) -> bool:
        """Has a link bytes it could not write yet (it waits for its socket)?"""
        for conn in self._connections.values():
            if conn.getSendBufferSize():
                return True
        return False

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

    def _onTick(self):
        # pysyncobj binds its server and dials the peers it should on every tick: a
        # dozen node lookups, for nothing while every link this node dials is up or
        # under way (a link that drops is dialled again from its disconnect callback).
        if self._ready:
            for conn in self._outgoing:
                if conn.state == DISCONNECTED:
                    break
            else:
                return
        super()._onTick()

    def setOnUtilityMessageCallback(self, message, callback):
        # pysyncobj's admin messages on the Raft port would add, remove or hand off
        # without haqueue's checks and events: those go through the leader's admin
        # port only (membership.py, server/membership_http.py).
        if message in ("add", "remove", "transfer"):
            callback = None
        return super().setOnUtilityMessageCallback(message, callback)

    def destroy(self):
        self.close_links(FINISH_WAIT)
        super().destroy()

    def close_links(self, wait: float) -> None:
        """The node stops: each link sends what it still holds, a resignation among it,
        then FIN, and waits (for `wait` seconds in all) for the peer's FIN, reading and
        dropping what the peer sent meanwhile. A close with bytes unread resets the
        link, and a reset drops what the kernel had not delivered yet: followers lost
        the leader's last words that way (docs/pysyncobj.md D33, D37)."""
        deadline = time.monotonic() + wait
        # A selector, not select(): a node serving many clients has descriptors past
        # FD_SETSIZE (1024), and select() refuses those.
        with selectors.DefaultSelector() as waiting:
            for conn in list(self._connections.values()) + list(self._unknownConnections):
                fileno = conn.finish(max(0.0, deadline - time.monotonic()))
                if fileno is not None:
                    waiting.register(fileno, selectors.EVENT_READ, conn)
            while waiting.get_map():
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                for key, _ in waiting.select(left):
                    if key.data.drained():
                        waiting.unregister(key.fd)

    def dropNode(self, node):
        # A member removed (membership.py): nothing it said may count any more,
        # not its acknowledgements for the lease nor its messages for the majority watch.
        conn = self._connections.get(node)
        super().dropNode(node)
        self._outgoing.discard(conn)
        for table in (self.last_heard, self.ack_heard_at, self.slow_heard_at, self._seq_from, self._sent_at,
                      self._ack_through, self.lease.acks, self.round_trip):
            table.pop(node, None)
        self.peers_up.discard(node)

    def keep_alive(self, periods: keepalives.KeepalivePeriods, early: float, ride: float) -> keepalives.NextKeepalive:
        """Send a message pysyncobj ignores (docs/pysyncobj.md D8) on every link that
        needs one within `early` seconds, or whose longer period ends within `ride`
        (the quiet links', sent with the heartbeat before), and say when the next one
        falls due if nothing else is sent meanwhile. Any message keeps a link alive, and
        how soon a link needs one depends on whether this node hears a leader
        (keepalives.py, D35).
        A leader sends none: its heartbeats go to every peer every heartbeat. With this
        node's term: a leader counts a slow follower's keepalives only at its own term (D26)."""
        sync_obj = self._syncObj
        now = monotonic()
        if sync_obj._isLeader():
            return keepalives.NextKeepalive(now + periods.busy, now + periods.busy)
        leader = sync_obj._SyncObj__raftLeader
        heard_at = self.leader_heard()
        sent_at = self._sent_at
        message = None
        next_due = keepalives.NextKeepalive(now + periods.quiet, now + periods.busy)
        for node in list(self.peers_up):
            to_leader = node == leader
            link = keepalives.link_due(periods, sent_at.get(node, keepalives.NEVER), to_leader)
            if link.at(periods, heard_at) <= now + early or (not to_leader and link.latest <= now + ride):
                if message is None:
                    message = {**KEEPALIVE, "term": sync_obj.raftCurrentTerm}
                self.send(node, message)
                link = keepalives.link_due(periods, now, to_leader)
            if not to_leader:  # the leader's link moves with every acknowledgement: keepalive_due
                next_due = keepalives.earliest(next_due, link)
        return next_due

    def keepalive_due(self, periods: keepalives.KeepalivePeriods, others: keepalives.NextKeepalive) -> float:
        """When this node's next keepalive falls due: `others` (keep_alive's answer) read
        against the leader's newest heartbeat, and the leader's link against this node's
        newest acknowledgement (both move on every heartbeat, between keep_alive's calls)."""
        # link_due(...).at(...) written out, without the objects: a follower asks after its
        # ticks (timer_wait).
        leader = self._syncObj._SyncObj__raftLeader
        if leader is None:
            return min(others.latest, others.if_quiet)
        quiet_at = self.leader_heard_at + periods.leader_quiet_after
        due = min(others.latest, max(others.if_quiet, quiet_at))
        if leader in self.peers_up:
            sent = self._sent_at.get(leader, keepalives.NEVER)
            due = min(due, sent + periods.to_leader, max(sent + periods.busy, quiet_at))
        return due

    def leader_heard(self) -> float:
        """When this node last heard the leader it follows (keepalives.NEVER: none)."""
        return self.leader_heard_at if self._syncObj._SyncObj__raftLeader is not None else keepalives.NEVER

    # ------------------------------------------------------------ leaving
    def send(self, node, message):
        if self._syncObj.fatal_error is not None:
            return False  # a node that must stop says nothing more (docs/pysyncobj.md D11)
        kind = message.get("type")
        if kind == "append_entries":
            message[APPEND_SEQ] = self.lease.sent(node, self._syncObj.raftCurrentTerm, lease_clock())
        elif kind == "next_node_idx":
            message[APPEND_SEQ] = self._seq_from.get(node)
            cap = self._ack_through.pop(node, None)
            if cap is not None and message.get("success") and message["next_node_idx"] > cap + 1:
                message["next_node_idx"] = cap + 1
            if getattr(self._syncObj, "journal", None) is not None:
                # Acknowledge after the poll that brought the entries, with one
                # fsync for every append_entries that poll delivered (follower
                # group commit): see flush_acknowledgements.
                self.deferred_acks.append((node, message))
                return True
        elif kind == "apply_command":
            request_id = message.get("request_id")
            if request_id is not None:
                self._onMessageReceived(node, {"type": "apply_command_response", "request_id": request_id,
                                               "error": FAIL_REASON.NOT_LEADER})
            return True
        self._sent_at[node] = monotonic()
        return self._send(node, message)

    def _send(self, node, message) -> bool:
        # TCPTransport.send, with one lookup of the link instead of three.
        conn = self._connections.get(node)
        if conn is None or conn.state != CONNECTED:
            return False
        conn.send(message)
        return conn.state == CONNECTED

    def flush_acknowledgements(self) -> None:
        """Send the acknowledgements whose entries are on disk (D3), one sync for all
        of a poll's (follower group commit).

        With a durable policy the sync runs in the journal's worker and this waits
        for it at most ACK_SYNC_WAIT: on a slow disk (issue 23: one write a second)
        the acknowledgements wait for their bytes, but the loop goes on, so
        keepalives and pre-vote answers still flow and the leader still hears this
        node (D26); a later poll sends them once the sync is done. Other policies
        sync here (at most the entries that reserve ids, journal.py)."""
        if not self.deferred_acks and not self._waiting_acks:
            return  # most polls (every one of a leader's)
        journal = self._syncObj.journal
        term = self._syncObj.raftCurrentTerm
        if self.deferred_acks:
            end = journal.end
            self._waiting_acks.extend((end, node, message, term) for node, message in self.deferred_acks)
            self.deferred_acks = []
        waiting = self._waiting_acks
        if waiting and (waiting[0][3] != term or waiting[-1][0] > journal.end):
            # A new term (a new leader may have cut the log since) or a cut journal:
            # those answers may speak of entries no longer there. Dropped, as if lost
            # on the wire: the leader asks again.
            waiting = self._waiting_acks = [a for a in waiting if a[3] == term and a[0] <= journal.end]
        if not waiting:
            return
        if journal.policy.durable and not journal.policy.never:
            if not journal.synced_through(waiting[-1][0], ACK_SYNC_WAIT):
                synced = journal.synced_end
                self._waiting_acks = [a for a in waiting if a[0] > synced]
                self._send_acks([a for a in waiting if a[0] <= synced])
                return
        else:
            journal.sync()
        self._waiting_acks = []
        self._send_acks(waiting)

    def _send_acks(self, acks: list) -> None:
        now = monotonic()
        for _, node, message, _ in acks:
            self._sent_at[node] = now
            self._send(node, message)
