"""Ballots: whether to grant a pre-vote or a vote, and a campaigner's pre-vote rounds.

Pure: no pysyncobj, no clock, no I/O. The caller (transport.py, raft_node.py)
reads the node's state into a `Voter`, the message into a `Ask`, passes the
time, and acts on the `Decision`.

The rules (docs/pysyncobj.md D9, D24):
- Leader stickiness (Raft thesis 4.2.3), the one rule for pre-votes and votes:
  a node that heard a current leader within `election_min` does not help
  elect another. A follower's read-lease acknowledgement (D12) promises
  exactly that, so a leader's lease can never overlap a newer leader. A real
  vote it refuses this way is ignored: it neither grants it nor adopts its
  term. A leader ignores votes too while its lease may hold.
- A pre-vote changes nothing on either side; it is granted when the asker's
  term would be higher than ours and its log is at least as up to date.
- A vote that passes the stickiness gate is decided by Raft's rule, as
  pysyncobj decides it (its request_vote handler): a higher term is adopted
  first (and the vote of the old term forgotten); then a vote goes to a
  candidate of our term whose log is at least as up to date, if we have not
  voted in that term yet. `vote()` says what pysyncobj will do, with the
  reason, so the event can say it.
- A campaigner asks for pre-votes at term + 1 and campaigns once a majority
  (itself included) said yes to the same round; it asks again every `retry`
  seconds until then.
"""

from __future__ import annotations

from dataclasses import dataclass, field

GRANTED, REFUSED, IGNORED = "granted", "refused", "ignored"


@dataclass(frozen=True)
class Voter:
    """What a node knows when asked for a (pre-)vote."""

    term: int
    last_log_term: int
    last_log_index: int
    leading: bool = False
    heard_leader_ago: float = float("inf")  # seconds since a current leader's append_entries
    lease_may_hold: bool = False  # leading, and a majority acknowledged an append within election_min
    voted_for: object = None  # whom it voted for in `term` (None: nobody yet)


@dataclass(frozen=True)
class Ask:
    """A pre-vote or vote request: the term asked about and the asker's log."""

    term: int
    last_log_term: int
    last_log_index: int


@dataclass(frozen=True)
class Decision:
    outcome: str  # GRANTED, REFUSED or IGNORED
    reason: str = ""

    @property
    def granted(self) -> bool:
        return self.outcome == GRANTED


def _log_behind(voter: Voter, ask: Ask) -> bool:
    return (ask.last_log_term, ask.last_log_index) < (voter.last_log_term, voter.last_log_index)


def _sticky(voter: Voter, election_min: float) -> str:
    """Why this node must not help elect anyone now ('' if it may)."""
    if voter.leading:
        return "this node leads" + (" and its lease may hold" if voter.lease_may_hold else "")
    if voter.heard_leader_ago < election_min:
        return f"heard the leader {voter.heard_leader_ago:.3f} s ago"
    return ""


def prevote(voter: Voter, ask: Ask, election_min: float) -> Decision:
    """Would this node vote for the asker at `ask.term`? Changes nothing either way."""
    sticky = _sticky(voter, election_min)
    if sticky:
        return Decision(REFUSED, sticky)
    if ask.term <= voter.term:
        return Decision(REFUSED, f"term {ask.term} is not above ours ({voter.term})")
    if _log_behind(voter, ask):
        return Decision(REFUSED, "its log is behind ours")
    return Decision(GRANTED)


def vote(voter: Voter, ask: Ask, election_min: float) -> Decision:
    """A real request_vote: IGNORED (neither granted nor its term adopted) under
    stickiness; otherwise what pysyncobj's Raft rule will do, and why."""
    if voter.leading:
        if voter.lease_may_hold:
            return Decision(IGNORED, "this node leads and its lease may hold")
    elif voter.heard_leader_ago < election_min:
        return Decision(IGNORED, f"heard the leader {voter.heard_leader_ago:.3f} s ago")
    if ask.term < voter.term:
        return Decision(REFUSED, f"term {ask.term} is below ours ({voter.term})")
    voted_for = voter.voted_for if ask.term == voter.term else None  # a higher term forgets the vote
    if voter.leading and ask.term == voter.term:
        return Decision(REFUSED, "this node leads that term")
    if _log_behind(voter, ask):
        return Decision(REFUSED, "its log is behind ours")
    if voted_for is not None:
        return Decision(REFUSED, f"already voted in term {ask.term}")
    return Decision(GRANTED)


CAMPAIGN, ASK, WAIT = "campaign", "ask", "wait"


@dataclass
class Campaign:
    """A campaigner's pre-vote bookkeeping: the round in flight and who granted it."""

    retry: float  # seconds before a round that won no majority is asked again
    round: int = 0
    term: int | None = None  # the term the round in flight asks about
    started: float = float("-inf")
    grants: set = field(default_factory=set)

    def step(self, current_term: int, now: float, is_majority) -> str:
        """The node's election timer ran out: CAMPAIGN (a majority, `is_majority(n)`
        with n counting this node, granted term + 1: the round is spent), ASK
        (start a new round: `self.round`, `self.term`), or WAIT for answers."""
        term = current_term + 1
        if self.won(current_term, is_majority):
            self.term = None
            return CAMPAIGN
        if self.term != term or now - self.started >= self.retry:
            self.round += 1
            self.term, self.started, self.grants = term, now, set()
            return ASK
        return WAIT

    def won(self, current_term: int, is_majority) -> bool:
        """Has the round in flight a majority (`step` would CAMPAIGN)?"""
        return self.term == current_term + 1 and is_majority(len(self.grants) + 1)

    def abandon(self) -> None:
        """Drop the round in flight: this node backs another campaigner (raft_node)."""
        self.term, self.grants = None, set()

    def answered(self, node, term: int, round_: int, granted: bool) -> None:
        """A peer's answer; only a yes to the round in flight counts."""
        if granted and round_ == self.round and term == self.term:
            self.grants.add(node)
