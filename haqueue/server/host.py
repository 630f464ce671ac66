"""SessionHost: everything a client Session uses of the server that accepted it.

QueueServer (app.py) creates sessions and is their host; sessions know it only
through this interface, so the dependency runs one way in the imports and at
run time (app.py -> session.py -> host.py), and a test can host a Session with
a small object of its own (tests/support/session_host.py, used by
tests/server/test_session.py).
tests/server/test_session_host.py checks that session.py touches nothing of
its server beyond what is listed here, and that QueueServer provides it all.
The way back is as narrow: QueueServer reads a Session only through
HostedSession (below), which the same test holds app.py to.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Callable, Protocol, runtime_checkable

from haqueue.config.limits import ClientLimits
from haqueue.core.state import QueueState
from haqueue.server.beanstalk.stats import ServerCounters
from haqueue.server.beanstalk.tubes import TubeDirectory
from haqueue.server.input_budget import InputBudget

if TYPE_CHECKING:
    from haqueue.server.beanstalk.session import Session


class HostedSession(Protocol):
    """What QueueServer reads of a beanstalkd Session: the narrow way back. The waiting
    reserves (waiters.Waiter) read its watch list and its two ways to reserve."""

    conn_id: int

    @property
    def work_in_flight(self) -> bool: ...  # at close: a DROP_CONN must follow what is in flight

    def resume_read(self) -> None: ...  # its read waited for a closed connection's reservations

    def flush(self) -> None: ...

    def end(self, graceful: bool) -> None: ...  # leadership is gone

    def arrived_early(self, first_at: float, count: int) -> None: ...  # accepted while the node started


class Submits(Protocol):
    """The group-commit batcher (batcher.py): logs a command, calls back with its result
    (None if its outcome is unknown)."""

    def submit(self, command: tuple, continuation: Callable[[tuple | None], None]) -> None: ...


class LeaseHolder(Protocol):
    """The replica, as far as a session asks it: may a reply that hands out a job be written?"""

    def read_lease_valid(self) -> bool: ...


class Turns(Protocol):
    """When a connection that used up its turn runs again (turns.py)."""

    def next_turn(self, callback: Callable[[], None]) -> None: ...

    def raft_first(self) -> None: ...  # an overdue Raft tick runs before a connection's callback


class Admits(Protocol):
    """The memory high-water mark (limits.MemoryGauge), the disk reserve (disk_reserve.DiskReserve)."""

    def admits(self, body_size: int) -> bool: ...


class ConnectionHost(Protocol):
    """What every client-facing protocol's connections use of the leader: the beanstalkd
    Session (SessionHost, below) and the Gearman service (gearman.service.GearmanHost)."""

    # settings
    loop: asyncio.AbstractEventLoop
    max_job_size: int
    limits: ClientLimits
    # the leader's parts
    batcher: Submits
    replica: LeaseHolder
    turns: Turns
    memory: Admits
    disk: Admits
    input_budget: InputBudget  # what all connections may hold of requests bigger than INPUT_HIGH
    counters: ServerCounters
    serving: bool  # false once leadership is lost: commands are no longer taken
    draining: bool  # puts (and Gearman submits) answer DRAINING
    dirty: set  # connections with replies to flush after the current entry

    # the replicated state, applied on this same thread (the loop's): read it freely
    @property
    def state(self) -> QueueState: ...


@runtime_checkable
class SessionHost(ConnectionHost, Protocol):
    directory: TubeDirectory  # tube references of connections; what list-tubes lists

    # connections
    def session_opened(self, session: Session) -> None: ...

    def session_closed(self, session: Session) -> None: ...

    def defer_until_drops_applied(self, session: Session) -> bool:
        """True if a closed connection's reservations are still on their way back:
        the session's read waits, and is pumped again once they are applied."""
        ...

    def unref_tube(self, name: str) -> None: ...

    # waiting reserves
    def start_waiting(self, session: Session) -> None: ...

    def stop_waiting(self, session: Session) -> None: ...

    def waiting_on(self, tube: str) -> int: ...

    def job_made_ready(self, tube: str) -> None:
        """A put that makes a job ready in `tube` was just submitted: a reserve waiting
        on it may go in the same entry, after it (waiters.reserve_with_put)."""
        ...

    def stats_body(self) -> bytes: ...
