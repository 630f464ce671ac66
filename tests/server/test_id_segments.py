"""Segment mode (server/ids/udp.py): blocks committed ahead, served from the leader's memory.

The state machine is the real one (core/ids.py), applied through the real
QueueState entry point; what stands in is the commit, as in
tests/server/test_id_requests.py: a log that applies submitted commands when
told to (stamped with a clock the test moves), or loses them (outcome
unknown). A leader change is a new IdRequests on the same applied state, after
the old one dropped its blocks (what QueueServer._step_down does); a restart
is a new state made from the old one's snapshot records.

What is checked, per key, over every reply any leader gave: no id twice, and
(cycle, counter) strictly increasing in the order the replies were given,
across leaders, snapshots, lost entries and clocks that jump or run back.
"""

from __future__ import annotations

import asyncio
import json

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from haqueue.core import commands as C
from haqueue.core.idrules import IdRule
from haqueue.core.ids import wanted_rule_records
from haqueue.core.state import QueueState
from haqueue.protocol import idjson
from haqueue.server.ids import udp as ids_udp
from haqueue.server.ids.udp import IdRequests
from tests.fuzz.harness import make_server
from tests.support.held import Disk, HeldCommands, Lease, SoonLoop

DAY = 86_400_000
T0 = 1_795_363_200_000  # 2026-11-22T16:00:00Z = 2026-11-23T00:00+08:00, a cycle start

SEG = IdRule("seg", "{yy:02}{month:02}{day:02}{counter:04}", max_counter=9999, reset_seconds=86400,
             utc_offset=8 * 3600, mode="segment", segment=10)
FLAT = IdRule("flat", "{counter:06}", max_counter=999_999, mode="segment", segment=5)
TINY = IdRule("tiny", "T{counter:01}", max_counter=2, mode="segment", segment=2)
EXACT = IdRule("exact", "E{counter:06}", max_counter=999_999)
RULES = (SEG, FLAT, TINY, EXACT)


class Clock:
    def __init__(self, now: int = T0) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


class Log(HeldCommands):
    """Submitted commands wait; commit() applies them in one entry stamped by the clock."""

    def __init__(self, node: "Node") -> None:
        super().__init__()
        self.node = node
        self.entries = 0

    def commit(self) -> None:
        waiting, self.waiting = self.waiting, []
        if not waiting:
            return
        self.entries += 1
        stamp = self.node.clock()
        results = self.node.state.apply_batch(stamp, [command for command, _ in waiting]).results
        self.node.applied.append((stamp, [command for command, _ in waiting]))
        for (_, continuation), result in zip(waiting, results):
            continuation(result)


class Node:
    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.state = QueueState()
        self.state.apply_batch(clock(), [(C.ID_SET_RULES, wanted_rule_records(RULES))])
        self.applied: list[tuple[int, list]] = []
        self.replica = Lease()
        self.batcher = Log(self)
        self.disk = Disk()
        self.serving = True
        self.loop = SoonLoop()


class Deposed:
    """What a deposed leader that has not noticed yet sees: the applied state
    it had, its blocks, no read lease (a newer leader exists), and entries
    that never commit."""

    def __init__(self, node: Node) -> None:
        self.state = node.state
        self.replica = Lease()
        self.replica.valid = False
        self.batcher = self
        self.disk = node.disk
        self.serving = True
        self.loop = SoonLoop()
        self.closed = False

    def submit(self, command, continuation) -> None:
        continuation(None)


def make(monkeypatch, now: int = T0) -> tuple[Node, IdRequests, Clock]:
    clock = Clock(now)
    monkeypatch.setattr(ids_udp, "wall_ms", clock)
    node = Node(clock)
    return node, IdRequests(node), clock


def ask(requests: IdRequests, rule: str = "flat", app: str = "a") -> list:
    replies: list = []
    datagram = json.dumps({"action": "get", "rule_name": rule, "app_name": app}).encode()
    requests.handle(idjson.parse(datagram), lambda outcome, body: replies.append((outcome, body and json.loads(body))))
    return replies


def data(replies: list) -> list[str]:
    return [body["data"] for outcome, body in replies if outcome == "ok"]


