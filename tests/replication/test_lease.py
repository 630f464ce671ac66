"""The read lease's bookkeeping (haqueue/replication/lease.py), table-driven in the style of etcd's raft tests.

Each row is a sequence of what happens on a leader of a three-node cluster
(one peer makes a majority with it), each at a time and in a term: appends
sent, acknowledgements read, resets; then what the lease says at given
moments. The window (hear_window) is 0.2 s, election_min 0.3 s.
"""

from __future__ import annotations

import math

import pytest

from haqueue.replication.lease import ReadLease

WINDOW = 0.2
ELECTION_MIN = 0.3
TERM = 7


def play(lease: ReadLease, events) -> dict:
    """Run ("send", peer, now) / ("ack", peer, seq, term, leading) / ("reset",) events;
    returns the seq of each send by its position."""
    seqs = {}
    for n, event in enumerate(events):
        if event[0] == "send":
            seqs[n] = lease.sent(event[1], TERM, event[2])
        elif event[0] == "send_in":
            seqs[n] = lease.sent(event[1], event[3], event[2])
        elif event[0] == "ack":
            _, peer, position, term, leading = event
            lease.acknowledged(peer, seqs.get(position, position), term, leading)
        elif event[0] == "reset":
            lease.reset()
    return seqs


# (name, events, [(now, valid?)], majority_acknowledged_at)
ROWS = [
    ("nothing acknowledged", [("send", "b", 1.0), ("send", "c", 1.0)], [(1.0, False)], -math.inf),
    ("one peer acknowledged: a majority with us",
     [("send", "b", 1.0), ("ack", "b", 0, TERM, True)], [(1.0, True), (1.19, True), (1.2, False)], 1.0),
    ("timed from the send, not from the answer",
     [("send", "b", 1.0), ("send", "b", 1.1), ("ack", "b", 0, TERM, True)], [(1.15, True), (1.21, False)], 1.0),
    ("a later acknowledgement extends it",
     [("send", "b", 1.0), ("send", "b", 1.1), ("ack", "b", 0, TERM, True), ("ack", "b", 1, TERM, True)],
     [(1.29, True), (1.3, False)], 1.1),
    ("an older acknowledgement after a newer one extends nothing",
     [("send", "b", 1.0), ("send", "b", 1.1), ("ack", "b", 1, TERM, True), ("ack", "b", 0, TERM, True)],
     [(1.29, True), (1.3, False)], 1.1),
    ("the majority's newest: the second-best of two peers is not needed",
     [("send", "b", 1.0), ("send", "c", 1.1), ("ack", "b", 0, TERM, True), ("ack", "c", 1, TERM, True)],
     [(1.29, True)], 1.1),
    ("an acknowledgement of another term counts for nothing",
     [("send", "b", 1.0), ("ack", "b", 0, TERM + 1, True)], [(1.0, False)], -math.inf),
    ("an append sent in an older term counts for nothing",
     [("send_in", "b", 1.0, TERM - 1), ("ack", "b", 0, TERM, True)], [(1.0, False)], -math.inf),
    ("an acknowledgement read while not leading counts for nothing",
     [("send", "b", 1.0), ("ack", "b", 0, TERM, False)], [(1.0, False)], -math.inf),
    ("an acknowledgement without a number (an older haqueue) counts for nothing",
     [("send", "b", 1.0), ("ack", "b", None, TERM, True)], [(1.0, False)], -math.inf),
    ("an acknowledgement of a number never sent to that peer counts for nothing",
     [("send", "b", 1.0), ("send", "c", 1.0), ("ack", "b", 1, TERM, True)], [(1.0, False)], -math.inf),
    ("a reset forgets everything",
     [("send", "b", 1.0), ("ack", "b", 0, TERM, True), ("reset",)], [(1.0, False)], -math.inf),
    ("an acknowledgement of an append sent before a reset counts for nothing",
     [("send", "b", 1.0), ("reset",), ("ack", "b", 0, TERM, True)], [(1.0, False)], -math.inf),
]


@pytest.mark.parametrize("name, events, looks, acknowledged_at", ROWS, ids=[r[0] for r in ROWS])
def test_lease(name, events, looks, acknowledged_at):
    lease = ReadLease()
    play(lease, events)
    assert lease.majority_acknowledged_at(1) == acknowledged_at
    assert [lease.valid(now, 1, WINDOW) for now, _ in looks] == [valid for _, valid in looks]


def test_a_lease_needs_as_many_peers_as_make_a_majority():
    # Five nodes: two peers with the leader make three.
    lease = ReadLease()
    first = lease.sent("b", TERM, 1.0)
    second = lease.sent("c", TERM, 1.1)
    lease.acknowledged("c", second, TERM, True)
    assert not lease.valid(1.1, 2, WINDOW)
    lease.acknowledged("b", first, TERM, True)
    assert lease.majority_acknowledged_at(2) == 1.0  # the older of the two best
    assert lease.valid(1.19, 2, WINDOW) and not lease.valid(1.2, 2, WINDOW)


def test_unacknowledged_appends_kept_per_peer_are_bounded():
    lease = ReadLease(max_unacked=4)
    seqs = [lease.sent("b", TERM, float(n)) for n in range(10)]
    lease.acknowledged("b", seqs[0], TERM, True)  # forgotten: extends nothing
    assert lease.majority_acknowledged_at(1) == -math.inf
    lease.acknowledged("b", seqs[-1], TERM, True)
    assert lease.majority_acknowledged_at(1) == 9.0


# (name, acknowledged send time or None, now, may hold?)
MAY_HOLD_ROWS = [
    ("nothing acknowledged", None, 1.0, False),
    ("acknowledged just now", 1.0, 1.0, True),
    ("past the window, within election_min: a follower may still be bound", 1.0, 1.25, True),
    ("election_min after the send", 1.0, 1.3, False),
]


@pytest.mark.parametrize("name, sent_at, now, may_hold", MAY_HOLD_ROWS, ids=[r[0] for r in MAY_HOLD_ROWS])
def test_may_hold(name, sent_at, now, may_hold):
    lease = ReadLease()
    if sent_at is not None:
        lease.acknowledged("b", lease.sent("b", TERM, sent_at), TERM, True)
    assert lease.may_hold(now, 1, ELECTION_MIN) is may_hold


def test_lost_says_so_once_when_a_held_lease_lapses():
    lease = ReadLease()
    lease.acknowledged("b", lease.sent("b", TERM, 1.0), TERM, True)
    looks = [lease.lost(now, 1, WINDOW) for now in (0.9, 1.0, 1.1, 1.2, 1.3)]
    assert looks == [False, False, False, True, False]


def test_dropped_says_whether_the_lease_held_at_the_last_look():
    lease = ReadLease()
    assert not lease.dropped()
    lease.acknowledged("b", lease.sent("b", TERM, 1.0), TERM, True)
    lease.lost(1.1, 1, WINDOW)
    assert lease.dropped()
    assert not lease.dropped()  # said once
