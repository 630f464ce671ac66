"""Election events (haqueue/replication/election_events.py): one line each, the repetitive ones throttled."""

from __future__ import annotations

from haqueue import events
from haqueue.replication.election_events import ElectionEvents, Throttle
from haqueue.replication.prevote import GRANTED, IGNORED, REFUSED, Decision

REFUSED_STICKY = Decision(REFUSED, "heard the leader 0.050 s ago")


def _recent(event: str) -> list[dict]:
    return [e for e in events.recent() if e["event"] == event]


def test_the_throttle_lets_one_line_through_per_interval_and_counts_the_rest():
    throttle = Throttle(5.0)
    assert [throttle.allow("k", t) for t in (0.0, 1.0, 2.0, 4.9, 5.0, 5.1)] == [0, None, None, None, 3, None]
    assert throttle.allow("other key", 5.1) == 0


def test_a_cut_off_node_asking_every_heartbeat_makes_one_refusal_line_per_interval():
    events.clear()
    said = ElectionEvents(interval=5.0)
    for n in range(200):  # 10 s of pre-votes every 50 ms from one node
        said.answered("pre-vote", "10.0.0.3:7000", 8, REFUSED_STICKY, now=n * 0.05)
    lines = _recent("prevote_refused")
    assert len(lines) == 2
    assert lines[0]["msg"] == "pre-vote from 10.0.0.3:7000 for term 8 refused: heard the leader 0.050 s ago"
    assert lines[1]["msg"].endswith("(99 more like it not logged)")
    assert (lines[0]["peer"], lines[0]["term"], lines[0]["reason"]) == ("10.0.0.3:7000", 8, REFUSED_STICKY.reason)


def test_each_peer_is_throttled_on_its_own_and_granted_votes_never():
    events.clear()
    said = ElectionEvents(interval=5.0)
    said.answered("vote", "a:1", 8, Decision(IGNORED, "heard the leader 0.010 s ago"), now=0.0)
    said.answered("vote", "b:1", 8, Decision(IGNORED, "heard the leader 0.010 s ago"), now=0.1)
    said.answered("vote", "a:1", 9, Decision(IGNORED, "heard the leader 0.010 s ago"), now=0.2)
    said.answered("vote", "a:1", 9, Decision(GRANTED), now=0.3)
    said.answered("vote", "b:1", 10, Decision(GRANTED), now=0.4)
    assert [e["peer"] for e in _recent("vote_ignored")] == ["a:1", "b:1"]
    assert [e["msg"] for e in _recent("vote_granted")] == ["vote from a:1 for term 9 granted",
                                                           "vote from b:1 for term 10 granted"]


def test_step_downs_and_elections_are_always_said():
    events.clear()
    said = ElectionEvents()
    said.election_started(4)
    said.stepped_down(5, "vote request of term 5 from b:1")
    said.stepped_down(6, "no answer from a majority within 0.6 s")
    assert [e["msg"] for e in events.recent()] == [
        "election started: term 4",
        "stepped down in term 5: vote request of term 5 from b:1",
        "stepped down in term 6: no answer from a majority within 0.6 s",
    ]
