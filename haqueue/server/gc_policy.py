"""The cycle collector in a process that holds millions of long-lived jobs.

CPython's collector walks every tracked object of the generations it
collects, with the GIL held: the event loop stops, and with it Raft's ticks
and heartbeats (they run on the loop: replication/on_loop.py).
A queue's jobs are long-lived container objects, so a growing backlog keeps
feeding the older generations. Measured on a 3-node cluster filling to 2.6M
queued 100-byte jobs (thresholds 10000/50/100, no freezing): generation-1
passes up to 577 ms and generation-0 passes up to 243 ms on the leader, and a
full pass over 1M jobs takes ~400 ms in-process — the scale of the election
timeout (0.3-0.6 s), where a stalled leader gets replaced and drops every
client.

Policy: every FREEZE_EVERY (0.25 s), collect the young generations (they hold
at most that long's allocations, so this is short) and then `gc.freeze()`:
every object still tracked moves into the permanent generation, which
automatic passes never walk. They then see only what was allocated since,
however long the queue. Measured on the same cluster fill (2.6M jobs): the
longest pass 32 ms on the leader and 24-29 ms on the followers (every 1 s: 239
/ 64 / 90 ms); single node, cycle 4+4 in memory 5.6-6.2k -> 6.9-7.3k cycles/s,
since automatic passes walk fewer objects.

An idle node allocates almost nothing (a handful of objects between two
freezes, never enough for an automatic pass), so a freeze then has nothing to
do, and its timer only woke the node four times a second. The timer stops once
a period passed without any collection (the young generations then hold fewer
than THRESHOLDS[0] new objects, and nothing was promoted); the next automatic
pass, in whatever thread, tells the loop through an eventfd (the one thing a
gc callback does, since it may run in the middle of the loop's own code), and
the timer starts again: a freeze still follows a node's first pass within
FREEZE_EVERY, as before.

The price: cyclic garbage among frozen objects is never found, so objects
that live past a freeze must not form cycles that outlive them. Jobs, heap
entries and tube records hold numbers, strings, bytes and each other; a
forgotten tube's stale heap entries are cleared (core/state.py), and a closed
connection's asyncio transport has its self-reference cut
(`cut_transport_cycle`). What else could become cyclic garbage after living past
a freeze is measured, not assumed: `frozen_garbage()` unfreezes, runs a full
collection and refreezes; a test churns connections, tubes and jobs through
a node and checks it finds (almost) nothing, and the admin endpoint `/gc`
reports the frozen population (and, asked, runs the full pass) so a slow leak
would show.
"""

from __future__ import annotations

import asyncio
import gc
import os
import time

FREEZE_EVERY = 0.25  # seconds; 1 s let the leader's longest pass reach 239 ms
# Young generations: collected often and cheaply, since they hold only what
# was allocated since the last freeze.
THRESHOLDS = (10_000, 50, 100)


class CollectorPolicy:
    """Freezes survivors every FREEZE_EVERY seconds while the loop runs."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.freezes = 0
        self.longest_pause_ms = 0.0
        self._pause_started = 0.0
        self._handle: asyncio.TimerHandle | None = None
        self._collected = False  # an automatic (or anyone else's) pass since the last freeze
        self._sleeping = False  # the timer is stopped until the next pass
        self._own_pass = False  # the freeze's own gc.collect(1) is not activity
        self._wake_fd: int | None = None

    def start(self) -> None:
        # `haqueue serve` imports the server with the collector off (haqueue/cli/
        # __init__.py): passes over what importing allocates were a tenth of the way
        # to a node's first reply. Those objects (modules, classes, functions) live
        # as long as the process: freeze them as they are rather than walk them all
        # first (6-13 ms); the few cyclic leftovers of importing (~140 objects, a
        # few KB) are frozen with them. Then the collector runs as below.
        gc.freeze()
        gc.set_threshold(*THRESHOLDS)
        self._wake_fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self.loop.add_reader(self._wake_fd, self._woken)
        gc.callbacks.append(self._time_pause)
        gc.enable()
        self._freeze()

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        if self._time_pause in gc.callbacks:
            gc.callbacks.remove(self._time_pause)
        if self._wake_fd is not None:
            self.loop.remove_reader(self._wake_fd)
            os.close(self._wake_fd)
            self._wake_fd = None

    @property
    def sleeping(self) -> bool:
        """The timer is stopped: no pass since the last freeze (the node is idle)."""
        return self._sleeping

    def _freeze(self) -> None:
        self._handle = None
        # Sleeping first, then the check: a pass in another thread in between
        # either is seen here or sees `_sleeping` and wakes the loop.
        self._sleeping = True
        if not self._collected and self.freezes:
            return  # nothing was collected, so nothing was promoted: nothing to freeze
        self._sleeping = False
        self._collected = False
        # Garbage not yet collected would be frozen with the rest: collect the
        # young generations first (an idle node may not have run a pass since).
        self._own_pass = True
        try:
            gc.collect(1)
        finally:
            self._own_pass = False
        gc.freeze()
        self.freezes += 1
        self._handle = self.loop.call_later(FREEZE_EVERY, self._freeze)

    def _woken(self) -> None:
        """A pass ran while the timer slept: freeze within FREEZE_EVERY again."""
        try:
            os.eventfd_read(self._wake_fd)
        except (BlockingIOError, TypeError):
            pass
        if self._handle is None and self._wake_fd is not None:
            self._sleeping = False
            self._handle = self.loop.call_later(FREEZE_EVERY, self._freeze)

    def _time_pause(self, phase: str, info: dict) -> None:
        # Runs in whichever thread triggered the pass; it holds the GIL, and may
        # interrupt any code of the loop's: it touches nothing of the loop's own.
        if phase == "start":
            self._pause_started = time.perf_counter()
            if not self._own_pass:
                self._collected = True
                if self._sleeping:
                    self._sleeping = False
                    fd = self._wake_fd
                    if fd is not None:
                        try:
                            os.eventfd_write(fd, 1)
                        except OSError:
                            pass
        else:
            pause_ms = (time.perf_counter() - self._pause_started) * 1000
            self.longest_pause_ms = max(self.longest_pause_ms, pause_ms)


def frozen_garbage() -> int:
    """Unreachable objects hiding in the permanent generation (a full pass: slow)."""
    gc.unfreeze()
    try:
        return gc.collect()
    finally:
        gc.freeze()


def cut_transport_cycle(transport) -> None:
    """Break asyncio's socket transport self-reference once the connection is done.

    `_SelectorSocketTransport` keeps a bound method of itself
    (`_read_ready_cb`, CPython 3.11-3.13): a cycle the frozen collector would
    never find. Without it the transport, its socket object and its buffers
    go by reference counting.
    """
    if getattr(transport, "_read_ready_cb", None) is not None:
        transport._read_ready_cb = None
