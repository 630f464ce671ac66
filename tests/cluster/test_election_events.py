"""A real cluster says why leadership moved: elections, votes, step-downs, leases lost (issue 23).

Three `haqueue serve` processes on loopback. The leader is paused (SIGSTOP);
the others elect a new one; the old one resumes and steps down. Each node's
/status "events" (haqueue/events.py, written by
haqueue/replication/election_events.py) must tell that story.
"""

from __future__ import annotations

import signal
import time

from haqueue import admin_client

ELECTION_BOUND = 5.0
EVENTS_BOUND = 10.0  # a loaded host: the resumed leader ticks, notices, steps down


def _events(member) -> list[dict]:
    try:
        return admin_client.status(member.address, member.admin_port, 1.0)["events"]
    except (OSError, ValueError):
        return []


def _wait_for_event(cluster, member, matches, what: str) -> dict:
    deadline = time.monotonic() + EVENTS_BOUND
    while True:
        found = [e for e in _events(member) if matches(e)]
        if found:
            return found[-1]
        assert time.monotonic() < deadline, f"{member.id}: no {what} event\n{cluster.log_tail(member.id, 30)}"
        time.sleep(0.05)  # polling /status, bounded by the deadline


def test_a_paused_leaders_replacement_is_explained_by_election_vote_and_step_down_events(make_cluster):
    cluster = make_cluster(["-f0"])
    old = cluster.leader()
    members = {m.id: m for m in cluster.spec.nodes}
    cluster.signal_node(old.id, signal.SIGSTOP)
    try:
        new = cluster.leader(timeout=ELECTION_BOUND, exclude=old.id)
        assert new is not None, f"no other leader within {ELECTION_BOUND} s of pausing {old.id}"
    finally:
        cluster.signal_node(old.id, signal.SIGCONT)
    term = admin_client.status(new.address, new.admin_port, 1.0)["term"]
    voter = next(m for m in cluster.spec.nodes if m.id not in (old.id, new.id))

    started = _wait_for_event(cluster, members[new.id],
                              lambda e: e["event"] == "election_started" and e["term"] == term, "election started")
    assert started["msg"] == f"election started: term {term}"
    _wait_for_event(cluster, members[new.id], lambda e: e["event"] == "leadership_won" and e["term"] == term,
                    "leadership won")
    # The new leader needed the third node's vote: it says whom it gave it to.
    vote = _wait_for_event(cluster, voter, lambda e: e["event"] == "vote_granted" and e["term"] == term,
                           "vote granted")
    assert vote["msg"].startswith(f"vote from {vote['peer']} for term {term} granted")
    # The old leader, resumed, lost its lease and stepped down, saying why.
    down = _wait_for_event(cluster, members[old.id], lambda e: e["event"] == "stepped_down", "step-down")
    assert down["reason"], down
    assert down["msg"] == f"stepped down in term {down['term']}: {down['reason']}"
    lost = _wait_for_event(cluster, members[old.id], lambda e: e["event"] == "lease_lost", "lease lost")
    assert lost["msg"].startswith("read lease lost in term ")
    # And the same lines are in its log, stamped.
    log_text = cluster.nodes[old.id].log_path.read_text(errors="replace")
    assert down["msg"] in log_text
