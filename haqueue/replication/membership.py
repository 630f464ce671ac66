"""Who is in the Raft group: membership changes online, one at a time, learnt from the log.

pysyncobj has Raft's single-server membership changes (Raft thesis 4.1): an
entry of its own type (MEMBERSHIP) adds or removes one node, takes effect on
each node as soon as that node appends it (committed or not), is undone if the
entry is truncated, and a second change is refused until the first is applied.
ReplicatedQueue turns them on (dynamicMembershipChange) and mixes in
`MembershipMixin`, which adds what haqueue needs on top:

- The membership a node starts with is the log's, not the cluster file's: the
  file's nodes, then the snapshot's (pysyncobj stores the group in it), then
  every change in the journal after it, in order, committed or not (Raft's rule:
  a server uses the latest configuration in its log). pysyncobj applies a
  change on restart only once it is committed again, so a restarted node ran on
  the file's group until it heard its leader, and the file may be older than
  the log (an operator who forgot to copy it). `adopt_logged_changes` does it
  at start and after a snapshot is loaded.
- Every change that takes effect (or is undone) on a node is an event
  (events.record: "membership"), so an operator sees when each node learnt it.
- `change(op, address, done, info)` is the leader's entry point (server/
  membership_http.py calls it through Replica): it refuses what Raft must not
  do (a change while one is in flight, removing itself, adding a member twice)
  with one line, and reports the outcome once the entry is committed. An
  addition carries the new node's id and admin and client addresses (`info`)
  as an attribute of the node pysyncobj pickles into the entry (and into
  snapshots), so every node can show and reach a member its cluster file does
  not name yet (`member_info`). The log format stays compatible: an older
  haqueue unpickles the node with one attribute it never reads.
- `hand_off(done)`: a leader about to be removed gives up leadership first,
  as Raft's leadership transfer does (Raft thesis 3.10; etcd's MoveLeader).
  It stops taking new entries (`hold`: every entry submitted meanwhile waits,
  unsent, in this node), and on every tick (`drive_hand_off`) looks for a
  connected follower whose match index has reached its last entry. Under
  load followers are always a few entries behind; with nothing new appended
  they catch up within a round trip or two. Then it stops leading (its
  sessions close; no read or write is answered by it after this point, so its
  read lease cannot overlap a successor's), keeps out of the next election for
  `HAND_OFF_QUIET` seconds, and sends pysyncobj's `timeout_now` to that
  follower, which campaigns first. The held entries were never appended:
  they fail as any entry of a leader that steps down (their clients'
  connections close, as at every leader change), and nothing acknowledged is
  lost. If no follower catches up within one maximum election timeout, the
  leader appends the held entries, serves on, and `done` gets one line.
  It tells every follower it resigned (D37), so none holds to it (D24's
  stickiness) and the target's campaign wins at once; Raft's vote rule still
  never elects a node whose log is behind. A leader that must stop now (its
  journal failed, it is shut down: `resign`) cannot wait for a follower to
  catch up: it names the connected follower holding most of its log. Each
  step is an event: `leadership_hand_off_started`, then `leadership_hand_off`
  (with the milliseconds held) or `leadership_hand_off_failed`.

Everything here runs on the node's one thread (the loop's, on_loop.py), as
pysyncobj's tick does.
"""

from __future__ import annotations

import logging
import pickle

from haqueue import events
from haqueue.replication.pysyncobj_patches import monotonic
from haqueue.replication.replica import MembershipRefused

log = logging.getLogger(__name__)

MEMBERSHIP_TYPE = 2  # pysyncobj's _COMMAND_TYPE.MEMBERSHIP (syncobj.py)
HAND_OFF_QUIET = 3.0  # seconds a leader that handed off keeps out of elections (several election_max)

ADD, REMOVE = "add", "rem"  # pysyncobj's request words


def parse_request(command: bytes):
    """(op, address) of a journal command that changes the membership, else None."""
    if not command or command[0] != MEMBERSHIP_TYPE:
        return None
    request = pickle.loads(command[1:])
    return request[0], str(request[1])


def encode_request(op: str, address: str) -> bytes:
    """A journal command pysyncobj reads as this change (recover.py writes them offline).
    pysyncobj itself writes [op, id, node]; without the node it builds one from the id."""
    return bytes([MEMBERSHIP_TYPE]) + pickle.dumps([op, address])


