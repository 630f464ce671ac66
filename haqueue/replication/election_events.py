"""What elections say: votes and pre-votes answered, elections started, step-downs, leases lost.

One INFO line each through haqueue.events (shown in the log and in /status's
"events"). Leadership won and lost are observed.py's. Whatever can repeat
every tick or every election timeout (a cut-off node's pre-votes refused
every heartbeat, a stuck candidate's votes ignored, a lease flapping under
load) goes through a `Throttle`: the first line of a kind, then at most one
every `THROTTLE_SECONDS` per kind and peer, saying how many it left out.
Times are Raft's clock (pysyncobj_patches.monotonic), passed in by the caller.
"""

from __future__ import annotations

from haqueue import events
from haqueue.replication.prevote import GRANTED, Decision

THROTTLE_SECONDS = 5.0


class Throttle:
    """At most one line per key every `interval` seconds; counts the ones it held back."""

    def __init__(self, interval: float = THROTTLE_SECONDS) -> None:
        self.interval = interval
        self._last: dict = {}  # key -> (when last let through, held back since)

    def allow(self, key, now: float) -> int | None:
        """None to stay quiet; otherwise how many were held back since the last line."""
        last, held = self._last.get(key, (float("-inf"), 0))
        if now - last < self.interval:
            self._last[key] = (last, held + 1)
            return None
        self._last[key] = (now, 0)
        return held


def _more(held: int) -> str:
    return f" ({held} more like it not logged)" if held else ""


class ElectionEvents:
    def __init__(self, interval: float = THROTTLE_SECONDS) -> None:
        self.throttle = Throttle(interval)

    def answered(self, kind: str, peer: str, term: int, decision: Decision, now: float) -> None:
        """A pre-vote (kind "pre-vote") or vote ("vote") this node answered or ignored."""
        event = ("prevote_" if kind == "pre-vote" else "vote_") + decision.outcome
        held = 0
        if decision.outcome != GRANTED or kind == "pre-vote":
            held = self.throttle.allow((event, peer), now)
            if held is None:
                return
        because = f": {decision.reason}" if decision.reason else ""
        events.record(event, "%s from %s for term %d %s%s%s", kind, peer, term, decision.outcome, because,
                      _more(held), peer=peer, term=term, reason=decision.reason or None)

    def election_started(self, term: int) -> None:
        events.record("election_started", "election started: term %d", term, term=term)

    def stepped_down(self, term: int, reason: str) -> None:
        events.record("stepped_down", "stepped down in term %d: %s", term, reason, term=term, reason=reason)

    def leader_resigned(self, peer: str, term: int) -> None:
        events.record("leader_resigned", "leader %s resigned term %d: this node no longer holds to it",
                      peer, term, peer=peer, term=term)

    def resignation_ignored(self, peer: str, term, our_term: int, leader: str | None) -> None:
        reason = (f"our term is {our_term}" if term != our_term
                  else f"this node follows {leader}" if leader is not None else "this node follows no leader")
        events.record("resignation_ignored", "resignation of %s for term %s ignored: %s", peer, term, reason,
                      peer=peer, term=term, reason=reason)

    def lease_lost(self, term: int, reason: str, now: float) -> None:
        held = self.throttle.allow(("lease_lost",), now)
        if held is not None:
            events.record("lease_lost", "read lease lost in term %d: %s%s", term, reason, _more(held),
                          term=term, reason=reason)

    def stale_leader(self, peer: str, their_term: int, our_term: int, now: float) -> None:
        held = self.throttle.allow(("stale_leader", peer), now)
        if held is not None:
            events.record("stale_leader", "leader %s of term %d is behind our term %d: telling it%s",
                          peer, their_term, our_term, _more(held), peer=peer, term=our_term,
                          leader_term=their_term)
