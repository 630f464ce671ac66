"""Timers that never fire early, and deadlines that never start early.

A waiting reserve, the leader's TICK for the next delay, time-to-run or pause:
client suites assert that each lasts at least the asked time. Two things made
haqueue's fire early (up to ~0.4 ms, measured with `haqueue bench --timers`):

1. The event loop's clock. uvloop keeps libuv's loop time, whole milliseconds
   cached at the start of each loop iteration, and a libuv timer fires once
   that time reaches it: up to a millisecond (more, if the iteration that set
   it ran long) before the real time. `PreciseTimer` asks the loop for a
   callback, then checks `time.monotonic()` and asks again if it came early.
2. The log's clock. An entry's stamp is the leader's wall clock floored to
   the millisecond (batcher.wall_ms), up to 1 ms before the commands in it
   arrived; a deadline counted from it (delay, time-to-run, pause) could end
   up to 1 ms before the asked time after the command. `deadline_ms` adds that
   millisecond where the edge turns a protocol duration into the ms the core
   stores, so the core (and the log format) stay as they are.
"""

from __future__ import annotations

import asyncio
import time

# An entry's stamp floors its making time to the ms: a deadline counted from
# it is up to this much earlier than the same duration after the command.
STAMP_RESOLUTION_MS = 1


def deadline_ms(seconds: int) -> int:
    """A protocol duration (whole seconds) as the ms the core adds to an entry's stamp."""
    return seconds * 1000 + STAMP_RESOLUTION_MS if seconds > 0 else 0


class PreciseTimer:
    """Calls `callback()` once, at or after monotonic time `when`, never before."""

    __slots__ = ("loop", "when", "callback", "handle")

    def __init__(self, loop: asyncio.AbstractEventLoop, when: float, callback) -> None:
        self.loop = loop
        self.when = when
        self.callback = callback
        self.handle: asyncio.Handle | None = None
        self._arm()

    def _arm(self) -> None:
        self.handle = self.loop.call_later(max(0.0, self.when - time.monotonic()), self._check)

    def _check(self) -> None:
        if time.monotonic() < self.when:
            self._arm()  # the loop's clock ran ahead of the real one: not yet
            return
        self.handle = None
        self.callback()

    def cancel(self) -> None:
        if self.handle is not None:
            self.handle.cancel()
            self.handle = None


def monotonic_at_wall_ms(wall_deadline_ms: int) -> float:
    """The monotonic time at which the wall clock reads `wall_deadline_ms`."""
    return time.monotonic() + (wall_deadline_ms / 1000 - time.time())
