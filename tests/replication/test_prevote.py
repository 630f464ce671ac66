"""Ballots (haqueue/replication/prevote.py), table-driven in the style of etcd's raft tests.

Each row is a voter's state and a request, and the decision the rules give:
granted, refused (with the reason's gist) or ignored (a real vote a sticky
node neither grants nor takes the term of). Election_min is 0.3 s throughout.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from haqueue.replication import prevote
from haqueue.replication.prevote import ASK, CAMPAIGN, GRANTED, IGNORED, REFUSED, WAIT, Ask, Campaign, Voter

ELECTION_MIN = 0.3
QUIET = 1.0  # heard no leader for longer than election_min

# A follower at term 5 whose log ends at (term 4, index 10), that heard no leader lately.
FOLLOWER = Voter(term=5, last_log_term=4, last_log_index=10, heard_leader_ago=QUIET)
LEADER = Voter(term=5, last_log_term=5, last_log_index=11, leading=True, heard_leader_ago=QUIET)


def _voter(base: Voter, **changes) -> Voter:
    return Voter(**{**base.__dict__, **changes})


PREVOTE_ROWS = [
    # (name, voter, ask, outcome, reason contains)
    ("next term, same log", FOLLOWER, Ask(6, 4, 10), GRANTED, ""),
    ("next term, longer log", FOLLOWER, Ask(6, 4, 12), GRANTED, ""),
    ("next term, newer last term", FOLLOWER, Ask(6, 5, 1), GRANTED, ""),
    ("a term far ahead", FOLLOWER, Ask(9, 4, 10), GRANTED, ""),
    ("heard a leader within election_min", _voter(FOLLOWER, heard_leader_ago=0.29), Ask(6, 4, 10), REFUSED,
     "heard the leader"),
    ("heard a leader exactly election_min ago", _voter(FOLLOWER, heard_leader_ago=0.3), Ask(6, 4, 10), GRANTED, ""),
    ("the voter leads", LEADER, Ask(6, 5, 11), REFUSED, "leads"),
    ("the voter leads, lease may hold", _voter(LEADER, lease_may_hold=True), Ask(6, 5, 11), REFUSED,
     "lease may hold"),
    ("the asked term is ours", FOLLOWER, Ask(5, 4, 10), REFUSED, "not above ours"),
    ("the asked term is below ours", FOLLOWER, Ask(4, 4, 10), REFUSED, "not above ours"),
    ("shorter log", FOLLOWER, Ask(6, 4, 9), REFUSED, "log is behind"),
    ("older last term, longer log", FOLLOWER, Ask(6, 3, 50), REFUSED, "log is behind"),
    # A pre-vote asks about the future: a vote already cast in our term does not matter.
    ("voted in our term already", _voter(FOLLOWER, voted_for="b"), Ask(6, 4, 10), GRANTED, ""),
]


@pytest.mark.parametrize("name, voter, ask, outcome, reason", PREVOTE_ROWS, ids=[r[0] for r in PREVOTE_ROWS])
def test_prevote_decisions(name, voter, ask, outcome, reason):
    decision = prevote.prevote(voter, ask, ELECTION_MIN)
    assert (decision.outcome, reason in decision.reason) == (outcome, True), decision


VOTE_ROWS = [
    ("next term, same log", FOLLOWER, Ask(6, 4, 10), GRANTED, ""),
    ("our term, not voted yet", FOLLOWER, Ask(5, 4, 10), GRANTED, ""),
    ("our term, voted already", _voter(FOLLOWER, voted_for="b"), Ask(5, 4, 10), REFUSED, "already voted"),
    # A higher term is adopted first, which forgets the vote of the old one.
    ("next term, voted in ours", _voter(FOLLOWER, voted_for="b"), Ask(6, 4, 10), GRANTED, ""),
    ("a lower term", FOLLOWER, Ask(4, 4, 10), REFUSED, "below ours"),
    ("shorter log", FOLLOWER, Ask(6, 4, 9), REFUSED, "log is behind"),
    ("older last term", FOLLOWER, Ask(6, 3, 99), REFUSED, "log is behind"),
    # Leader stickiness (D24): ignored, whatever the term, by a node that hears a leader.
    ("heard a leader within election_min", _voter(FOLLOWER, heard_leader_ago=0.1), Ask(6, 4, 10), IGNORED,
     "heard the leader"),
    ("heard a leader, far higher term", _voter(FOLLOWER, heard_leader_ago=0.1), Ask(60, 9, 99), IGNORED,
     "heard the leader"),
    ("heard a leader exactly election_min ago", _voter(FOLLOWER, heard_leader_ago=0.3), Ask(6, 4, 10), GRANTED, ""),
    ("a leader whose lease may hold", _voter(LEADER, lease_may_hold=True), Ask(6, 5, 11), IGNORED,
     "lease may hold"),
    # A leader no majority has followed lately is deposed by a higher term, as in Raft.
    ("a leader without a lease, higher term", LEADER, Ask(6, 5, 11), GRANTED, ""),
    ("a leader without a lease, higher term, shorter log", LEADER, Ask(6, 5, 10), REFUSED, "log is behind"),
    ("a leader without a lease, its own term", LEADER, Ask(5, 5, 11), REFUSED, "leads that term"),
]


@pytest.mark.parametrize("name, voter, ask, outcome, reason", VOTE_ROWS, ids=[r[0] for r in VOTE_ROWS])
def test_vote_decisions(name, voter, ask, outcome, reason):
    decision = prevote.vote(voter, ask, ELECTION_MIN)
    assert (decision.outcome, reason in decision.reason) == (outcome, True), decision


def three_nodes(n: int) -> bool:
    return n > 1.5


CAMPAIGN_ROWS = [
    # (name, [(action, args)...], expected steps): "step" -> step(term, now); "yes"/"no" -> an answer
    ("the first look asks", [("step", 5, 0.0)], [ASK]),
    ("no answer yet: wait", [("step", 5, 0.0), ("step", 5, 0.01)], [ASK, WAIT]),
    ("no answer within retry: ask again", [("step", 5, 0.0), ("step", 5, 0.05)], [ASK, ASK]),
    ("one yes of two peers: campaign", [("step", 5, 0.0), ("yes", "b", 6, 1), ("step", 5, 0.01)], [ASK, CAMPAIGN]),
    ("a no does not count", [("step", 5, 0.0), ("no", "b", 6, 1), ("step", 5, 0.01)], [ASK, WAIT]),
    ("a yes to an older round does not count",
     [("step", 5, 0.0), ("step", 5, 0.05), ("yes", "b", 6, 1), ("step", 5, 0.06)], [ASK, ASK, WAIT]),
    ("a yes to another term does not count", [("step", 5, 0.0), ("yes", "b", 7, 1), ("step", 5, 0.01)],
     [ASK, WAIT]),
    ("our term moved on: ask anew", [("step", 5, 0.0), ("yes", "b", 6, 1), ("step", 6, 0.01)], [ASK, ASK]),
    ("a won round is spent", [("step", 5, 0.0), ("yes", "b", 6, 1), ("step", 5, 0.01), ("step", 5, 0.02)],
     [ASK, CAMPAIGN, ASK]),
]


@pytest.mark.parametrize("name, actions, steps", CAMPAIGN_ROWS, ids=[r[0] for r in CAMPAIGN_ROWS])
def test_campaign_rounds(name, actions, steps):
    campaign = Campaign(retry=0.05)
    seen = []
    for action, *args in actions:
        if action == "step":
            seen.append(campaign.step(args[0], args[1], three_nodes))
        else:
            campaign.answered(args[0], args[1], args[2], action == "yes")
    assert seen == steps


def test_an_asked_round_names_the_next_term():
    campaign = Campaign(retry=0.05)
    assert campaign.step(5, 0.0, three_nodes) == ASK
    assert (campaign.term, campaign.round) == (6, 1)


def test_ballots_and_the_lease_import_nothing_but_the_standard_library():
    # The decisions are pure (issue 23): no pysyncobj, no clock, no I/O.
    here = Path(prevote.__file__).parent
    allowed = {"__future__", "dataclasses", "collections"}
    for name in ("prevote.py", "lease.py"):
        tree = ast.parse((here / name).read_text())
        imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                    for alias in node.names}
        imported |= {node.module.split(".")[0] for node in ast.walk(tree)
                     if isinstance(node, ast.ImportFrom) and node.module}
        assert imported <= allowed, (name, imported - allowed)
