"""The leader's deadline timer: a TICK is logged when the next delay, time-to-run or pause ends.

Expiry is a committed, replicated change (docs/design.md): the state machine
only learns that time has passed from an entry's stamp, so the leader arms one
timer for the state's next deadline and, when it fires, logs a TICK. After each
applied entry the server calls `arm` with the entry's next deadline; an earlier
deadline replaces the armed one, a later one waits its turn. While a TICK is in
flight nothing is armed: its entry's effects arm the next one.

The timer never fires early (timers.PreciseTimer); if the wall clock still
reads short of the deadline when it fires (the clocks drift apart), the server
re-arms from the state instead of logging a TICK that would change nothing.
When the TICK goes, the reserves waiting for the jobs it makes ready ride in its
entry (waiters.Waiters.reserve_with_tick).
"""

from __future__ import annotations

import asyncio
from typing import Protocol

from haqueue.core import commands as C
from haqueue.core.state import QueueState
from haqueue.server.batcher import wall_ms
from haqueue.server.host import Submits
from haqueue.server.timers import PreciseTimer, monotonic_at_wall_ms
from haqueue.server.waiters import Waiters


class DeadlineHost(Protocol):
    """What the deadline timer uses of the leader (QueueServer)."""

    loop: asyncio.AbstractEventLoop
    serving: bool
    batcher: Submits
    waiters: Waiters

    @property
    def state(self) -> QueueState: ...

    def rearm(self) -> None: ...  # flush, and arm again from the state's next deadline


class Deadlines:
    def __init__(self, server: DeadlineHost) -> None:
        self.server = server
        self._timer: PreciseTimer | None = None
        self._at: int | None = None  # the armed deadline, wall ms
        self._tick_in_flight = False

    def arm(self, deadline: int | None) -> None:
        if deadline is None or self._tick_in_flight:
            return
        if self._at is not None and self._at <= deadline:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._at = deadline
        self._timer = PreciseTimer(self.server.loop, monotonic_at_wall_ms(deadline), self._fire)

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
            self._at = None

    def _fire(self) -> None:
        self._timer = None
        self._at = None
        server = self.server
        if not server.serving:
            return
        if wall_ms() < (server.state.next_deadline() or 0):
            # The clock ran slow relative to the timer: try again.
            server.rearm()
            return
        self._tick_in_flight = True
        server.batcher.submit((C.TICK,), self._tick_done)
        if len(server.waiters):
            server.waiters.reserve_with_tick(server.state.ready_at(wall_ms()))

    def _tick_done(self, result) -> None:
        self._tick_in_flight = False
