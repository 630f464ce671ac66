"""pysyncobj ticked on the server's event loop: one thread from a client's bytes to its reply.

A Raft node used to tick in a thread of its own. Every command then crossed
threads twice (the loop wrote to pysyncobj's notification pipe to wake the
tick thread; the tick thread handed the applied entry back through the
loop's self-pipe), and the leader's fsync was a third thread. Each crossing
is a wake-up and a handover of the interpreter lock, and on a busy loop the
lock is handed over only when the waiting thread has waited a whole switch
interval (5 ms). Measured on the leader of three nodes sharing one core
(issue 9, docs/benchmarks-log.md): a sequential `put` took 3.1 ms, a third of
the leader's lock time went to waking the journal's worker, and in segment
mode the id service's tick thread woke 5,000 times a second to hand the lock
back and forth while the loop did the work.

Here the node runs on the loop instead:
- `EpollPoller` is pysyncobj's poller interface (subscribe, unsubscribe,
  poll) on one epoll instance. Its own descriptor is readable whenever one of
  the Raft sockets it watches has an event, so the loop watches that single
  descriptor and ticks when it fires; `poll(0)` then dispatches the events.
  pysyncobj_patches installs it as pysyncobj's poller. The loop is the only
  way a node ticks on the server; a test may tick nodes by hand instead
  (tests/support/ticked.py).
- `LoopTicker` ticks the node (`ReplicatedQueue.tick(0)`): when a Raft socket
  is ready, when a command is submitted (it replaces pysyncobj's pipe
  notification with a `call_soon`), and when the node's next timed work is
  due (`ReplicatedQueue.timer_wait`: a heartbeat, an election deadline,
  keepalives). A tick for messages or a command is light (it skips the
  periodic checks a full tick made less than 20 ms before); the timer's are full. It used to tick every 20 ms whatever was due; the timer now
  sleeps until the earliest deadline, is set again after every tick, and a
  timer that finds its deadline moved on (a message's tick did the work) only
  sets itself again. When a socket is
  ready, its events are handed out before the tick's work, so that an
  acknowledgement commits and applies in the same tick; a tick whose own
  poll handed out more events is followed by another at once.

- A leader at rest (nothing under way but heartbeats: `ReplicatedQueue.at_rest`,
  docs/pysyncobj.md D36) for REST_AFTER stops watching the descriptor: its
  timer's ticks, each heartbeat, read the answers to the last one, and are light.
  A submitted command ends the rest through its tick.

The work that blocks stays short and bounded: a follower's fsync before it
acknowledges, and the leader's before it applies an entry (docs/pysyncobj.md
D3); the loop reads no client bytes meanwhile, and what arrives rides in the
next entry (group commit, as in lone.py).
"""

from __future__ import annotations

import asyncio
import select

TIMER_SLACK = 0.001  # seconds: a deadline this close is due now (the loop's own timer resolution is 1 ms)
# A timer set this much sooner than the node's next deadline is set again, later: an
# idle follower's keepalive timer otherwise woke it for nothing after every heartbeat
# (the heartbeat's tick sends the keepalives), and re-arming on every tick under
# load would cost more than the wake-ups it saves.
REARM_LATER = 0.02
MAX_ROUNDS = 8  # ticks in a row while each dispatches events, before other callbacks run
# After a light tick, a timer set to fire within this long is left as it is, without asking
# the node when its next work is due (timer_wait, a tenth of a light tick's cost). A light
# tick never brings that time closer than this (raft_node's POLLED_PERIOD): what it can
# change either moves later (a heartbeat sent, an append heard) or is polled at that
# period (a link lost, a journal left to sync, a leader deposed, a hand-off's timeout_now),
# and becoming leader makes a heartbeat due a heartbeat later. A timer that fires early
# only sets itself again.
ARMED_SOON = 0.02
# Seconds a leader stays at rest (raft_node.at_rest: nothing under way but heartbeats)
# before it stops watching its Raft sockets between timer ticks (D36). Under load an
# entry is in flight every few milliseconds, so the watch is not turned off and on
# again for each; idle, the acknowledgements of each heartbeat are read by the next
# heartbeat's tick instead of waking the leader once or twice more each.
REST_AFTER = 0.1
# While the sockets are watched, whether the node rests is asked at most this often (it
# reads a dozen things of the node's, and under load a leader is at rest between entries):
# REST_AFTER only has to pass with every look finding it at rest. Unwatched, every tick asks.
REST_CHECK = 0.02

