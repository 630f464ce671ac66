"""server/turns.py: an overdue Raft tick runs before the next connection is served.

One pass of the event loop runs every ready callback before the tick's own
timer or socket callback comes round; with hundreds of connections ready at
once, the leader's heartbeats waited for all of them (docs/reliability.md,
"Blocking work on the loop"). These tests drive TurnQueue and LoopTicker with a
replica that counts its ticks, in a real loop: no clock is waited on.
"""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

from haqueue.replication.on_loop import LoopTicker
from haqueue.server.limits import TICK_OVERDUE_SECONDS
from haqueue.server.turns import TurnQueue


class CountingReplica:
    def __init__(self, ticked_at: float) -> None:
        self.ticked_at = ticked_at
        self.ticks = 0

    def tick_now(self) -> None:
        self.ticks += 1
        self.ticked_at = time.monotonic()


def turns_with(replica) -> TurnQueue:
    return TurnQueue(SimpleNamespace(replica=replica, batcher=None, loop=None))


def test_an_overdue_tick_runs_before_a_connection_is_served_and_a_fresh_one_does_not():
    replica = CountingReplica(ticked_at=time.monotonic() - 2 * TICK_OVERDUE_SECONDS)
    turns = turns_with(replica)
    turns.raft_first()
    assert replica.ticks == 1
    turns.raft_first()  # it has just ticked
    assert replica.ticks == 1


def test_a_yielded_turn_also_lets_an_overdue_tick_go_first():
    async def main() -> list:
        replica = CountingReplica(ticked_at=time.monotonic() - 2 * TICK_OVERDUE_SECONDS)
        turns = TurnQueue(SimpleNamespace(replica=replica, batcher=None, loop=asyncio.get_running_loop()))
        order: list = []
        turns._start_turn(lambda: order.append(("served after ticks", replica.ticks)))
        return order

    assert asyncio.run(main()) == [("served after ticks", 1)]


class FakeRaft:
    """What LoopTicker uses of a ReplicatedQueue; its tick asks for a tick now, as a
    callback inside a tick would."""

    def __init__(self) -> None:
        self.epoll_poller = SimpleNamespace(dispatched=0, fileno=lambda: -1)
        self.depth = self.deepest = self.ticks = 0
        self.ticker: LoopTicker | None = None

    def tick_once(self, events_first: bool = False, light: bool = False) -> bool:
        self.depth += 1
        self.deepest = max(self.deepest, self.depth)
        self.ticks += 1
        self.ticker.tick_now()
        self.depth -= 1
        return True


def test_a_tick_asked_for_inside_a_tick_does_not_nest():
    raft = FakeRaft()
    ticker = raft.ticker = LoopTicker(raft, loop=None)
    ticker.running = True
    ticker.tick_now()
    assert (raft.ticks, raft.deepest) == (1, 1)
