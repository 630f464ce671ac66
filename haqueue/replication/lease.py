"""The read lease's bookkeeping on a leader (docs/pysyncobj.md D12): pure, time as an argument.

A leader may answer reads, and hand out reservations, while a majority
(itself included) acknowledged appends it sent in its current term within
`window` (hear_window, shorter than election_min). Each follower that
acknowledged an append received it after it was sent, and helps elect
nobody else for election_min after that (leader stickiness, prevote.py), so
no other leader can exist before the oldest of those sends is election_min
old; the lease ends earlier, at `window`.

- Every append_entries sent gets a sequence number, remembered per peer with
  its send time and term (`sent`); the follower echoes the number of the last
  append it processed in its acknowledgement (`acknowledged`).
- Only an acknowledgement of this leader's own append, of its current term,
  counts, timed from when that append was sent: an answer read late (a
  stalled leader) proves nothing about now.
- `reset` on every change of role or term: nothing acknowledged before counts.
- Within a term acknowledgements only move forward, so a lease end once
  computed holds until it passes (`valid` need not count peers each time).

Times are on the lease clock (transport.lease_clock: CLOCK_BOOTTIME, which
counts a suspend), passed in by the caller.
"""

from __future__ import annotations

from collections import deque

MAX_UNACKED_APPENDS = 4096  # per peer; an older acknowledgement just extends nothing
NEVER = float("-inf")


class ReadLease:
    def __init__(self, max_unacked: int = MAX_UNACKED_APPENDS) -> None:
        self._max_unacked = max_unacked
        self._seq = 0
        self._sent: dict = {}  # peer -> deque of (seq, sent at, term), oldest first
        self.acks: dict = {}  # peer -> send time of the newest append of this term it acknowledged
        self.until = NEVER  # valid()'s last answer holds until then
        self._held = False  # for lost(): the lease held at the last look

    def sent(self, peer, term: int, now: float) -> int:
        """An append_entries leaves for `peer`: the sequence number to stamp on it."""
        self._seq += 1
        queue = self._sent.get(peer)
        if queue is None:
            queue = self._sent[peer] = deque(maxlen=self._max_unacked)
        queue.append((self._seq, now, term))
        return self._seq

    def acknowledged(self, peer, seq, term: int, leading: bool) -> float | None:
        """`peer` answered our append number `seq` (None: an older haqueue); `term`
        is this node's current term, `leading` whether it leads now. Returns when
        that append was sent (the caller times the round trip, fanout.py), or None
        for an answer this lease knows nothing of."""
        queue = self._sent.get(peer)
        if seq is None or not queue:
            return None  # an older haqueue, or an answer to a previous leadership
        found = None
        while queue and queue[0][0] <= seq:
            found = queue.popleft()
        if found is None or found[0] != seq:
            return None
        _, sent_at, sent_term = found
        if sent_term == term and leading and sent_at > self.acks.get(peer, NEVER):
            self.acks[peer] = sent_at
        return sent_at

    def reset(self) -> None:
        """A new role or term: nothing acknowledged before counts."""
        self.acks.clear()
        self._sent.clear()
        self.until = NEVER

    def majority_acknowledged_at(self, peers_needed: int) -> float:
        """The send time of the newest append of this term that `peers_needed`
        peers have acknowledged: with this node, a majority has everything sent
        up to then. -inf while too few have answered."""
        if peers_needed <= 0:
            return float("inf")
        acks = sorted(self.acks.values(), reverse=True)
        return acks[peers_needed - 1] if len(acks) >= peers_needed else NEVER

    def valid(self, now: float, peers_needed: int, window: float) -> bool:
        """Does the lease hold at `now`? (The caller checks that this node leads.)"""
        if now < self.until:
            return True
        self.until = self.majority_acknowledged_at(peers_needed) + window
        return now < self.until

    def may_hold(self, now: float, peers_needed: int, election_min: float) -> bool:
        """Could a follower still be bound by an append of ours it acknowledged?
        (A majority acknowledged one sent within election_min: its stickiness lasts that long.)"""
        return self.majority_acknowledged_at(peers_needed) > now - election_min

    def lost(self, now: float, peers_needed: int, window: float) -> bool:
        """Once per look (a leader's tick): True when the lease held at the last
        look and no longer does."""
        held = self.valid(now, peers_needed, window)
        was, self._held = self._held, held
        return was and not held

    def dropped(self) -> bool:
        """The node stops leading: True if its lease held at the last look (then forgotten)."""
        was, self._held = self._held, False
        return was