# pysyncobj.poller.POLL_EVENT_TYPE's values (pysyncobj_patches checks them): this
# module stays free of pysyncobj imports, like everything but the patches and raft_node.
_READ, _WRITE, _ERROR = 1, 2, 4


class EpollPoller:
    """pysyncobj's Poller on one epoll instance, whose descriptor an event loop can watch."""

    def __init__(self) -> None:
        self._epoll = select.epoll()
        self._callbacks: dict = {}
        self.dispatched = 0  # events the last poll handed out

    def fileno(self) -> int:
        return self._epoll.fileno()

    def subscribe(self, descr, callback, eventMask) -> None:
        mask = ((select.EPOLLIN if eventMask & _READ else 0)
                | (select.EPOLLOUT if eventMask & _WRITE else 0)
                | (select.EPOLLERR if eventMask & _ERROR else 0))
        if descr in self._callbacks:
            try:
                self._epoll.modify(descr, mask)
            except FileNotFoundError:  # closed without unsubscribe, its number reused
                self._epoll.register(descr, mask)
        else:
            try:
                self._epoll.register(descr, mask)
            except FileExistsError:
                self._epoll.modify(descr, mask)
        self._callbacks[descr] = callback

    def unsubscribe(self, descr) -> None:
        self._callbacks.pop(descr, None)
        try:
            self._epoll.unregister(descr)
        except (OSError, ValueError):  # never registered, already closed, or the poller is closed
            pass

    def poll(self, timeout) -> None:
        events = self._epoll.poll(timeout if timeout > 0 else 0)
        self.dispatched = len(events)
        callbacks = self._callbacks
        for descr, event in events:
            mask = ((_READ if event & select.EPOLLIN else 0)
                    | (_WRITE if event & select.EPOLLOUT else 0)
                    | (_ERROR if event & (select.EPOLLERR | select.EPOLLHUP) else 0))
            callback = callbacks.get(descr)  # an earlier callback may have unsubscribed it
            if callback is not None:
                callback(descr, mask)

    def close(self) -> None:
        self._callbacks.clear()
        self._epoll.close()


