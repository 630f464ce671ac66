"""One append carrying entries in flight per follower (append_window.py, docs/pysyncobj.md D31).

Three real in-process nodes on loopback, ticked by hand in virtual time
(tests/support/ticked.py). Entries made while a follower's append is
unanswered ride in its next append, sent as soon as its answer is read; a
follower that never answers holds up nobody else and still hears from its
leader every heartbeat; a lost answer costs at most a heartbeat; a new leader
holds nothing from before (and any hold lapses within a heartbeat, far shorter
than an election).
"""

from __future__ import annotations

from haqueue.core.commands import PUT, encode_batch
from haqueue.replication.append_window import AppendWindow
from tests.support.ticked import filter_at, ticked_cluster


def entry(n: int) -> bytes:
    return encode_batch(1_000, [(PUT, "default", 0, 0, 60_000, b"%d" % n)])


def appends_seen(node) -> list:
    """Every append_entries `node` receives from now on: the number of entries each carried."""
    seen: list = []
    filter_at(node, lambda sender, message: message.get("type") != "append_entries"
              or seen.append(len(message.get("entries", ()))) or True)
    return seen


def last_index(node) -> int:
    return node._SyncObj__raftLog[-1][1]


def test_entries_made_while_an_append_is_unanswered_ride_in_the_next_one():
    with ticked_cluster() as cluster:
        leader = cluster.leader()
        seen = [appends_seen(f) for f in cluster.followers()]
        outcomes = [cluster.submit(leader, entry(0))]
        leader.tick(0)  # entry 0 leaves for both followers at once: nothing was in flight
        assert [s for s in seen] == [[], []]  # (not read yet)
        outcomes += [cluster.submit(leader, entry(n)) for n in range(1, 5)]
        leader.tick(0)  # entries 1-4: held, the append carrying entry 0 is unanswered
        cluster.run_until(lambda: all(outcomes), seconds=1, what="every entry applied")
        for carried in seen:
            assert [n for n in carried if n] == [1, 4], carried  # two appends, not five
        assert all(applied is not None for (applied, _error), in outcomes)
        cluster.run_until(cluster.caught_up, seconds=1, what="every node applying every entry")


def test_a_follower_that_never_answers_holds_up_nobody_else():
    with ticked_cluster() as cluster:
        leader = cluster.leader()
        mute, other = cluster.followers()
        filter_at(leader, lambda sender, message: not (sender == mute.selfNode
                                                       and message.get("type") == "next_node_idx"))
        to_mute = appends_seen(mute)
        for n in range(40):  # an entry per round, committed by the other follower alone
            outcome = cluster.submit(leader, entry(n))
            cluster.round()
            assert last_index(other) == last_index(leader), n  # it got the entry in the same round
            cluster.run_until(lambda: outcome, seconds=0.05, what=f"entry {n} applied")
        # The mute follower was not flooded with one append per entry, but never went a
        # heartbeat without one either: each carried what had accumulated.
        rounds = cluster.rounds_in(cluster.timing.heartbeat)
        assert 0 < len([n for n in to_mute if n]) < 40
        assert len(to_mute) >= 40 // rounds
        assert last_index(mute) >= last_index(leader) - rounds


def test_a_lost_answer_costs_at_most_a_heartbeat():
    with ticked_cluster() as cluster:
        leader = cluster.leader()
        slow = cluster.followers()[0]
        dropped: list = []

        def drop_one(sender, message):
            if sender == slow.selfNode and message.get("type") == "next_node_idx" and not dropped:
                dropped.append(message)
                return False
            return True

        filter_at(leader, drop_one)
        cluster.commit(leader, entry(0))
        assert dropped  # the answer to the append carrying entry 0 is lost
        start = cluster.clock.now
        outcome = cluster.submit(leader, entry(1))  # held for `slow`: no answer will come
        cluster.run_until(lambda: leader._SyncObj__raftMatchIndex[slow.selfNode] == last_index(leader),
                          seconds=2 * cluster.timing.heartbeat, what="the slow follower holding entry 1")
        assert cluster.clock.now - start <= cluster.timing.heartbeat + 3 * cluster.step
        assert outcome


def test_a_new_leader_holds_nothing_from_before():
    with ticked_cluster() as cluster:
        old = cluster.leader()
        # Nobody's answers reach the old leader: its appends stay in flight, held.
        filter_at(old, lambda sender, message: message.get("type") != "next_node_idx")
        cluster.submit(old, entry(0))
        old.tick(0)
        assert old.append_window._held
        cluster.paused.add(old)
        rest = [n for n in cluster.nodes if n is not old]
        cluster.run_until(lambda: any(n._isLeader() for n in rest), seconds=3, what="a new leader")
        new = next(n for n in rest if n._isLeader())
        # Its holds are its own (the appends of its no-op, sent at once to both), of its term.
        assert {term for (_upto, _at, term) in new.append_window._held.values()} <= {new.raftCurrentTerm}
        other = next(n for n in rest if n is not new)
        outcome = cluster.submit(new, entry(1))
        cluster.run_until(lambda: outcome, seconds=0.1, what="the new leader's first entry applied")
        assert outcome[0][0] is not None
        assert last_index(other) == last_index(new)


def test_a_hold_ends_on_an_answer_a_refusal_a_heartbeat_a_lost_link_or_a_new_term():
    window = AppendWindow(heartbeat=0.05)
    a, b = "a", "b"

    def held(now=1.0, term=3, match=None, next_index=None, connected=(a, b)):
        return window.held(now, term, match or {a: 0, b: 0}, next_index or {a: 11, b: 11}, set(connected))

    window.sent(a, 10, 1.0, 3)
    window.sent(b, 10, 1.0, 3)
    assert held() == {a, b}
    assert held(match={a: 10, b: 9}) == {b}  # a answered through what was sent
    window.sent(a, 10, 1.0, 3)
    assert held(next_index={a: 6, b: 11}) == {b}  # a refused: its next index moved back
    window.sent(a, 10, 1.0, 3)
    assert held(connected=(b,)) == {b}  # a's link is down
    window.sent(a, 10, 1.0, 3)
    assert held(now=1.049) == {a, b}
    assert held(now=1.05) == set()  # a heartbeat after the send, whatever the answer
    window.sent(a, 10, 1.0, 3)
    assert held(term=4) == set()  # another term: nothing held