class MembershipMixin:
    """Mixed into ReplicatedQueue (before SyncObj): see the module docstring."""

    _hand_off_until = float("-inf")
    removed_by_entry = False  # applied a committed entry removing this node (removal.py)
    _adopting = False
    _change_in_flight = None  # the term a change was submitted in, outcome not known yet (queued until a tick)
    _transfer = None  # the hand-off under way (_Transfer), if any

    # ----------------------------------------------------------- the group
    def members(self) -> list[str]:
        """Every member's Raft address, this node's included, sorted."""
        others = getattr(self, "_SyncObj__otherNodes", ())
        me = getattr(self, "_SyncObj__selfNode", None)
        return sorted([n.address for n in others] + ([me.address] if me is not None else []))

    def group(self) -> set:
        """The group as pysyncobj holds it now: its node objects, this node's included."""
        return set(self._SyncObj__otherNodes) | {self._SyncObj__selfNode}

    def member_info(self) -> dict[str, dict]:
        """{Raft address: {"id", "host", "admin_port", "client_port"}} for the members
        whose addition carried them (module docstring); the others are in the file."""
        others = getattr(self, "_SyncObj__otherNodes", ())
        return {n.address: dict(n.haqueue_member) for n in others
                if isinstance(getattr(n, "haqueue_member", None), dict)}

    def members_settled(self) -> bool:
        """Is the last membership change this node logged committed and applied here?
        (A leader's members, settled, are the cluster's committed membership.)"""
        pending = getattr(self, "_SyncObj__changeClusterIDx", None)
        return self._change_in_flight is None and (pending is None or self._SyncObj__raftLastApplied >= pending)

    def partner_count(self) -> int:
        return len(getattr(self, "_SyncObj__otherNodes", ()))

    def adopt_logged_changes(self, after: int = 0) -> None:
        """Apply every membership change in the log past index `after` (module docstring)."""
        self._adopting = True
        try:
            log = self._SyncObj__raftLog
            for position in range(len(log)):
                command, idx, _term = log[position]
                if idx <= after:
                    continue
                request = _request_of(command)
                if request is not None:
                    self._SyncObj__doChangeCluster(request)
        finally:
            self._adopting = False

    # pysyncobj calls these by their mangled names; overriding them here is how
    # a subclass hooks them (as raft_node overrides _SyncObj__applyLogEntries).
    def _SyncObj__doChangeCluster(self, request, reverse=False):
        changed = super()._SyncObj__doChangeCluster(request, reverse)
        if changed:
            if self.transport is not None:
                # A lease computed for the old group must not outlive it (a one-node
                # leader's lease needs nobody's acknowledgement: lease.py).
                self.transport.lease.reset()
            op, node = request[0], request[2] if len(request) >= 3 else request[1]
            address = getattr(node, "address", str(node))
            added = (op == ADD) != bool(reverse)
            how = "undone (its entry was cut)" if reverse else (
                "from the log at start" if self._adopting else "appended")
            events.record("membership", "membership: %s %s (%s); members now %s",
                          "added" if added else "removed", address, how, ", ".join(self.members()),
                          node=address, change="add" if added else "remove", undone=bool(reverse),
                          members=self.members(), at=self._SyncObj__selfNode.address)
        return changed

    def _SyncObj__doApplyCommand(self, command):
        # pysyncobj applies a membership entry a second time once it is committed
        # ("required only after node restarts": adopt_logged_changes does that).
        # A follower that appended "add X" and "remove X" in one batch re-added X
        # when applying the first, a member again until the second was applied.
        # A change is in force from its append on; applying it changes nothing.
        if command[0] == MEMBERSHIP_TYPE:
            if parse_request(command) == (REMOVE, self._SyncObj__selfNode.address):
                self.removed_by_entry = True  # committed: this node is out for good (removal.py)
            return None
        return super()._SyncObj__doApplyCommand(command)

    def _SyncObj__updateClusterConfiguration(self, newNodes):
        # D31: a loaded snapshot names the group with node objects of its own
        # (unpickled). pysyncobj keeps them as its members while its transport and
        # its match and next indexes stay keyed by the objects they had: equal, not
        # identical, so every lookup of one by the other fell through Python's
        # identity check to Node.__eq__ (28 calls per put on a leader). The members
        # it has already keep their objects, with what the snapshot's carry (an
        # added member's haqueue_member) copied onto them.
        newNodes = [_same_object(node, self._SyncObj__otherNodes) for node in newNodes]
        super()._SyncObj__updateClusterConfiguration(newNodes)
        # A snapshot was loaded: its group, then the changes logged after it.
        self.adopt_logged_changes(after=self._SyncObj__raftLastApplied)

    def group_at_snapshot(self, raft_data):
        """pysyncobj's snapshot data with the group as of the snapshot's last entry.

        pysyncobj stores the group at the moment it serializes, which counts the
        changes appended after that entry, committed or not; one that is then cut
        would come back from the snapshot at the next start. Undo those here."""
        last_index = raft_data[0][1]
        group = self.group()
        log = self._SyncObj__raftLog
        for position in range(len(log) - 1, -1, -1):  # from the end: no copy of a long log
            command, idx, _term = log[position]
            if idx <= last_index:
                break
            request = _request_of(command)
            if request is None:
                continue
            node = request[2] if len(request) >= 3 else self._SyncObj__nodeClass(request[1])
            if node == self._SyncObj__selfNode:
                continue
            if request[0] == ADD:
                group.discard(node)
            elif request[0] == REMOVE:
                group.add(node)
        return (raft_data[0], raft_data[1], group, *raft_data[3:])

    # -------------------------------------------------------- on the leader
    def change(self, op: str, address: str, done, info: dict | None = None) -> None:
        """Commit one change (ADD or REMOVE `address`); `done(error)` once it is
        committed (error None) or refused; raises MembershipRefused at once.
        `info`: the added node's id and admin and client addresses, carried in the entry."""
        if not self._isLeader():
            raise MembershipRefused("this node is not the leader")
        me = self._SyncObj__selfNode.address
        members = self.members()
        if op == ADD and address in members:
            raise MembershipRefused(f"{address} is already a member")
        if op == REMOVE and address not in members:
            raise MembershipRefused(f"{address} is not a member (members: {', '.join(members)})")
        if op == REMOVE and address == me:
            raise MembershipRefused("the leader cannot remove itself: hand leadership off first")
        if op == REMOVE and len(members) == 1:
            raise MembershipRefused("the last member cannot be removed")
        if self._transfer is not None:
            raise MembershipRefused("this leader is handing leadership off: ask the next one")
        pending = self._SyncObj__changeClusterIDx
        if self._change_in_flight == self.raftCurrentTerm or (pending is not None and self._SyncObj__raftLastApplied < pending):
            raise MembershipRefused("another membership change is not committed yet: retry when it is")
        if self._SyncObj__noopIDx is None or self._SyncObj__raftLastApplied < self._SyncObj__noopIDx:
            raise MembershipRefused("this leader has not committed its first entry yet: retry")

        def committed(_result, error) -> None:
            self._change_in_flight = None
            done(None if error == 0 else _FAILURES.get(error, f"failed (pysyncobj reason {error})"))

        self._change_in_flight = self.raftCurrentTerm
        if op == ADD:
            node = self._SyncObj__nodeClass(address, haqueue_member=dict(info)) if info else address
            self.addNodeToCluster(node, callback=committed)
        else:
            self.removeNodeFromCluster(address, callback=committed)

    def hand_off(self, done) -> None:
        """Begin handing leadership to the first connected follower to hold this
        leader's whole log (module docstring). `done(target, error)` runs in a later
        tick (or at once): the follower's Raft address, or None and one line.
        Raises MembershipRefused at once when there is nobody to hand off to."""
        if not self._isLeader():
            raise MembershipRefused("this node is not the leader")
        if self._transfer is not None:
            raise MembershipRefused("a hand-off of this leader is under way already")
        match = self._SyncObj__raftMatchIndex
        candidates = self._hand_off_candidates()
        if not candidates:
            raise MembershipRefused("no follower is connected to take over: retry once one is")
        now = monotonic()
        limit = self._SyncObj__conf.raftMaxTimeout
        last = self._SyncObj__getCurrentLogIndex()
        best = max(candidates, key=lambda n: (match.get(n, 0), n.address))
        term = self.raftCurrentTerm
        self._transfer = _Transfer(term=term, started=now, deadline=now + limit, done=done)
        behind = last - match.get(best, 0)
        events.record("leadership_hand_off_started", "handing leadership of term %d off: new entries held until "
                      "a follower holds all %d (best %s, %d behind; at most %.3f s)", term, last, best.address,
                      behind, limit, term=term, last_index=last, best=best.address, behind=behind, limit_s=limit)
        self.drive_hand_off()

    def hold(self, data: bytes, callback) -> bool:
        """Keep an entry submitted during a hand-off back, unsent? (True: held)"""
        transfer = self._transfer
        if transfer is None:
            return False
        transfer.held.append((data, callback))
        return True

    def drive_hand_off(self) -> None:
        """Every tick: finish the hand-off under way once a follower caught up, or give up at its deadline."""
        transfer = self._transfer
        if transfer is None:
            return
        now = monotonic()
        held_ms = round((now - transfer.started) * 1000, 1)
        if not self._isLeader() or self.raftCurrentTerm != transfer.term:
            self._transfer = None
            error = "this node stopped leading during the hand-off (see its events)"
            events.record("leadership_hand_off_failed", "hand-off of term %d: %s", transfer.term, error,
                          term=transfer.term, error=error, held_ms=held_ms, held=len(transfer.held))
            _fail(transfer.held)
            transfer.done(None, error)
            return
        last = self._SyncObj__getCurrentLogIndex()
        match = self._SyncObj__raftMatchIndex
        ready = [n for n in self._hand_off_candidates() if match.get(n, 0) >= last]
        if ready and not queued_commands(self._SyncObj__commandsQueue):
            target = min(ready, key=lambda n: n.address)
            self._transfer = None
            term = transfer.term
            events.record("leadership_hand_off", "handing leadership of term %d to %s, which holds all %d entries "
                          "(new entries held %.1f ms: %d)", term, target.address, last, held_ms, len(transfer.held),
                          term=term, to=target.address, last_index=last, held_ms=held_ms, held=len(transfer.held))
            self._hand_off_until = now + HAND_OFF_QUIET
            self._stop_leading(target, f"handing leadership to {target.address}")
            _fail(transfer.held)  # never appended: they fail as a stepping-down leader's do
            transfer.done(target.address, None)
            return
        if now >= transfer.deadline:
            self._transfer = None
            behind = last - max((match.get(n, 0) for n in self._SyncObj__otherNodes), default=0)
            error = (f"no follower caught up with this leader's log within {now - transfer.started:.3f} s "
                     f"({behind} entries behind): it leads on; retry")
            events.record("leadership_hand_off_failed", "hand-off of term %d: %s", transfer.term, error,
                          term=transfer.term, error=error, held_ms=held_ms, held=len(transfer.held))
            for data, callback in transfer.held:  # in their order, as if never held
                self.submit(data, callback)
            transfer.done(None, error)

    def resign(self, reason: str) -> None:
        """Stop leading now, for good, and say so (D37): this node is about to stop
        (its journal failed, or it is shut down). Unlike a hand-off it cannot wait for
        a follower to catch up, so it names the connected follower with the most of
        its log, and Raft's vote rule decides: a follower behind the other loses."""
        if not self._isLeader() or self.transport is None:
            return
        match = self._SyncObj__raftMatchIndex
        successor = max(self._hand_off_candidates(), key=lambda n: (match.get(n, 0), n.address), default=None)
        self._stop_leading(successor, reason)

    def _stop_leading(self, successor, reason: str) -> None:
        """Follow in this same term, then tell the peers: `successor` campaigns at once,
        and nobody holds on to this node's leadership meanwhile."""
        term = self.raftCurrentTerm
        # A follower of the same term: not step_down(), which forgets this term's
        # vote (its own), and a node must never vote twice in one term.
        self.stepdown_reason = reason
        self._SyncObj__setState(0)  # FOLLOWER: no read is answered from here on
        self._SyncObj__raftLeader = None
        self.transport.announce_resignation(term, successor)

    def handing_off(self) -> bool:
        """Keep out of elections? (a leader that just handed off)"""
        return monotonic() < self._hand_off_until

    def _hand_off_candidates(self) -> list:
        connected = self.transport.peers_up if self.transport is not None else set()
        return [n for n in self._SyncObj__otherNodes if n in connected]