def test_a_block_is_committed_once_and_then_served_from_memory_with_the_next_prefetched(monkeypatch):
    node, requests, _ = make(monkeypatch)
    first = ask(requests)
    assert first == [] and len(node.batcher.waiting) == 1  # no block yet: waits for one
    assert node.batcher.waiting[0][0] == (C.ID_RESERVE, "flat", "a", 5)
    node.batcher.commit()
    assert data(first) == ["000000"]
    # 4 of 5 left (<= 90 %): the next block is already being reserved.
    assert len(node.batcher.waiting) == 1
    served = [r for _ in range(4) for r in ask(requests)]
    assert data(served) == ["000001", "000002", "000003", "000004"]
    assert node.batcher.entries == 1  # four ids, no commit
    node.batcher.commit()
    assert data(ask(requests)) == ["000005"]
    monitor = node.state.ids.monitor("flat", "a")
    assert monitor["counter"] == 9 and monitor["mode"] == "segment"  # the committed high-water mark


def test_below_the_disk_reserve_the_block_in_hand_is_served_and_no_new_one_is_reserved(monkeypatch):
    node, requests, _ = make(monkeypatch)
    ask(requests)
    node.batcher.commit()  # the first block: 0-4; the next is being reserved
    node.batcher.commit()  # and is in hand: 5-9
    node.disk.room = False
    served = [r for _ in range(9) for r in ask(requests)]
    assert data(served) == [f"{n:06}" for n in range(1, 10)]  # the blocks in hand cost no disk
    assert node.batcher.waiting == []  # and no block is reserved below the reserve
    refused = ask(requests)
    assert [(outcome, body["error"]) for outcome, body in refused] == [("disk_full", "disk_full")]
    node.disk.room = True
    assert ask(requests) == [] and len(node.batcher.waiting) == 1  # waits for a new block again


def test_a_new_leader_starts_above_every_block_the_old_one_held(monkeypatch):
    node, old, _ = make(monkeypatch)
    ask(old)
    node.batcher.commit()
    node.batcher.commit()  # two blocks held: 0-4 (one served) and 5-9
    waiter_before = ask(old, app="b")
    old.drop_blocks()  # step-down: every block wasted
    node.batcher.fail()
    assert waiter_before == [(None, None)]  # outcome unknown: silence
    new = IdRequests(node)
    replies = ask(new)
    node.batcher.commit()
    assert data(replies) == ["000010"]  # skips the wasted 1..9, never repeats one


def test_a_leader_without_its_read_lease_serves_nothing_from_memory(monkeypatch):
    node, requests, _ = make(monkeypatch)
    ask(requests)
    node.batcher.commit()
    node.replica.valid = False
    assert ask(requests) == [(None, None)]
    assert node.batcher.waiting == [] or len(node.batcher.waiting) == 1  # only the prefetch, if any


def test_a_segment_counter_never_wraps_and_stops_reserving_once_exhausted(monkeypatch):
    node, requests, _ = make(monkeypatch)
    replies = ask(requests, "tiny")
    node.batcher.commit()  # block 0-1
    replies += ask(requests, "tiny")
    node.batcher.commit()  # block 2 (only one value was left)
    replies += ask(requests, "tiny")
    node.batcher.commit()  # EXHAUSTED
    assert data(replies) == ["T0", "T1", "T2"]
    entries = node.batcher.entries
    for _ in range(3):
        (outcome, body), = ask(requests, "tiny")
        assert outcome == "exhausted" and body["code"] == -1
    assert node.batcher.entries == entries and node.batcher.waiting == []  # no entry per refused get


def test_a_block_ends_with_its_cycle_and_a_clock_behind_renders_the_block_time(monkeypatch):
    node, requests, clock = make(monkeypatch, T0 + 1000)
    replies = ask(requests, "seg")
    node.batcher.commit()
    assert data(replies) == ["2611230000"]
    clock.now = T0 - 5 * DAY  # this leader's clock steps back: the block's time, not the clock's
    assert data(ask(requests, "seg")) == ["2611230001"]
    clock.now = T0 + DAY + 5  # the next day: the held blocks are dropped, a new one starts at 0
    replies = ask(requests, "seg")
    node.batcher.commit()
    node.batcher.commit()
    assert data(replies) == ["2611240000"]


def test_a_rule_change_drops_the_blocks_taken_under_the_old_rule(monkeypatch):
    node, requests, _ = make(monkeypatch)
    ask(requests)
    node.batcher.commit()
    node.batcher.commit()
    bigger = IdRule("flat", "{counter:06}", max_counter=999_999, mode="segment", segment=7)
    node.state.apply_batch(T0, [(C.ID_SET_RULES, wanted_rule_records(RULES[:1] + (bigger,) + RULES[2:]))])
    replies = ask(requests)
    node.batcher.commit()
    assert data(replies) == ["000010"]  # above both old blocks (0-4, 5-9)


