"""The reserves that wait (waiters.py): first come first served, found by tube without a walk."""

from __future__ import annotations

from haqueue.server.waiters import Waiters


class Worker:
    """A waiting reserve as Waiters sees one: its watch list, its two ways to reserve."""

    def __init__(self, name: str, *tubes: str, waiters: Waiters | None = None) -> None:
        self.name = name
        self.watch = list(tubes)
        self.waiters = waiters
        self.tried: list[str] = []

    def try_reserve(self) -> None:
        self.tried.append("next entry")

    def reserve_now(self) -> None:
        self.tried.append("this entry")
        self.waiters.stop(self)  # as Session._submit_reserve does

    def __repr__(self) -> str:
        return self.name


def test_a_put_takes_the_oldest_waiter_on_its_tube_along():
    waiters = Waiters()
    a, b, c = Worker("a", "x", waiters=waiters), Worker("b", "y", "x", waiters=waiters), Worker("c", "x", waiters=waiters)
    for worker in (a, b, c):
        waiters.start(worker)
    waiters.reserve_with_put("y")
    assert b.tried == ["this entry"] and list(waiters) == [a, c]
    waiters.reserve_with_put("x")
    assert a.tried == ["this entry"] and list(waiters) == [c]
    waiters.reserve_with_put("z")  # nobody waits on it
    assert c.tried == [] and list(waiters) == [c]


def test_current_waiting_counts_by_tube_and_forgets_a_waiter_on_every_tube_it_watched():
    waiters = Waiters()
    a, b = Worker("a", "x", "y"), Worker("b", "x")
    waiters.start(a)
    waiters.start(b)
    waiters.start(a)  # again: still once
    assert (waiters.waiting_on("x"), waiters.waiting_on("y"), len(waiters)) == (2, 1, 2)
    a.watch.append("z")  # not while it waits, but the index must not follow it if it did
    waiters.stop(a)
    assert (waiters.waiting_on("x"), waiters.waiting_on("y"), waiters.waiting_on("z")) == (1, 0, 0)
    waiters.stop(a)  # twice: nothing
    waiters.clear()
    assert len(waiters) == 0 and waiters.waiting_on("x") == 0


def test_wake_still_picks_one_waiter_per_available_job_oldest_first():
    waiters = Waiters()
    a, b, c = Worker("a", "x"), Worker("b", "x"), Worker("c", "y")
    for worker in (a, b, c):
        waiters.start(worker)
    picked = waiters.wake(lambda tube: {"x": 1, "y": 1}.get(tube, 0))
    assert picked == [a, c] and a.tried == c.tried == ["next entry"] and b.tried == []
