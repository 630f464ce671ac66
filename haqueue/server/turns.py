"""When a connection that has used up its turn on the event loop gets its next one.

A connection runs at most COMMANDS_PER_TURN commands or TURN_SECONDS of work
at a time (session.py); then it yields. Its next turn used to come right after
everything else the loop had ready (`call_soon`), and that alone did not keep
a flood from slowing everyone else's writes. Raft then committed in pysyncobj's
tick thread, which needed the interpreter lock for each step of an entry (waking
from its poll, reading the notification, appending, applying, handing the
result back), and a loop that never idles took the lock back before the tick
thread woke up to take it: CPython forces a handover only to a thread that
has waited a whole switch interval (5 ms) with no other switch in between,
and the loop switches on every callback. Profiled with one connection
pipelining `stats` and reading every reply (docs/reliability.md, "Hostile
clients"): a synchronous client's put then waited 20-280 ms for the tick
thread to pick its entry up, p99 7-89x its idle value, and the tick thread
went up to 110-190 ms between ticks, the heartbeats with it; twice, on a loaded
machine, a cluster's leader dropped the measuring client mid-run, as it does
when it steps down.

So a connection that has used up its turn waits, while a write is waiting for
Raft (queued in the batcher or in flight) or while Raft's tick is overdue
(none for TICK_OVERDUE_SECONDS), until an entry is applied or
TURN_DEFER_SECONDS have passed, whichever is first. Writes are served before
the next round of a flood, and a flooder loses at most TURN_DEFER_SECONDS per
turn, never its turns.

Raft now ticks on the loop itself (replication/on_loop.py), so there is no
lock to hand over (that was the first reason for the wait); the wait still
serves: while a flooder's turn waits, the loop runs the ticks that commit the
waiting write and the replies that follow, instead of another round of the
flood between each of them, and `raft_first` runs an overdue tick before the
next connection's turn.
"""

from __future__ import annotations

import time

from haqueue.server.limits import TICK_OVERDUE_SECONDS, TURN_DEFER_SECONDS


class TurnQueue:
    """Schedules the next turn of connections that yielded; `release` after each applied entry."""

    def __init__(self, server) -> None:
        self.server = server
        self.waiting: list = []
        self._timer = None
        self.deferred = 0  # turns that waited for Raft (stats: haqueue-turns-yielded-to-raft)

    def next_turn(self, callback) -> None:
        """Run `callback` (the connection's next turn) once the loop has served the others.

        Raft is asked twice: when the turn ends, and when the next one would
        start, since the write the others wait on may have been read in
        between (the loop reads sockets after running what is ready). A turn
        that has waited once runs: a connection pipelining writes keeps an
        entry in flight nearly always, and must not be starved by that.
        """
        if not self._wait_for_raft(callback):
            self.server.loop.call_soon(self._start_turn, callback)

    def raft_first(self) -> None:
        """Tick Raft now if its tick is overdue; call it as a connection's
        callback begins (its bytes arrived, or its next turn came).

        The loop runs every ready callback of a pass before the tick's own
        timer or socket callback comes round, and each connection may take a
        turn of up to TURN_SECONDS: with hundreds of connections ready at once
        the leader's heartbeats waited for all of them (measured: 100
        connections pipelining puts, p99 162 ms between the leader's ticks,
        max 228 ms; 400, p99 358 ms, near the 300 ms election timeout).
        Checked here, between connections, the gap is bounded by one turn."""
        replica = self.server.replica
        if time.monotonic() - replica.ticked_at >= TICK_OVERDUE_SECONDS:
            tick_now = getattr(replica, "tick_now", None)  # a lone node has no tick
            if tick_now is not None:
                tick_now()

    def _start_turn(self, callback) -> None:
        self.raft_first()
        if not self._wait_for_raft(callback):
            callback()

    def _wait_for_raft(self, callback) -> bool:
        server = self.server
        batcher = server.batcher
        writing = batcher is not None and (batcher.in_flight or batcher.pending)
        if not writing and time.monotonic() - server.replica.ticked_at < TICK_OVERDUE_SECONDS:
            return False
        self.deferred += 1
        self.waiting.append(callback)
        if self._timer is None:
            self._timer = server.loop.call_later(TURN_DEFER_SECONDS, self.release)
        return True

    def release(self) -> None:
        """An entry was applied (or the wait ran out): the waiting connections take their turns."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self.waiting:
            waiting, self.waiting = self.waiting, []
            call_soon = self.server.loop.call_soon
            for callback in waiting:
                call_soon(callback)
