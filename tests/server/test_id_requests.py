"""IdRequests (server/ids/udp.py): results of the id state machine become replies.

The state machine is the real one (core/ids.py). What stands in is the commit:
a batcher that applies each command to that state when told to, or fails it
(outcome unknown). Losing leadership with an entry in flight cannot be staged
on demand against a real node, and the batcher's own behaviour is tested in
tests/server/test_group_commit.py.
"""

from __future__ import annotations

import json

from haqueue.core import commands as C
from haqueue.core.idrules import IdRule
from haqueue.core.ids import IdState
from haqueue.protocol import idjson
from haqueue.server.ids import udp as ids_udp
from haqueue.server.ids.udp import IdRequests
from tests.support.held import Disk, HeldCommands, Lease, SoonLoop

NOW = 1_795_363_200_000  # 2026-11-22T16:00:00Z


class Held(HeldCommands):
    """Commands waiting for their entry's commit; commit() applies them, fail() loses them."""

    def __init__(self, state) -> None:
        super().__init__()
        self.state = state

    def commit(self) -> None:
        waiting, self.waiting = self.waiting, []
        for (_, rule, app, n), continuation in waiting:
            continuation(self.state.ids.reserve(rule, app, n, NOW))


class Node:
    def __init__(self, ids: IdState) -> None:
        self.state = type("State", (), {"ids": ids})()
        self.replica = Lease()
        self.batcher = Held(self.state)
        self.disk = Disk()
        self.serving = True
        self.loop = SoonLoop()


def ask(requests: IdRequests, datagram: dict) -> list:
    replies = []
    requests.handle(idjson.parse(json.dumps(datagram).encode()),
                    lambda outcome, body: replies.append((outcome, body and json.loads(body))))
    return replies


def get(rule="tiny", app="a", **more) -> dict:
    return {"action": "get", "rule_name": rule, "app_name": app, **more}


def make(max_apps: int = 10) -> tuple[Node, IdRequests]:
    rules = (IdRule("tiny", "T{counter:01}", min_counter=0, max_counter=2),
             IdRule("salted", "S{counter:03}{salt}", max_counter=999, salt_max_len=4))
    node = Node(IdState(rules, max_apps_per_rule=max_apps))
    return node, IdRequests(node)


def test_reply_waits_for_commit_and_renders_the_committed_value():
    node, requests = make()
    replies = ask(requests, get(seq="x"))
    assert replies == [] and len(node.batcher.waiting) == 1
    node.batcher.commit()
    (outcome, body), = replies
    assert outcome == "ok" and body["data"] == "T0" and body["seq"] == "x"


def test_outcome_unknown_gets_no_reply_and_frees_its_slot():
    node, requests = make()
    replies = ask(requests, get())
    node.batcher.fail()
    assert replies == [(None, None)] and requests.pending == 0


def test_exhausted_never_wraps():
    node, requests = make()
    replies = []
    for _ in range(4):
        pending = ask(requests, get())
        node.batcher.commit()
        replies += pending
    assert [r[1]["data"] for r in replies[:3]] == ["T0", "T1", "T2"]
    assert replies[3][0] == "exhausted" and replies[3][1]["message"] == "counter exhausted"


def test_too_many_apps():
    node, requests = make(max_apps=1)
    first, second = ask(requests, get(app="one")), ask(requests, get(app="two"))
    node.batcher.commit()
    assert first[0][0] == "ok" and second[0][0] == "too_many_apps"


def test_bad_input_is_answered_without_a_log_entry():
    node, requests = make()
    assert ask(requests, get(rule="nope"))[0][0] == "unknown_rule"
    assert ask(requests, get(salt="ab"))[0][1]["message"] == "bad salt"  # tiny takes no salt
    assert ask(requests, get(rule="salted", salt="abcde"))[0][0] == "bad_request"  # longer than 4
    assert ask(requests, get(rule="salted", salt="a-b"))[0][0] == "bad_request"
    assert node.batcher.waiting == []
    ok = ask(requests, get(rule="salted", salt="Ab9"))
    node.batcher.commit()
    assert ok[0][1]["data"] == "S000Ab9" and ok[0][1]["salt"] == "Ab9"