class _Transfer:
    """A hand-off under way: its term, when it started and must end, who waits, what is held."""

    def __init__(self, term: int, started: float, deadline: float, done) -> None:
        self.term, self.started, self.deadline, self.done = term, started, deadline, done
        self.held: list = []  # (entry, callback), in submission order


def _fail(held: list) -> None:
    for _data, callback in held:
        callback(None, _NOT_LEADER)


def queued_commands(queue) -> int:
    """Commands submitted that pysyncobj has not appended yet (before a hand-off began, or
    before a leader at rest woke: raft_node.at_rest)."""
    return len(getattr(queue, "_FastQueue__queue", ()))


_NOT_LEADER = 4  # pysyncobj's FAIL_REASON.NOT_LEADER: what a deposed leader's entries get


_FAILURES = {1: "the leader's command queue is full: retry", 2: "no leader: retry",
             3: "discarded by a new leader: retry", 4: "the leader changed before the change was committed: "
             "check the members, then retry", 5: "the leader changed before the change was committed: "
             "check the members, then retry", 6: "refused by Raft: another change is in flight, or the "
             "member is already there", 7: "outcome unknown: check the members"}


def _request_of(command: bytes):
    if not command or command[0] != MEMBERSHIP_TYPE:
        return None
    return pickle.loads(command[1:])


def _same_object(node, members):
    """`node` (a Node, or a node's id) as the member object this node already holds, if
    any (D31): what the given one carries beyond its id is copied onto that object."""
    node_id = getattr(node, "_id", node)
    for member in members:
        if member._id == node_id:
            if member is not node and hasattr(node, "_id"):
                for name, value in vars(node).items():
                    if name != "_id":
                        setattr(member, name, value)
            return member
    return node
