"""The node-wide budget for requests bigger than a connection's own input bound.

A connection holds at most INPUT_HIGH bytes of unread input of its own (limits.py).
A request bigger than that must still be held whole before it can run: a put's body
(up to `-z`), a Gearman packet (up to 8 MiB). Without more, max_connections clients
each sending the start of one could make a node hold max_connections times the
biggest request (10,000 x 8 MiB), and it would be killed for memory long before.

So such a request first reserves its whole size here, once its header says how big
it is, and its connection reads past INPUT_HIGH only with the reservation. One that
does not fit waits, its connection not read (TCP pushes back on the sender), until
reservations are returned; first come, first served, so a big request is not passed
over for ever by small ones. A reservation is of the whole request, never part of
it, so every request admitted can complete: no deadlock of half-received requests.
A request bigger than the whole budget is admitted when nothing else is held.

A holder that stops sending would keep its reservation, and the waiters waiting:
its connection closes it after the output timeout without a byte (connection.py;
the one limit for a client that stops doing its part, reading or sending).

Deterministic: no I/O and no clock; a holder is told of its grant by a call to its
`input_granted(size)`.
"""

from __future__ import annotations

from typing import Protocol


class Holder(Protocol):
    def input_granted(self, size: int) -> None: ...


class InputBudget:
    def __init__(self, limit: int) -> None:
        self.limit = limit  # bytes of requests bigger than INPUT_HIGH: config/limits.py's max_input_buffers
        self.held = 0
        self._waiting: dict[Holder, int] = {}  # in arrival order
        self.waits = 0  # requests that had to wait (stats: haqueue-input-buffer-waits)
        self.stall_closes = 0  # holders closed for sending nothing (haqueue-input-stall-closes)

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def reserve(self, holder: Holder, size: int) -> bool:
        """Reserve `size` bytes for `holder`'s request: True if granted now; otherwise it
        waits its turn and is told by `holder.input_granted(size)`."""
        if not self._waiting and self._fits(size):
            self.held += size
            return True
        self._waiting[holder] = size
        self.waits += 1
        return False

    def release(self, size: int) -> None:
        """A granted request has arrived (or its connection closed): its bytes go back."""
        self.held -= size
        self._grant()

    def cancel(self, holder: Holder) -> None:
        """`holder` no longer waits (its connection closed, or its request changed)."""
        if self._waiting.pop(holder, None) is not None:
            self._grant()  # the next in line may fit where this one did not

    def _fits(self, size: int) -> bool:
        return self.held + size <= self.limit or self.held == 0

    def _grant(self) -> None:
        waiting = self._waiting
        while waiting:
            holder, size = next(iter(waiting.items()))
            if not self._fits(size):
                return
            del waiting[holder]
            self.held += size
            holder.input_granted(size)