def test_monitor_needs_the_read_lease():
    node, requests = make()
    ask(requests, get())
    node.batcher.commit()
    monitor = {"action": "monitor", "rule_name": "tiny", "app_name": "a"}
    assert ask(requests, monitor)[0][1]["data"]["counter"] == 0
    assert ask(requests, {**monitor, "app_name": "b"})[0][0] == "not_exist"
    node.replica.valid = False
    assert ask(requests, monitor) == [(None, None)]


def test_a_follower_answers_not_leader():
    node, requests = make()
    node.serving = False
    (outcome, body), = ask(requests, get())
    assert outcome == "not_leader" and body["code"] == -1 and "leader" not in body


def test_a_flood_beyond_the_pending_cap_is_dropped_not_queued(monkeypatch):
    monkeypatch.setattr(ids_udp, "MAX_PENDING", 3)
    node, requests = make()
    replies = []
    for _ in range(5):
        replies += ask(requests, get())
    assert len(node.batcher.waiting) == 3 and replies == [(None, None), (None, None)]
    node.batcher.commit()
    assert requests.pending == 0


def test_source_limit_buckets_refill_are_per_address_and_bounded():
    limit = ids_udp.SourceLimit(rate=1000, max_sources=2)  # burst 200
    assert sum(limit.allow("a", 0.0) for _ in range(300)) == 200
    assert limit.allow("b", 0.0)  # another address has its own bucket
    assert sum(limit.allow("a", 0.05) for _ in range(100)) == 50  # refilled at 1000/s
    # Beyond max_sources, new addresses share one bucket.
    assert sum(limit.allow(f"spoofed{i}", 0.05) for i in range(300)) == 200
    assert limit.dropped == 100 + 50 + 100
    # Buckets that filled again are forgotten to make room.
    assert limit.allow("c", 10.0) and "c" in limit.buckets
    assert all(ids_udp.SourceLimit(rate=0).allow("a", 0.0) for _ in range(10_000))


def test_gets_of_one_key_in_one_loop_turn_share_one_reservation_in_arrival_order():
    node, requests = make()
    node.loop.immediate = False  # the loop reads several datagrams before it gets to its callbacks
    replies = [ask(requests, get(rule="salted", app="a", salt=salt, seq=i)) for i, salt in enumerate("xyz")]
    other = ask(requests, get(rule="salted", app="b"))
    node.loop.run_soon()
    commands = [command for command, _ in node.batcher.waiting]
    assert commands == [(C.ID_RESERVE, "salted", "a", 3), (C.ID_RESERVE, "salted", "b", 1)]
    node.batcher.commit()
    assert [r[0][1]["data"] for r in replies] == ["S000x", "S001y", "S002z"]  # each its own salt, in order
    assert [r[0][1]["seq"] for r in replies] == [0, 1, 2]
    assert other[0][1]["data"] == "S000" and requests.pending == 0


def test_a_shared_reservation_that_runs_out_answers_the_rest_exhausted_as_single_ones_would():
    node, requests = make()
    node.loop.immediate = False
    replies = [ask(requests, get()) for _ in range(5)]  # "tiny" holds three values
    node.loop.run_soon()
    node.batcher.commit()
    assert [r[0][1]["data"] for r in replies[:3]] == ["T0", "T1", "T2"]
    for late in replies[3:]:
        assert late[0][0] == "exhausted" and late[0][1]["message"] == "counter exhausted"
    single_node, single = make()
    one_by_one = []
    for _ in range(5):  # the same five, one reservation each
        one_by_one.append(ask(single, get()))
        single_node.batcher.commit()
    assert [r[0] for r in one_by_one] == [r[0] for r in replies]
    assert requests.pending == 0


def test_gets_gathered_when_leadership_is_lost_get_silence_and_no_entry():
    node, requests = make()
    node.loop.immediate = False
    replies = [ask(requests, get()) for _ in range(2)]
    requests.drop_blocks()  # what the server does on stepping down
    node.loop.run_soon()
    assert node.batcher.waiting == [] and replies == [[(None, None)], [(None, None)]]
    assert requests.pending == 0


def test_below_the_disk_reserve_a_get_answers_disk_full_and_logs_nothing():
    node, requests = make()
    node.disk.room = False
    replies = ask(requests, get())
    assert [(outcome, body["code"], body["error"]) for outcome, body in replies] == [("disk_full", -1, "disk_full")]
    node.loop.run_soon()
    assert node.batcher.waiting == []
    node.disk.room = True
    ask(requests, get())
    node.loop.run_soon()
    assert len(node.batcher.waiting) == 1