# ---------------------------------------------------------------- the property
KEYS = [("seg", "a"), ("flat", "a"), ("flat", "b"), ("tiny", "a"), ("exact", "a")]
gets = st.tuples(st.just("get"), st.integers(1, 6))  # that many gets of every key
commits = st.tuples(st.just("commit"))
actions = st.one_of(
    gets, gets, gets, commits, commits,
    st.tuples(st.just("fail")),
    st.tuples(st.just("step_down")),  # a new leader; the old one has not noticed yet
    st.tuples(st.just("old_get")),  # clients still reach the old one (a partition, a SIGSTOP)
    st.tuples(st.just("old_notices")),  # it steps down: its blocks are dropped
    st.tuples(st.just("restart")),  # every node restarts: the state comes back from its snapshot
    st.tuples(st.just("clock"), st.one_of(st.integers(-2 * DAY, 2 * DAY), st.sampled_from([-DAY, -1, 1, DAY]))),
    st.tuples(st.just("lease"), st.booleans()),
)


def order_of(key: tuple[str, str], text: str) -> tuple[int, int]:
    """(cycle, counter) read back from an id: for `seg` the date orders the cycles."""
    if key[0] == "seg":
        return int(text[:6]), int(text[6:])
    return 0, int(text.lstrip("ET"))


@settings(max_examples=150, deadline=None)
@given(st.lists(actions, max_size=60))
# The scenarios each guard exists for, always run (random search finds them rarely):
# a deposed leader still reached by clients (the read lease), and a clock that steps back.
@example([("get", 1), ("commit",), ("step_down",), ("get", 1), ("commit",), ("get", 1), ("old_get",)])
@example([("get", 1), ("commit",), ("get", 1), ("clock", -1), ("get", 1), ("commit",), ("get", 1)])
@example([("get", 2), ("commit",), ("restart",), ("clock", DAY), ("get", 1), ("commit",), ("commit",),
          ("get", 3)])
def test_ids_never_repeat_or_go_back_per_key_across_leaders_restarts_and_clock_steps(script):
    with pytest.MonkeyPatch.context() as patch:
        node, requests, clock = make(patch)
        given_out: dict[tuple[str, str], list[tuple[int, int]]] = {}

        old: list[IdRequests] = []

        def get(key, requests):
            datagram = json.dumps({"action": "get", "rule_name": key[0], "app_name": key[1]}).encode()

            def respond(outcome, body):
                if outcome == "ok":  # recorded in the order replies leave
                    given_out.setdefault(key, []).append(order_of(key, json.loads(body)["data"]))

            requests.handle(idjson.parse(datagram), respond)

        for step in script:
            kind = step[0]
            if kind == "get":
                for key in KEYS:
                    for _ in range(step[1]):
                        get(key, requests)
            elif kind == "commit":
                node.batcher.commit()
            elif kind == "fail":
                node.batcher.fail()
            elif kind == "step_down":
                node.batcher.fail()
                requests.server = Deposed(node)
                old.append(requests)
                requests = IdRequests(node)
            elif kind == "old_get":
                for deposed in old:
                    for key in KEYS:
                        get(key, deposed)
            elif kind == "old_notices":
                for deposed in old:
                    deposed.drop_blocks()
                old.clear()
            elif kind == "restart":
                for one in old + [requests]:
                    one.drop_blocks()
                old.clear()
                node.batcher.fail()
                node.state = QueueState.deserialize(node.state.serialize())
                requests = IdRequests(node)
            elif kind == "clock":
                clock.now += step[1]
            elif kind == "lease":
                node.replica.valid = step[1]
        for key, values in given_out.items():
            assert len(set(values)) == len(values), f"{key}: an id was handed out twice: {values}"
            assert values == sorted(values), f"{key}: went back: {values}"
        assert requests.pending == len(node.batcher.waiting) + sum(
            len(s.waiting) for s in requests.segments.values())
        # Replaying what was committed gives the same state.
        replay = QueueState()
        replay.apply_batch(T0, [(C.ID_SET_RULES, wanted_rule_records(RULES))])
        for stamp, commands in node.applied:
            replay.apply_batch(stamp, commands)
        assert replay.digest() == node.state.digest()


def test_a_node_whose_id_service_was_never_asked_steps_down_without_making_it():
    # Stepping down (every failover, every stop) drops the blocks the id service
    # held; a node never asked for an id holds none, and must not import the id
    # modules and build the service only to drop nothing.
    loop = asyncio.new_event_loop()
    try:
        server = make_server(loop)
        server._step_down(graceful=True)
    finally:
        loop.close()
    assert "id_requests" not in vars(server)
