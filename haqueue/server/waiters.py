"""The reserves that wait: beanstalkd connections blocked in `reserve`, first come first served.

A reserve that finds no job ready registers here (the session's host's
start_waiting) until a job it could take becomes ready or its timeout ends.
After an entry that made jobs ready (effects.woken), `wake` picks at most one
waiting connection per job available, oldest first, and each tries its reserve
(a RESERVE command of its own in the next entry); when the leader's TICK makes
delayed jobs ready, `reserve_with_tick` has the picked ones reserve in the
TICK's own entry, after it (deadlines.py): one commit between the deadline and
the reply, not two. A put that makes a job ready does the same for the oldest
waiter on its tube (`reserve_with_put`): a worker waiting on a tube gets a new
job one commit after the producer's put, not two (issue 24's cycle).

What it reads of a session (the `Waiter` interface): the tubes it watches, and
its two ways to reserve.
"""

from __future__ import annotations

from typing import Iterable, Protocol


class Waiter(Protocol):
    watch: Iterable[str]  # the tubes it reserves from

    def try_reserve(self) -> None: ...  # reserve now, in the next entry

    def reserve_now(self) -> None: ...  # reserve in the entry being submitted (the TICK's)


class Waiters:
    def __init__(self) -> None:
        # waiter -> the tubes it watched when it began to wait (its watch list cannot
        # change meanwhile: a waiting reserve holds the connection's pipeline), in
        # insertion order: FIFO.
        self._waiting: dict[Waiter, tuple[str, ...]] = {}
        # tube -> its waiters, FIFO: a put asks for one, `current-waiting` for the count,
        # without a walk over every waiting connection (there may be thousands).
        self._by_tube: dict[str, dict[Waiter, None]] = {}

    def __len__(self) -> int:
        return len(self._waiting)

    def __iter__(self):
        return iter(self._waiting)

    def __contains__(self, waiter) -> bool:
        return waiter in self._waiting

    def start(self, waiter: Waiter) -> None:
        if waiter in self._waiting:
            return
        tubes = self._waiting[waiter] = tuple(waiter.watch)
        for name in tubes:
            self._by_tube.setdefault(name, {})[waiter] = None

    def stop(self, waiter: Waiter) -> None:
        tubes = self._waiting.pop(waiter, None)
        if tubes is None:
            return
        for name in tubes:
            on_tube = self._by_tube[name]
            del on_tube[waiter]
            if not on_tube:
                del self._by_tube[name]

    def clear(self) -> None:
        self._waiting.clear()
        self._by_tube.clear()

    def waiting_on(self, tube: str) -> int:
        """`current-waiting` of a tube: the connections waiting that watch it."""
        return len(self._by_tube.get(tube, ()))

    def wake(self, reservable) -> list[Waiter]:
        """After an entry that made jobs ready: the waiters picked for them, each of
        which has tried its reserve. reservable(tube) -> jobs a reserve could take now;
        asked only for the tubes someone waits on (a node may hold far more tubes than
        waiters watch)."""
        available = {}
        for waiter in self._waiting:
            for name in waiter.watch:
                count = reservable(name)
                if count:
                    available[name] = count
        picked = self.claim(available)
        for waiter in picked:
            waiter.try_reserve()
        return picked

    def reserve_with_tick(self, ready: dict[str, int]) -> None:
        """The TICK for a deadline was just submitted: the waiters for the jobs it makes
        ready (`ready`: tube -> count) reserve in its entry, after it."""
        for waiter in self.claim(ready):
            waiter.reserve_now()

    def reserve_with_put(self, tube: str) -> None:
        """A put that makes a job ready in `tube` was just submitted: the oldest waiter
        watching it reserves in the put's entry, after it, as beanstalkd hands a new
        job to a waiting reserve at once. If the job is gone by then (an earlier
        reserve in the entry took it, or the tube was paused meanwhile) its reserve
        finds none and it waits on."""
        on_tube = self._by_tube.get(tube)
        if on_tube:
            next(iter(on_tube)).reserve_now()  # the oldest; reserve_now stops its wait

    def claim(self, available: dict[str, int]) -> list[Waiter]:
        """Waiters, first come first served, at most one per available job."""
        claimed: dict[str, int] = {}
        candidates = []
        for waiter in list(self._waiting):
            for name in waiter.watch:
                if available.get(name, 0) > claimed.get(name, 0):
                    claimed[name] = claimed.get(name, 0) + 1
                    candidates.append(waiter)
                    break
        return candidates
