"""A small SessionHost (haqueue/server/host.py) for driving one or more Sessions in a test.

Everything a session touches is real (core QueueState, TubeDirectory,
ServerCounters, ClientLimits, an asyncio loop) except two edges:
- the log: `ManualLog` keeps what the sessions submit until the test says it
  commits (`commit()`, each command applied to the QueueState in order) or
  that its outcome is unknown (`lose()`), so a test sees a session between
  submitting and being answered;
- the socket: `MemoryTransport` keeps what the session writes, and reports
  pause/resume of reading and closing, as asyncio's transport would.
After each commit the host does what QueueServer does after an entry: hands
each result to its continuation, lets waiting reserves that a woken tube
concerns go to the log, and flushes the sessions with new replies.
"""

from __future__ import annotations

import asyncio

from haqueue.core import commands as C
from haqueue.core.state import QueueState
from haqueue.config.limits import ClientLimits
from haqueue.server.beanstalk.session import Session
from haqueue.server.beanstalk.stats import ServerCounters
from haqueue.server.beanstalk.tubes import TubeDirectory
from haqueue.server.input_budget import InputBudget

STAMP = 1_700_000_000_000


class ManualLog:
    """The batcher, with the test as Raft: nothing commits until `commit()`."""

    def __init__(self, host: "LocalHost") -> None:
        self.host = host
        self.pending: list[tuple] = []  # (command, continuation)
        self.committed: list[tuple] = []  # every command applied, in order
        self.stamp = STAMP

    def submit(self, command: tuple, continuation) -> None:
        self.pending.append((command, continuation))

    def commit(self) -> int:
        """Apply everything submitted so far as one entry, as the batcher would; how many."""
        entry, self.pending = self.pending, []
        if not entry:
            return 0
        self.stamp += 10
        applied = self.host.state.apply_batch(self.stamp, [command for command, _ in entry])
        self.committed += [command for command, _ in entry]
        for (_, continuation), result in zip(entry, applied.results):
            continuation(result)
        self.host.after_entry(applied.effects.woken)
        return len(entry)

    def lose(self) -> int:
        """Leadership lost: every pending command's outcome is unknown."""
        entry, self.pending = self.pending, []
        for _, continuation in entry:
            continuation(None)
        self.host.after_entry(())
        return len(entry)


class Lease:
    """The replica as a session asks it: does the read lease hold? Counts the asking,
    so a test can await the session's rechecks instead of sleeping through them."""

    def __init__(self) -> None:
        self.holds = True
        self.asked = 0
        self._waits: list[tuple[int, asyncio.Future]] = []

    def read_lease_valid(self) -> bool:
        self.asked += 1
        for target, done in self._waits:
            if self.asked >= target and not done.done():
                done.set_result(None)
        self._waits = [(target, done) for target, done in self._waits if not done.done()]
        return self.holds

    def asked_again(self, times: int) -> asyncio.Future:
        """Done once the lease has been asked `times` more times."""
        done = asyncio.get_running_loop().create_future()
        self._waits.append((self.asked + times, done))
        return done


class Turns:
    """A connection that used up its turn runs again at the loop's next turn."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.yielded = 0

    def next_turn(self, callback) -> None:
        self.yielded += 1
        self.loop.call_soon(callback)

    def raft_first(self) -> None:
        pass  # no Raft here


class Memory:
    def __init__(self) -> None:
        self.room = True

    def admits(self, body_size: int) -> bool:
        return self.room


class LocalHost:
    """Hosts sessions on a real QueueState; see the module docstring."""

    max_job_size = 65535

    def __init__(self, loop: asyncio.AbstractEventLoop, limits: ClientLimits | None = None) -> None:
        self.loop = loop
        self.limits = limits or ClientLimits()
        self.batcher = ManualLog(self)
        self.replica = Lease()
        self.turns = Turns(loop)
        self.memory = Memory()
        self.disk = Memory()  # the disk reserve: admits while `room`
        self.input_budget = InputBudget(self.limits.max_input_buffers)
        self.directory = TubeDirectory()
        self.counters = ServerCounters()
        self.serving = True
        self.draining = False
        self.dirty: set[Session] = set()
        self.sessions: set[Session] = set()
        self.waiters: set[Session] = set()
        self.forgotten: list[str] = []
        self._state = QueueState()

    @property
    def state(self) -> QueueState:
        return self._state

    def session_opened(self, session: Session) -> None:
        self.sessions.add(session)

    def session_closed(self, session: Session) -> None:
        self.sessions.discard(session)
        self.waiters.discard(session)

    def defer_until_drops_applied(self, session: Session) -> bool:
        return False  # no closed connection's reservations are ever in flight here

    def unref_tube(self, name: str) -> None:
        forget = self.directory.unref(name, self.state)
        if forget:
            self.forgotten.append(name)
            self.batcher.submit((C.FORGET_TUBE, name), lambda result: None)

    # Waiting reserves: a set here (QueueServer keeps an ordered dict, to wake them in turn).
    def start_waiting(self, session: Session) -> None:
        self.waiters.add(session)

    def waiting_on(self, tube: str) -> int:
        return len([waiting for waiting in self.waiters if tube in waiting.watch])

    def stop_waiting(self, session: Session) -> None:
        self.waiters.discard(session)

    def job_made_ready(self, tube: str) -> None:
        for waiting in list(self.waiters):  # as QueueServer's, but any one of them
            if tube in waiting.watch:
                waiting.reserve_now()
                return

    def stats_body(self) -> bytes:
        return b"---\ncurrent-waiting: %d\n" % len(self.waiters)

    def after_entry(self, woken) -> None:
        """What QueueServer does once an entry's continuations ran."""
        for session in list(self.waiters):
            if any(tube in session.watch for tube in woken):
                session.reserve_now()
        dirty, self.dirty = self.dirty, set()
        for session in dirty:
            session.flush()


class MemoryTransport(asyncio.Transport):
    """The socket: keeps what is written; closing reaches the session at the loop's next turn."""

    def __init__(self, session: Session) -> None:
        super().__init__()
        self.session = session
        self.written = b""
        self.reading = True
        self.closing = False
        self.lost = False
        self.aborted = False

    def write(self, data) -> None:
        assert not self.closing, "written after close"
        self.written += bytes(data)

    def close(self) -> None:
        if not self.closing:
            self.closing = True
            self.session.server.loop.call_soon(self._lose)

    def abort(self) -> None:
        self.aborted = True
        self.close()

    def _lose(self) -> None:
        self.lost = True
        self.session.connection_lost(None)

    def is_closing(self) -> bool:
        return self.closing

    def get_extra_info(self, name, default=None):
        return ("127.0.0.1", 1) if name == "peername" else default

    def get_write_buffer_size(self) -> int:
        return 0

    def set_write_buffer_limits(self, high=None, low=None) -> None:
        pass

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True


def connect(host: LocalHost, conn_id: int = 1) -> tuple[Session, MemoryTransport]:
    """A session on `host` with its transport, connected."""
    session = Session(host, conn_id)
    transport = MemoryTransport(session)
    session.connection_made(transport)
    return session, transport


def turn(loop: asyncio.AbstractEventLoop, times: int = 3) -> None:
    """Let the loop run what is ready (scheduled continuations, closes); no waiting on time."""
    for _ in range(times):
        loop.run_until_complete(asyncio.sleep(0))
