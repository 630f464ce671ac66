"""Connection: the ordered output and flow control every client protocol's connection shares.

A beanstalkd Session (session.py) and a Gearman connection (server/gearman/session.py)
answer requests strictly in order. Each request takes a slot in `slots`; a
slot is filled when its answer is known (for a change, once its entry is
committed), and `flush` writes the filled slots at the head, after the
current entry, in one write. What this class owns, the same for both:

- **The read lease.** An answer that hands the connection a job (RESERVED,
  TOUCHED, JOB_ASSIGN: `needs_lease`) is written only while the replica's
  read lease holds: a leader whose apply stalled past an election may be
  applying a reservation that a newer leader has already released and handed
  to someone else. While the lease holds no newer leader can exist
  (ReplicatedQueue.read_lease_valid); if it never holds again, the step-down
  drops the connection unanswered. The flush retries every LEASE_RECHECK_S.
- **Output bounds** (limits.py). Answers held back (`held_bytes`, answered
  but behind an unanswered one) stop the pipeline at OUTPUT_HIGH and let it
  go on once written. The transport's own buffer pauses the pipeline at
  OUTPUT_HIGH (`pause_writing`); a client that stays over it for the
  output timeout, or lets it pass OUTPUT_HARD, is closed: it does not read.
- **Input bounds.** A pipeline that is blocked (on its writes, its output,
  its turn) stops reading once its decoder holds INPUT_HIGH, so TCP pushes
  back on the sender; one that waits for the rest of a request keeps reading.
  A request bigger than INPUT_HIGH first takes its whole size from the node's
  input budget (input_budget.py), which bounds what all connections hold; until
  it gets it, the connection is not read. One that then sends nothing for the
  output timeout is closed, so it cannot keep the others waiting.

A subclass provides `_pump()` (run its requests, as far as they can go),
`_input_buffered()`, `_request_size()` (its decoder's `request_size`),
`_yield_turn()`, `_close_if_done()` and the attributes
`starved`, `yielded`, `pumping`; `host` is its server as host.ConnectionHost
describes it.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque

from haqueue.server.host import ConnectionHost
from haqueue.server.limits import INPUT_HIGH, OUTPUT_HARD, OUTPUT_HIGH

log = logging.getLogger(__name__)


class Connection(asyncio.Protocol):
    LEASE_RECHECK_S = 0.01
    PROTOCOL = "client"  # for the log line of a close for output ("Gearman client")

    def __init__(self, host: ConnectionHost) -> None:
        self.host = host
        self.transport: asyncio.Transport | None = None
        self.slots: deque = deque()
        self.held_bytes = 0  # replies in `slots`, not yet handed to the transport
        self.held_stalled = False  # the pipeline stopped because held_bytes reached OUTPUT_HIGH
        self.output_paused = False  # the transport's unsent output is over OUTPUT_HIGH
        self.output_timer: asyncio.TimerHandle | None = None
        self.lease_timer: asyncio.TimerHandle | None = None
        self.needs_lease = False  # a filled slot hands out a job: write it under the lease
        self.paused_reading = False
        self.closed = False
        # The node's input budget (input_budget.py): the size of the big request being
        # received that this connection asked for, and whether it was granted.
        self.input_wanted = 0
        self.input_held = False  # input_wanted is granted (else it waits its turn)
        self.stall_timer: asyncio.TimerHandle | None = None
        self.stall_seen = 0  # what the decoder held at the stall timer's last look

    def _stop_timers(self) -> None:
        """At connection_lost: the output and lease timers every connection has, cancelled
        (a front end cancels its own timers beside these)."""
        for timer in (self.output_timer, self.lease_timer):
            if timer is not None:
                timer.cancel()
        self.output_timer = self.lease_timer = None
        self._budget_for(0)  # what it held of the input budget goes back, or it waits no more

    # ------------------------------------------------------------- pipeline
    def _serve(self) -> None:
        """Run what can run, write what is answered, and read only as much as fits."""
        self.pump()
        self.flush()
        self._regulate_reading()

    def pump(self) -> None:
        """Run the pipeline (the subclass's _pump), unless it yielded its turn or is running."""
        if self.yielded or self.closed or self.pumping:
            return
        self.pumping = True
        try:
            self._pump()
        finally:
            self.pumping = False

    def _input_arrived(self) -> None:
        """After new bytes went into the decoder: serve them now, unless the turn was
        used up (the scheduled continuation gets to them; meanwhile, reading may pause)."""
        if self.yielded:
            self._regulate_reading()
        else:
            self._serve()

    def _input_ended(self) -> bool:
        """The client sends no more: answer what it sent, then close (_close_if_done).
        True: keep the transport open for those answers (asyncio's eof_received)."""
        if not self.yielded:
            self._serve()
        self._close_if_done()
        return True

    def end(self, graceful: bool) -> None:
        """Leadership is gone or the node stops: write what is answered and close
        (graceful), or drop the connection at once (the outcome of what is in flight
        is unknown, and the client must not take silence for an answer)."""
        if graceful:
            self.flush()
            if self.transport is not None:
                self.transport.close()
        else:
            self.abort()

    def abort(self) -> None:
        """Drop the connection without replying (outcome unknown / not leader)."""
        if self.transport is not None and not self.closed:
            self.transport.abort()

    # ---------------------------------------------------------------- input
    def _regulate_reading(self) -> None:
        """Read while the pipeline wants input; stop once a blocked one has INPUT_HIGH buffered.

        A pipeline waiting for the rest of a request (a put's body) keeps
        reading whatever it holds; one blocked on a reserve, on its writes, on
        its output or on its turn leaves the rest in the kernel's buffers.
        """
        if self.closed:
            return
        wanted = self._request_size()  # a request partly here, whatever the pipeline waits on
        if wanted != self.input_wanted and (wanted > INPUT_HIGH or self.input_wanted):
            self._budget_for(wanted if wanted > INPUT_HIGH else 0)
        if self.input_wanted and not self.input_held:
            pause = True  # waiting for the node's input budget
        else:
            pause = not self.starved and self._input_buffered() >= INPUT_HIGH
        if pause != self.paused_reading:
            self.paused_reading = pause
            if pause:
                self.transport.pause_reading()
            else:
                self.transport.resume_reading()

    def _budget_for(self, size: int) -> None:
        """Hold `size` bytes of the node's input budget for the request being received
        (0: none): what was held goes back first, and a request still waiting leaves
        the line."""
        budget = self.host.input_budget
        if self.input_held:
            self.input_held = False
            budget.release(self.input_wanted)
        elif self.input_wanted:
            budget.cancel(self)
        if self.stall_timer is not None:
            self.stall_timer.cancel()
            self.stall_timer = None
        self.input_wanted = size
        if size and budget.reserve(self, size):
            self._granted()

    def input_granted(self, size: int) -> None:
        """The input budget grants what this connection waited for (`size`, its
        input_wanted): read on."""
        self._granted()
        if not self.closed:
            self._regulate_reading()

    def _granted(self) -> None:
        self.input_held = True
        self.stall_seen = self._input_buffered()
        timeout = self.host.limits.output_timeout
        if timeout > 0:
            self.stall_timer = self.host.loop.call_later(timeout, self._stall_check)

    def _stall_check(self) -> None:
        """A request granted the input budget must keep arriving: one that got no byte
        over a whole output timeout is closed, so it cannot keep others waiting."""
        self.stall_timer = None
        if self.closed:
            return
        held, timeout = self._input_buffered(), self.host.limits.output_timeout
        if held != self.stall_seen:
            self.stall_seen = held
            self.stall_timer = self.host.loop.call_later(timeout, self._stall_check)
            return
        self.host.input_budget.stall_closes += 1
        log.warning("closing %s %s: it sent nothing more of a %d-byte request for %gs while it held the "
                    "node's input budget", self.PROTOCOL, self.transport.get_extra_info("peername"),
                    self.input_wanted, timeout)
        self.abort()

    # --------------------------------------------------------------- output
    def pause_writing(self) -> None:
        self.output_paused = True
        timeout = self.host.limits.output_timeout
        if timeout > 0 and self.output_timer is None:
            self.output_timer = self.host.loop.call_later(timeout, self._output_timed_out)

    def resume_writing(self) -> None:
        self.output_paused = False
        if self.output_timer is not None:
            self.output_timer.cancel()
            self.output_timer = None
        if not self.closed and not self.yielded:
            self._serve()

    def _output_timed_out(self) -> None:
        self.output_timer = None
        self._close_for_output("stayed over %d bytes for %gs" % (OUTPUT_HIGH, self.host.limits.output_timeout))

    def _close_for_output(self, why: str) -> None:
        if self.closed:
            return
        self.host.counters.output_limit_closes += 1
        log.warning("closing %s %s: its unsent replies %s (it does not read)", self.PROTOCOL,
                    self.transport.get_extra_info("peername"), why)
        self.abort()

    def _reply(self, data: bytes) -> None:
        self.slots.append([data])
        self.held_bytes += len(data)

    def flush(self) -> None:
        slots = self.slots
        if not slots or slots[0][0] is None or self.closed:
            return
        if self.needs_lease:
            if not self.host.replica.read_lease_valid():
                if self.lease_timer is None:
                    self._wait_for_lease()
                return
            self.needs_lease = False
        data = slots.popleft()[0]
        if slots and slots[0][0] is not None:  # more answered behind it: one write for all
            out = [data]
            while slots and slots[0][0] is not None:
                out.append(slots.popleft()[0])
            data = b"".join(out)
        self.held_bytes -= len(data)
        if data:
            transport = self.transport
            transport.write(data)
            if self.output_paused and transport.get_write_buffer_size() > OUTPUT_HARD:
                self._close_for_output("passed %d bytes" % OUTPUT_HARD)
                return
        if self.held_stalled and self.held_bytes < OUTPUT_HIGH:
            # The pipeline stopped for replies held back; they are written: go on.
            self.held_stalled = False
            if not self.yielded:
                self._yield_turn()
        self._close_if_done()

    def _wait_for_lease(self) -> None:
        self.lease_timer = self.host.loop.call_later(self.LEASE_RECHECK_S, self._lease_recheck)

    def _lease_recheck(self) -> None:
        self.lease_timer = None
        if not self.closed:
            self._serve()
