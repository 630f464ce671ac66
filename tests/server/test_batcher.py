"""Group commit (haqueue/server/batcher.py): which commands ride in which Raft entry.

The replica is a stand-in that records each submitted entry and lets the test
decide when, and with what, it is applied; the asyncio loop is real and is
turned by hand, so what is in flight at each moment is the test's choice.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from haqueue.core import commands as C
from haqueue.server import batcher as batcher_module
from haqueue.server.batcher import MAX_BATCH_BYTES, MAX_BATCH_COMMANDS, MAX_IN_FLIGHT, Batcher


class Entry:
    def __init__(self, data: bytes, callback) -> None:
        self.stamp, self.commands = C.decode_batch(data)
        self.size = len(data)
        self.callback = callback

    def apply(self, effects="effects") -> None:
        """Committed: one result per command (the command's own tuple, to tell them apart)."""
        self.callback(SimpleNamespace(results=[("ok", c) for c in self.commands], effects=effects))

    def fail(self) -> None:
        self.callback(None)


class RecordingReplica:
    """Records what is submitted; nothing is applied until the test says so."""

    def __init__(self) -> None:
        self.entries: list[Entry] = []
        self.batch_sizes: list[int] = []
        self.observations = SimpleNamespace(batch_commands=SimpleNamespace(observe=self.batch_sizes.append))

    def submit(self, data: bytes, callback) -> None:
        self.entries.append(Entry(data, callback))


@pytest.fixture
def loop():
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


@pytest.fixture
def rig(loop):
    replica = RecordingReplica()
    applied: list = []
    batcher = Batcher(replica, loop, applied.append)
    return SimpleNamespace(replica=replica, batcher=batcher, applied=applied)


def turns(loop: asyncio.AbstractEventLoop, count: int = 3) -> None:
    for _ in range(count):
        loop.run_until_complete(asyncio.sleep(0))


def put(body: bytes = b"x", tube: str = "default") -> tuple:
    return (C.PUT, tube, 0, 0, 60_000, body)


def delete(job_id: int) -> tuple:
    return (C.DELETE, 1, job_id)


def submit(batcher: Batcher, command: tuple, results: list) -> None:
    batcher.submit(command, results.append)


def test_commands_submitted_in_one_loop_turn_ride_in_one_entry(rig, loop):
    results: list = []
    for n in range(3):
        submit(rig.batcher, delete(n), results)
    assert rig.replica.entries == []  # nothing is sent before the loop has read what is ready
    turns(loop)
    assert [e.commands for e in rig.replica.entries] == [[delete(0), delete(1), delete(2)]]


def test_commands_arriving_while_entries_are_in_flight_ride_together_in_the_next(rig, loop):
    results: list = []
    for n in range(MAX_IN_FLIGHT):  # one entry per turn fills every slot
        submit(rig.batcher, delete(n), results)
        turns(loop)
    assert len(rig.replica.entries) == MAX_IN_FLIGHT
    for n in range(10, 15):
        submit(rig.batcher, delete(n), results)
        turns(loop)
    assert len(rig.replica.entries) == MAX_IN_FLIGHT  # at most MAX_IN_FLIGHT outstanding

    rig.replica.entries[0].apply()
    turns(loop)
    # The one freed slot carries everything that waited, in arrival order.
    assert len(rig.replica.entries) == MAX_IN_FLIGHT + 1
    assert rig.replica.entries[-1].commands == [delete(n) for n in range(10, 15)]


def test_continuations_get_their_own_results_in_order_then_on_applied_the_effects(rig, loop):
    results: list = []
    for n in range(3):
        submit(rig.batcher, delete(n), results)
    turns(loop)
    rig.replica.entries[0].apply(effects="the entry's effects")
    turns(loop)
    assert results == [("ok", delete(0)), ("ok", delete(1)), ("ok", delete(2))]
    assert rig.applied == ["the entry's effects"]
    assert rig.replica.batch_sizes == [3]


def test_a_failed_entry_gives_every_continuation_none_and_on_applied_none(rig, loop):
    first: list = []
    second: list = []
    submit(rig.batcher, delete(1), first)
    submit(rig.batcher, delete(2), first)
    turns(loop)
    submit(rig.batcher, delete(3), second)
    turns(loop)
    rig.replica.entries[0].fail()
    turns(loop)
    assert first == [None, None]
    assert rig.applied == [None]
    assert second == []  # the other entry's outcome is its own
    rig.replica.entries[1].apply()
    turns(loop)
    assert second == [("ok", delete(3))]


def test_more_than_max_batch_commands_are_split_across_entries(rig, loop):
    results: list = []
    for n in range(MAX_BATCH_COMMANDS + 5):
        submit(rig.batcher, delete(n), results)
    turns(loop)
    sizes = [len(e.commands) for e in rig.replica.entries]
    assert sizes == [MAX_BATCH_COMMANDS, 5]
    assert [c for e in rig.replica.entries for c in e.commands] == [delete(n) for n in range(MAX_BATCH_COMMANDS + 5)]


def test_put_bodies_beyond_max_batch_bytes_are_split_across_entries(rig, loop):
    results: list = []
    body = b"b" * (MAX_BATCH_BYTES // 3 + 1)  # three of them are over the limit, two are not
    for _ in range(4):
        submit(rig.batcher, put(body), results)
    turns(loop)
    entries = rig.replica.entries
    assert [len(e.commands) for e in entries] == [2, 2]
    for entry in entries:
        assert sum(len(c[5]) for c in entry.commands) <= MAX_BATCH_BYTES


def test_a_single_put_larger_than_max_batch_bytes_still_goes_in_an_entry_of_its_own(rig, loop):
    results: list = []
    submit(rig.batcher, put(b"b" * (MAX_BATCH_BYTES + 1)), results)
    submit(rig.batcher, put(b"small"), results)
    turns(loop)
    assert [[c[5][:5] for c in e.commands] for e in rig.replica.entries] == [[b"bbbbb"], [b"small"]]


def gearman_submit(data: bytes) -> tuple:
    return (C.GM_SUBMIT, 1, "resize", b"", data, 1, True, 0)


def reserve_watching(tubes: tuple) -> tuple:
    return (C.RESERVE, 1, tubes)


def blob(n: int, size: int) -> bytes:
    """`size` bytes that differ from blob(m, size) (pickle would write an equal object once)."""
    return n.to_bytes(4, "big") + b"b" * (size - 4)


@pytest.mark.parametrize("make", [
    lambda n: gearman_submit(blob(n, 64 << 10)),  # issue 23, B4: 512 of these made one 32 MiB entry
    lambda n: put(blob(n, 64 << 10)),
    lambda n: reserve_watching(tuple(blob(n, 200).hex()[:200] + str(t) for t in range(1000))),
    lambda n: (C.GM_SUBMIT, 1, blob(n, 60000).decode("latin-1"), blob(n, 60000), b"", 1, True, 0),  # names count
], ids=["gearman-submit", "put", "reserve-1000-tubes", "gearman-names"])
def test_every_entry_is_at_most_max_batch_bytes_whichever_front_end_made_its_commands(rig, loop, make):
    results: list = []
    count = 512
    for n in range(count):
        submit(rig.batcher, make(n), results)
    turns(loop)
    applied = 0
    while applied < len(rig.replica.entries):  # apply each entry, which lets the next go
        rig.replica.entries[applied].apply()
        applied += 1
        turns(loop)
    entries = rig.replica.entries
    assert len(results) == count
    assert max(e.size for e in entries) <= MAX_BATCH_BYTES


def test_a_single_command_larger_than_max_batch_bytes_goes_alone(rig, loop):
    results: list = []
    submit(rig.batcher, delete(1), results)
    submit(rig.batcher, gearman_submit(b"g" * (MAX_BATCH_BYTES + 1)), results)
    submit(rig.batcher, delete(2), results)
    turns(loop)
    assert [[c[0] for c in e.commands] for e in rig.replica.entries] == [[C.DELETE], [C.GM_SUBMIT], [C.DELETE]]


def test_stamps_never_go_backwards_when_the_wall_clock_does(rig, loop, monkeypatch):
    clock = iter([5_000, 4_000, 6_000])
    monkeypatch.setattr(batcher_module, "wall_ms", lambda: next(clock))
    results: list = []
    for n in range(3):
        submit(rig.batcher, delete(n), results)
        turns(loop)
    assert [e.stamp for e in rig.replica.entries] == [5_000, 5_000, 6_000]


def test_fail_pending_answers_queued_commands_with_none_and_submits_nothing(rig, loop):
    results: list = []
    for n in range(MAX_IN_FLIGHT):
        submit(rig.batcher, delete(n), [])
        turns(loop)
    submit(rig.batcher, delete(99), results)
    turns(loop)
    rig.batcher.fail_pending()
    assert results == [None]
    rig.replica.entries[0].apply()
    turns(loop)
    assert len(rig.replica.entries) == MAX_IN_FLIGHT  # nothing left to send