class LoopTicker:
    """Ticks one ReplicatedQueue on `loop` (call every method from the loop's thread)."""

    def __init__(self, raft, loop: asyncio.AbstractEventLoop) -> None:
        self.raft = raft
        self.loop = loop
        self.running = False
        self._poller = raft.epoll_poller
        self._scheduled = False
        self._in_tick = False
        self._timer: asyncio.TimerHandle | None = None
        self._timed = False  # the timer is armed from start() on
        self._timer_at = 0.0  # when the armed timer fires (loop.time())
        self._watching = False  # the loop watches the Raft sockets (not while a leader rests)
        self._rest_since: float | None = None  # loop.time() of the first tick at rest in a row
        self._rest_asked = float("-inf")  # loop.time() when the node was last asked (REST_CHECK)
        self._timer_asked = float("-inf")  # loop.time() when timer_wait last set the timer

    def start(self) -> None:
        self.running = self._timed = True
        self._watch(True)
        self._timer_at = self.loop.time()
        self._timer = self.loop.call_at(self._timer_at, self._on_timer)

    def stop(self) -> None:
        if not self.running:
            return
        self.running = False
        self._watch(False)
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def notify(self) -> None:
        """Something to do now (a command was submitted): tick once the loop's
        current callbacks have run, so that one tick takes all of them."""
        if not self._scheduled and self.running:
            self._scheduled = True
            self.loop.call_soon(self._tick)

    def _on_timer(self) -> None:
        self._timer = None
        if self.raft.timer_wait() <= TIMER_SLACK:
            # Timed work is due: a full tick (re-arms the timer as it ends), or for a
            # resting leader a light one, which sends the heartbeat (D36).
            self._tick(light=self._rest_since is not None)
        else:
            self._arm()

    def _watch(self, on: bool) -> None:
        if on != self._watching:
            self._watching = on
            if on:
                self.loop.add_reader(self._poller.fileno(), self._on_events)
            else:
                self.loop.remove_reader(self._poller.fileno())

    def _rest(self, at_rest: bool | None, now: float) -> None:
        """Watch the Raft sockets unless the node is a leader at rest for REST_AFTER:
        then its timer's ticks (each heartbeat, at least) read them (D36). Whatever
        ends the rest passes through a tick first (a command is submitted: `notify`).
        `at_rest`: the node's answer, if the caller asked it just now; `now`: loop.time()."""
        if at_rest is None:
            if self._watching and now < self._rest_asked + REST_CHECK:
                return
            at_rest = self.raft.at_rest()
        self._rest_asked = now
        if not at_rest:
            self._rest_since = None
            self._watch(True)
        elif self._rest_since is None:
            self._rest_since = now
        elif self._watching and now - self._rest_since >= REST_AFTER:
            self._watch(False)

    def _arm(self, light: bool = False, at_rest: bool | None = None) -> None:
        """Set the timer for the node's next timed work, unless it is set sooner already
        (after a `light` tick: unless it fires within ARMED_SOON)."""
        if not (self.running and self._timed):
            return
        now = self.loop.time()
        self._rest(at_rest, now)
        if light and self._timer is not None and (self._timer_at <= now + ARMED_SOON
                                                  or now < self._timer_asked + REARM_LATER):
            # Left as it is: due soon, or set from the node's answer less than
            # REARM_LATER ago (under load a node ticks for messages every millisecond or
            # so: asking after each cost more than a timer that fires early now and then,
            # which only sets itself again).
            return
        self._timer_asked = now
        when = now + self.raft.timer_wait()
        timer = self._timer
        if timer is not None:
            if when - REARM_LATER <= self._timer_at <= when + TIMER_SLACK:
                return
            timer.cancel()
        # Its own record of when: uvloop's call_at returns a plain Handle, without
        # when(), for a time already past.
        self._timer_at = when
        self._timer = self.loop.call_at(when, self._on_timer)

    def _on_events(self) -> None:
        # A socket is ready: its events first, so that the tick's work acts on
        # them (an acknowledgement commits and applies in this same tick).
        self._tick(events_first=True)

    def tick_now(self) -> None:
        """Tick at once, from a loop callback that is not a tick itself: the
        server calls it before serving a client when the tick is overdue
        (server/turns.py), since one pass of the loop may run hundreds of
        ready connections before the tick's own callback comes round."""
        if self.running and not self._in_tick:
            self._tick(events_first=True)

    def _tick(self, events_first: bool = False, light: bool = True) -> None:
        # `light`: a tick for messages or commands skips the periodic checks while
        # a full tick's hold (ReplicatedQueue.tick, docs/pysyncobj.md D32); the
        # timer's ticks are full.
        self._scheduled = False
        if not self.running:
            return
        raft, poller = self.raft, self._poller
        self._in_tick = True
        try:
            full = not light
            for _ in range(MAX_ROUNDS):
                if not raft.tick_once(events_first=events_first, light=not full):
                    raft.stop()  # the node must stop (docs/pysyncobj.md D11): say nothing more
                    return
                # The events the tick's own poll handed out call for another tick, unless
                # the node is a leader at rest (its timer's tick read them): then they were
                # acknowledgements of its heartbeats, whose handlers did all there was to do.
                if not poller.dispatched:
                    self._arm(light)
                    return
                if not self._watching and raft.at_rest():
                    self._arm(light, at_rest=True)
                    return
                events_first = False  # the tick's own poll has just handed them out
                full = False  # the rounds that follow a full tick are for the events it read
        finally:
            self._in_tick = False
        self._arm(light)
        self.notify()  # still busy: let the loop's other callbacks run first
