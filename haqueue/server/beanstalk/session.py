"""One client connection: its protocol state, its pipeline, its waiting reserve.

Theory of operation. Bytes go into the sans-I/O parser; commands come out
into `queue` and are processed strictly in order. Replies go into `slots`, one
per command, and leave in order: a state-changing command takes a slot and is
submitted to the group-commit batcher at once, so a client pipelining a
window of puts has them all in flight; its slot fills when the entry is
committed and applied (docs/design.md I1). A command that reads replicated state
waits until this connection's earlier writes are answered, so it sees them.
A reserve holds the pipeline until it is answered, as in beanstalkd.

Flow control (limits.py has the numbers). Commands are parsed only when the
pipeline can take them, so a blocked connection's backlog stays as bytes in
the parser, and reading stops once that passes INPUT_HIGH: TCP pushes back on
the sender, as with beanstalkd, which reads the next command only after the
reply is written. The pipeline also stops while the transport's unsent output
is over its high-water mark (`pause_writing`) and goes on when it drains
(`resume_writing`); a client that sends but never reads is closed at the hard
bound, or after output_timeout. For fairness a connection runs at most
COMMANDS_PER_TURN commands or TURN_SECONDS of work (READ_TURN_SECONDS until it writes), then yields to the loop,
so other connections, new accepts and the admin port are served before it
goes on; while a write waits for Raft, its next turn also waits for that
(turns.py), so that the loop runs Raft's ticks before another round of it.

Delays and timeouts (put, release, pause-tube, reserve-with-timeout) count from when
the command is read, which is when it arrived, except for a connection that came while
the node started: the commands that had arrived by then count from their arrival
(`arrived_early`, haqueue/cli/arrivals.py), as beanstalkd, reading them at once, would.

use, watch and ignore change only this connection (not logged); so does
`haqueue-operator NAME` (haqueue's extension): a connection that names itself
so has each change it logs recorded as an event (operator_events.py). Tube
references are counted in the server's TubeDirectory. A session knows its
server only as a SessionHost (host.py), and reads the replicated state only
through QueueState's query methods.

If an entry's outcome is unknown (leadership lost), the connection is closed
without a reply: a reply must never claim success or failure for a change
that may or may not be applied.

End of input (the client half-closes) is handled as beanstalkd 1.12 does:
every complete command read before it is still answered, in order; a reserve
that would wait answers TIMED_OUT at once (protocol.txt); an incomplete
command is dropped; then the connection closes.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from functools import partial
from time import perf_counter

from haqueue.core import commands as C
from haqueue.core.results import Tag
from haqueue.protocol import beanstalk as P
from haqueue.server.batcher import KICKS_PER_ENTRY, wall_ms
from haqueue.server.beanstalk import operator_events
from haqueue.server.gc_policy import cut_transport_cycle
from haqueue.server.connection import Connection
from haqueue.server.host import SessionHost
from haqueue.server.limits import (
    COMMANDS_PER_TURN, MAX_IN_FLIGHT, MAX_IN_FLIGHT_BYTES, OUTPUT_HIGH,
    OUTPUT_LOW, READ_TURN_SECONDS, TURN_SECONDS,
)
from haqueue.server.beanstalk.ordered_set import SwapRemoveList
from haqueue.server.beanstalk.replies import reply_for
from haqueue.server.beanstalk.stats import COUNTED_COMMANDS, job_stats, tube_stats
from haqueue.server.timers import STAMP_RESOLUTION_MS, PreciseTimer, deadline_ms, monotonic_at_wall_ms
from haqueue.server.beanstalk.tubes import DEFAULT_TUBE

log = logging.getLogger(__name__)

NEED_DATA, EOF, ProtocolError = P.NEED_DATA, P.EOF, P.ProtocolError
_INSERTED, _RESERVED, _TOUCHED = Tag.INSERTED, Tag.RESERVED, Tag.TOUCHED

# beanstalkd's SAFETY_MARGIN: a reserve answers DEADLINE_SOON when one of the
# connection's jobs has less than this left of its time-to-run.
SAFETY_MARGIN_MS = 1000

_WRITE, _READ, _LOCAL, _RESERVE, _QUIT = range(5)
_KIND = {
    "put": _WRITE, "delete": _WRITE, "release": _WRITE, "bury": _WRITE, "touch": _WRITE,
    "kick": _WRITE, "kick-job": _WRITE, "pause-tube": _WRITE, "reserve-job": _WRITE,
    "peek": _READ, "peek-ready": _READ, "peek-delayed": _READ, "peek-buried": _READ,
    "stats-job": _READ, "stats-tube": _READ, "stats": _READ, "list-tubes": _READ,
    "use": _LOCAL, "watch": _LOCAL, "ignore": _LOCAL, "list-tube-used": _LOCAL,
    "list-tubes-watched": _LOCAL,
    "reserve": _RESERVE, "reserve-with-timeout": _RESERVE,
    "quit": _QUIT,
    "haqueue-operator": _LOCAL,
}


class Session(Connection):
    def __init__(self, server: SessionHost, conn_id: int) -> None:
        super().__init__(server)  # connection.py: slots, output and input bounds, the lease
        self.server = server
        self.conn_id = conn_id
        self.parser = P.BeanstalkParser(server.max_job_size)
        self.use = DEFAULT_TUBE
        self.watch = SwapRemoveList([DEFAULT_TUBE])
        self.queue: deque = deque()  # at most the one parsed command the pipeline waits on
        self.in_flight = 0
        self.in_flight_bytes = 0  # put bodies submitted and not yet answered
        self.yielded = False  # used up its turn; a continuation is scheduled
        self.starved = True  # the pipeline stopped for want of input, not blocked
        self.blocked_on_writes = False
        self.reserving = False
        self.reserve_in_flight = False
        self.reserve_deadline: float | None = None  # time.monotonic()
        self.reserve_timed_out = False
        self.timer: PreciseTimer | None = None
        self.pumping = False  # inside pump(): what it calls must not start another
        self.quitting = False
        self.half_closed = False  # the client sent FIN: answer what was read, then close
        self.is_producer = False
        self.is_worker = False
        self.operator: str | None = None  # "console at HOST:PORT": its changes are events
        # Commands that arrived while the node started (arrived_early): how many are
        # still to come, when they arrived, and that time for the command being run.
        self.early: tuple[float, int] | None = None
        self.early_left = 0
        self.early_at = 0.0
        self.command_arrived: float | None = None

    # ------------------------------------------------------------ transport
    def connection_made(self, transport) -> None:
        self.transport = transport
        transport.set_write_buffer_limits(high=OUTPUT_HIGH, low=OUTPUT_LOW)
        server = self.server
        server.session_opened(self)
        directory = server.directory
        directory.ref(DEFAULT_TUBE)
        directory.count_use(DEFAULT_TUBE, 1)
        directory.ref(DEFAULT_TUBE)
        directory.count_watch(DEFAULT_TUBE, 1)

    def _input_buffered(self) -> int:
        return self.parser.buffered

    def _request_size(self) -> int:
        return self.parser.request_size

    def data_received(self, data: bytes) -> None:
        self.server.turns.raft_first()  # an overdue heartbeat before this connection's turn
        if self.early is not None:
            self._count_early_commands(data)
        self.parser.receive_data(data)
        if self.yielded:
            self._regulate_reading()
        else:
            self._serve()

    def arrived_early(self, at: float, count: int) -> None:
        """The connection came while the node started (haqueue/cli/arrivals.py), and `count`
        bytes of it had arrived by monotonic time `at`: the commands complete within them
        count their delays and timeouts from then, as beanstalkd, reading them at once,
        would have (never from earlier: every one of them was there by then)."""
        self.early = (at, count)

    def _count_early_commands(self, data: bytes) -> None:
        at, count = self.early
        self.early = None
        probe = P.BeanstalkParser(self.server.max_job_size)
        probe.receive_data(data[:count])  # the first read: they are its first bytes
        commands = 0
        event = probe.next_event()
        while event is not P.NEED_DATA and event is not P.EOF:
            commands += 1
            event = probe.next_event()
        self.early_left, self.early_at = commands, at

    def _next_command_arrived(self) -> None:
        """Which time the command about to run counts from (None: now)."""
        if self.early_left:
            self.early_left -= 1
            self.command_arrived = self.early_at
        else:
            self.command_arrived = None

    def _duration_ms(self, seconds: int) -> int:
        """deadline_ms, less the time the command waited for the node to start."""
        ms = deadline_ms(seconds)
        if self.command_arrived is None or not ms:
            return ms
        return max(0, ms - int((time.monotonic() - self.command_arrived) * 1000))

    def eof_received(self):
        # The client sends no more. Every command it sent is still answered (a
        # long pipeline may be turns away from done), a reserve still waiting
        # answers TIMED_OUT (protocol.txt, as beanstalkd 1.12 does), then the
        # connection closes, as beanstalkd's does once read() returns 0. (A TLS
        # transport closes at EOF whatever this returns.)
        self.half_closed = True
        if self.reserving and not self.reserve_in_flight:
            self.try_reserve()
        return self._input_ended()

    def connection_lost(self, exc) -> None:
        if self.closed:
            return
        self.closed = True
        if self.parser.put_pending:
            self.server.counters.commands["put"] += 1  # as beanstalkd, counted at its command line
        self._cancel_timer()
        self._stop_timers()
        self._release_tubes()
        self.server.session_closed(self)
        cut_transport_cycle(self.transport)

    def _release_tubes(self) -> None:
        """A closed connection no longer uses or watches its tubes: one that nothing
        else refers to is forgotten (tubes.py)."""
        server = self.server
        directory = server.directory
        directory.count_use(self.use, -1)
        server.unref_tube(self.use)
        for name in list(self.watch):
            directory.count_watch(name, -1)
            server.unref_tube(name)

    # What the server reads of a session (beside conn_id, flush, end and arrived_early),
    # so that app.py knows a session as little as a session knows it (host.HostedSession).
    @property
    def work_in_flight(self) -> bool:
        """A command or a reserve of this connection is in an entry not yet applied."""
        return bool(self.in_flight or self.reserve_in_flight)

    def resume_read(self) -> None:
        """A read that waited for a closed connection's reservations to come back goes on."""
        if self.reserving:
            self.try_reserve()
        else:
            self.pump()

    # --------------------------------------------------------------- output
    def _close_if_done(self) -> None:
        """After quit, or after end of input once every command read is answered."""
        if self.closed or self.slots:
            return
        if self.quitting or (self.half_closed and self.starved and not self.queue and not self.reserving):
            self.transport.close()

    # ------------------------------------------------------------- pipeline
    def _pump(self) -> None:
        queue = self.queue
        parser = self.parser
        server = self.server
        counters = server.counters.commands
        budget = COMMANDS_PER_TURN
        turn_started = perf_counter()
        turn_ends = turn_started + READ_TURN_SECONDS  # until it writes (limits.py says why)
        wrote = False
        self.starved = False
        while (not self.reserving and not self.blocked_on_writes and not self.quitting
               and self.lease_timer is None and not self.output_paused
               and self.held_bytes < OUTPUT_HIGH
               and self.in_flight < MAX_IN_FLIGHT and self.in_flight_bytes < MAX_IN_FLIGHT_BYTES):
            # The command taken leaves `queue` (or comes from the parser) at once; one
            # that cannot run yet goes back to the front of it, to wait there.
            if queue:
                event = queue.popleft()
            else:
                event = parser.next_event()
                if event is NEED_DATA or event is EOF:
                    self.starved = True
                    break
            # A turn runs at least one command: one that yielded before it ran any, because
            # the process was descheduled past turn_ends, made no progress (and left a
            # test's command unsubmitted when it committed the log: test_session_lease).
            if not budget or (budget != COMMANDS_PER_TURN and perf_counter() > turn_ends):
                queue.appendleft(event)
                self._yield_turn()
                break
            budget -= 1
            if type(event) is ProtocolError:
                if self.early_left or self.command_arrived is not None:
                    self._next_command_arrived()
                if event.counts_as is not None:
                    counters[event.counts_as] += 1
                self._reply(event.reply)
                if event.close:
                    self.quitting = True
                continue
            name, args = event
            kind, handler = _DISPATCH[name]
            if kind is _WRITE:
                if name == "kick" and args[0] > KICKS_PER_ENTRY and self.in_flight:
                    queue.appendleft(event)
                    self.blocked_on_writes = True  # a kick in parts starts from our writes applied (_kick)
                    break
                if not wrote:
                    wrote = True
                    turn_ends = turn_started + TURN_SECONDS
            elif kind is _READ:
                if self.in_flight:
                    queue.appendleft(event)
                    self.blocked_on_writes = True
                    break
                if server.defer_until_drops_applied(self):  # pumped again when they are applied
                    queue.appendleft(event)
                    break
                if not server.replica.read_lease_valid():
                    # Possibly no longer the leader (just resumed, or cut off):
                    # hold the read until a majority is heard from again, or
                    # until the step-down drops this connection. Writes need
                    # no such check: they go through the log.
                    queue.appendleft(event)
                    self._wait_for_lease()
                    break
            if self.early_left or self.command_arrived is not None:
                self._next_command_arrived()
            if name in counters:
                counters[name] += 1
            if not server.serving:
                self.abort()
                return
            handler(self, args)
        if self.held_bytes >= OUTPUT_HIGH:
            self.held_stalled = True  # flush() continues once they are written
        if self.paused_reading:
            self._regulate_reading()
        if self.quitting or self.half_closed:
            self._close_if_done()

    def _yield_turn(self) -> None:
        self.yielded = True
        self.server.turns.next_turn(self._next_turn)

    def _next_turn(self) -> None:
        self.yielded = False
        if not self.closed:
            self._serve()


    def _submit(self, command: tuple, body_bytes: int = 0, tube: str | None = None) -> None:
        """Log `command`; `tube`: a reference the command holds until it is applied."""
        slot = [None]
        self.slots.append(slot)
        self.in_flight += 1
        self.in_flight_bytes += body_bytes
        done = partial(self._write_done, slot, body_bytes, tube)
        if self.operator is not None:
            done = operator_events.recording(self.operator, command, done)
        self.server.batcher.submit(command, done)

    def _write_done(self, slot: list, body_bytes: int, tube: str | None, result) -> None:
        if tube is not None:
            self.server.unref_tube(tube)  # applied (or never will be): the job, if any, refers to it now
        full = self.in_flight >= MAX_IN_FLIGHT or self.in_flight_bytes >= MAX_IN_FLIGHT_BYTES
        self.in_flight -= 1
        self.in_flight_bytes -= body_bytes
        if self.closed:
            return
        if result is None:
            self.abort()
            return
        tag = result[0]
        if tag == _INSERTED:  # a put, the common case: its reply here, not through reply_for
            reply = slot[0] = b"INSERTED %d\r\n" % result[1]
        else:
            reply = slot[0] = reply_for(result)
            if tag == _RESERVED:
                self.is_worker = True  # reserve-job: beanstalkd counts a worker on success only
                self.needs_lease = True
            elif tag == _TOUCHED:
                self.needs_lease = True
        self.held_bytes += len(reply)
        self.server.dirty.add(self)
        if self.in_flight == 0 and self.blocked_on_writes:
            self.blocked_on_writes = False
            self.pump()
        elif full:
            self.pump()

    # ------------------------------------------------------------ commands
    def _put(self, args) -> None:
        pri, delay, ttr, body = args
        self.is_producer = True
        server = self.server
        if server.draining:
            self._reply(P.DRAINING)
            return
        if not server.memory.admits(len(body)) or not server.disk.admits(len(body)):
            # The memory high-water mark: refuse what adds jobs, as
            # beanstalkd does when malloc fails, rather than be OOM-killed;
            # and the disk reserve (disk_reserve.py), as beanstalkd does when
            # its binlog cannot reserve space, rather than stop on ENOSPC.
            server.counters.out_of_memory_replies += 1
            self._reply(P.OUT_OF_MEMORY)
            return
        # The job in flight refers to its tube, as a stored job does: without
        # that, `use a`, `put`, `use b` pipelined freed "a" before its job was
        # applied, and list-tubes never showed a tube that held a job.
        tube = self.use
        server.directory.ref(tube)
        self._submit((C.PUT, tube, pri, self._duration_ms(delay) if delay else 0, deadline_ms(ttr if ttr > 0 else 1),
                      body), len(body), tube)
        if not delay:
            server.job_made_ready(tube)

    def _delete(self, args) -> None:
        self._submit((C.DELETE, self.conn_id, args[0]))

    def _release(self, args) -> None:
        job_id, pri, delay = args
        self._submit((C.RELEASE, self.conn_id, job_id, pri, self._duration_ms(delay)))

    def _bury(self, args) -> None:
        self._submit((C.BURY, self.conn_id, args[0], args[1]))

    def _touch(self, args) -> None:
        self._submit((C.TOUCH, self.conn_id, args[0]))

    def _kick(self, args) -> None:
        bound = args[0]
        if bound <= KICKS_PER_ENTRY:
            self._submit((C.KICK, self.use, bound))
            return
        # A big kick goes as several entries of at most KICKS_PER_ENTRY jobs (an entry
        # applied for longer than an election timeout deposed its leader: issue 23, B3),
        # answered once with the sum, as beanstalkd's one kick counts. It kicks buried
        # jobs if the tube had any when it began, else delayed ones, and stops when that
        # kind runs out, as beanstalkd's does; this connection's commands after it wait
        # for it (the pump found nothing of ours in flight before it began).
        tube = self.server.state.tubes.get(self.use)
        slot = [None]
        self.slots.append(slot)
        self.in_flight += 1
        self.blocked_on_writes = True
        self._kick_part(slot, self.use, bound, 0, bool(tube is not None and tube.buried))

    def _kick_part(self, slot: list, tube: str, left: int, kicked: int, buried: bool) -> None:
        part = min(left, KICKS_PER_ENTRY)
        self.server.batcher.submit((C.KICK, tube, part),
                                   partial(self._kick_part_done, slot, tube, left, kicked, buried, part))

    def _kick_part_done(self, slot: list, tube: str, left: int, kicked: int, buried: bool, part: int,
                        result) -> None:
        if result is not None and result[0] == Tag.KICKED and not self.closed:
            kicked += result[1]
            left -= result[1]
            if result[1] == part and left:
                now = self.server.state.tubes.get(tube)
                more = now is not None and (bool(now.buried) if buried else not now.buried and now.delayed_count)
                if more:
                    self._kick_part(slot, tube, left, kicked, buried)
                    return
            result = (Tag.KICKED, kicked)
        self._write_done(slot, 0, None, result)

    def _kick_job(self, args) -> None:
        self._submit((C.KICK_JOB, args[0]))

    def _pause_tube(self, args) -> None:
        name, delay = args
        server = self.server
        exists = server.directory.exists(name, server.state)
        if not exists:
            self._reply(P.NOT_FOUND)
            return
        self._submit((C.PAUSE_TUBE, name, self._duration_ms(delay)))

    def _reserve_job(self, args) -> None:
        self._submit((C.RESERVE_JOB, self.conn_id, args[0]))

    # reads ----------------------------------------------------------------
    def _peek_reply(self, job) -> None:
        self._reply(P.found(job.id, job.body) if job is not None else P.NOT_FOUND)

    def _peek(self, args) -> None:
        server = self.server
        self._peek_reply(server.state.job(args[0]))

    def _peek_ready(self, args) -> None:
        server = self.server
        self._peek_reply(server.state.peek_ready(self.use))

    def _peek_delayed(self, args) -> None:
        server = self.server
        self._peek_reply(server.state.peek_delayed(self.use))

    def _peek_buried(self, args) -> None:
        server = self.server
        self._peek_reply(server.state.peek_buried(self.use))

    def _stats_job(self, args) -> None:
        server = self.server
        job = server.state.job(args[0])
        if job is None:
            self._reply(P.NOT_FOUND)
            return
        self._reply(P.ok(job_stats(job, server.state, wall_ms())))

    def _stats_tube(self, args) -> None:
        name = args[0]
        server = self.server
        if not server.directory.exists(name, server.state):
            self._reply(P.NOT_FOUND)
            return
        body = tube_stats(name, server.state, server.directory, server.waiting_on(name), wall_ms())
        self._reply(P.ok(body))

    def _stats(self, args) -> None:
        self._reply(P.ok(self.server.stats_body()))

    def _list_tubes(self, args) -> None:
        server = self.server
        names = server.directory.names()
        self._reply(P.ok(P.yaml_list(names)))

    # session-local ----------------------------------------------------------
    def _tube_limit_reached(self, name: str) -> bool:
        """True (and OUT_OF_MEMORY answered) if naming `name` would create one tube too many.

        beanstalkd creates tubes until malloc fails and then answers
        OUT_OF_MEMORY; haqueue answers the same at max_tubes.
        """
        server = self.server
        directory = server.directory
        if len(directory.order) < server.limits.max_tubes:
            return False
        if directory.exists(name, server.state):
            return False
        server.counters.out_of_memory_replies += 1
        self._reply(P.OUT_OF_MEMORY)
        return True

    def _use(self, args) -> None:
        name = args[0]
        directory = self.server.directory
        if name != self.use:
            if self._tube_limit_reached(name):
                return
            directory.ref(name)
            directory.count_use(name, 1)
            old, self.use = self.use, name
            directory.count_use(old, -1)
            self.server.unref_tube(old)
        self._reply(P.using(name))

    def _watch(self, args) -> None:
        name = args[0]
        if name not in self.watch:
            if len(self.watch) >= self.server.limits.max_watched_tubes:
                # beanstalkd: OUT_OF_MEMORY when the watch set cannot grow.
                self.server.counters.out_of_memory_replies += 1
                self._reply(P.OUT_OF_MEMORY)
                return
            if self._tube_limit_reached(name):
                return
        if self.watch.append(name):
            directory = self.server.directory
            directory.ref(name)
            directory.count_watch(name, 1)
        self._reply(P.watching(len(self.watch)))

    def _ignore(self, args) -> None:
        name = args[0]
        if name in self.watch:
            if len(self.watch) == 1:
                self._reply(P.NOT_IGNORED)
                return
            self.watch.remove(name)
            self.server.directory.count_watch(name, -1)
            self.server.unref_tube(name)
        self._reply(P.watching(len(self.watch)))

    def _list_tube_used(self, args) -> None:
        self._reply(P.using(self.use))

    def _list_tubes_watched(self, args) -> None:
        self._reply(P.ok(P.yaml_list(self.watch.items)))

    def _operator(self, args) -> None:
        self.operator = operator_events.who_of(args[0], self.transport.get_extra_info("peername"))
        self._reply(P.NOTED)

    def _quit(self, args) -> None:
        self.quitting = True

    # reserve ----------------------------------------------------------------
    def _reserve(self, args) -> None:
        self._start_reserve(None)

    def _reserve_with_timeout(self, args) -> None:
        timeout = args[0]
        self._start_reserve(None if timeout < 0 else timeout)

    def _start_reserve(self, timeout: int | None) -> None:
        self.is_worker = True
        self.reserving = True
        self.reserve_timed_out = False
        start = time.monotonic() if self.command_arrived is None else self.command_arrived
        self.reserve_deadline = None if timeout is None else start + timeout
        self.try_reserve()

    def try_reserve(self) -> bool:
        """Submit a reserve if a job may be ready; else wait. True if one was submitted."""
        if self.reserve_in_flight or not self.reserving or self.closed:
            return False
        server = self.server
        if self.in_flight:
            # This connection's own writes (a worker's `delete` pipelined with
            # its next `reserve`) are not applied yet, so the local state
            # cannot tell. The log can: the reserve lands after them. If it
            # finds nothing, the answer comes back here with the state current.
            self._submit_reserve()
            return True
        now = wall_ms()
        state = server.state
        ready = state.has_ready(self.watch.items, now)
        soonest = state.soonest_reservation_deadline(self.conn_id)
        if not ready and server.defer_until_drops_applied(self):
            # A connection closed a moment ago and its reservations are on
            # their way back to ready (DROP_CONN in flight): beanstalkd would
            # already have them, so decide (TIMED_OUT, DEADLINE_SOON, wait)
            # once they are applied (beanstalk/drops.py tries again).
            return False
        # A deadline is stored up to STAMP_RESOLUTION_MS after the moment the
        # client's time-to-run ends (timers.deadline_ms), so that it never
        # fires early; whether it is *soon* is judged from that moment, as
        # beanstalkd judges it (a reserve 1 s into a ttr of 1 s gets DEADLINE_SOON).
        if (not ready and soonest is not None
                and soonest - STAMP_RESOLUTION_MS - now <= SAFETY_MARGIN_MS):
            self._finish_reserve(P.DEADLINE_SOON)
            return False
        if ready:
            self._submit_reserve()
            return True
        if self.reserve_timed_out or self.half_closed or (
            self.reserve_deadline is not None and self.reserve_deadline <= time.monotonic()
        ):
            self._finish_reserve(P.TIMED_OUT)
            return False
        server.start_waiting(self)
        self._arm_timer(soonest)
        return False

    def reserve_now(self) -> None:
        """Send this waiting reserve to the log now: an entry ahead of it makes a job ready.
        If it finds none after all (another took it), it comes back and waits again."""
        if self.reserving and not self.reserve_in_flight and not self.closed:
            self._submit_reserve()

    def _submit_reserve(self) -> None:
        self.reserve_in_flight = True
        self.server.stop_waiting(self)
        self.server.batcher.submit((C.RESERVE, self.conn_id, tuple(self.watch.items)), self._reserve_done)

    def _arm_timer(self, soonest: int | None) -> None:
        self._cancel_timer()
        wake = self.reserve_deadline
        if soonest is not None:
            soon_at = monotonic_at_wall_ms(soonest - SAFETY_MARGIN_MS)
            wake = soon_at if wake is None else min(wake, soon_at)
        if wake is not None:
            self.timer = PreciseTimer(self.server.loop, wake, self._timer_fired)

    def _timer_fired(self) -> None:
        self.timer = None
        if not self.reserving or self.closed:
            return
        if self.reserve_deadline is not None and self.reserve_deadline <= time.monotonic():
            self.reserve_timed_out = True
        if not self.reserve_in_flight:
            self.try_reserve()
            self.flush()

    def _cancel_timer(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def _reserve_done(self, result) -> None:
        self.reserve_in_flight = False
        if self.closed:
            return
        if result is None:
            self.abort()
            return
        if result[0] == Tag.RESERVED:
            self.needs_lease = True
            self._finish_reserve(reply_for(result))
        else:  # someone else took it first: wait on
            self.try_reserve()
        self.server.dirty.add(self)

    def _finish_reserve(self, reply: bytes) -> None:
        self._cancel_timer()
        self.server.stop_waiting(self)
        self.reserving = False
        self._reply(reply)
        self.server.dirty.add(self)
        if not self.pumping:
            # Answered from inside pump (an immediate TIMED_OUT or
            # DEADLINE_SOON), the running pump simply goes on: calling it
            # again recursed once per pipelined reserve, and a client
            # pipelining a thousand `reserve-with-timeout 0` overflowed the
            # stack (found by the session fuzzer).
            self.pump()


_HANDLERS = {
    "put": Session._put,
    "delete": Session._delete,
    "release": Session._release,
    "bury": Session._bury,
    "touch": Session._touch,
    "kick": Session._kick,
    "kick-job": Session._kick_job,
    "pause-tube": Session._pause_tube,
    "reserve-job": Session._reserve_job,
    "peek": Session._peek,
    "peek-ready": Session._peek_ready,
    "peek-delayed": Session._peek_delayed,
    "peek-buried": Session._peek_buried,
    "stats-job": Session._stats_job,
    "stats-tube": Session._stats_tube,
    "stats": Session._stats,
    "list-tubes": Session._list_tubes,
    "use": Session._use,
    "watch": Session._watch,
    "ignore": Session._ignore,
    "list-tube-used": Session._list_tube_used,
    "list-tubes-watched": Session._list_tubes_watched,
    "reserve": Session._reserve,
    "reserve-with-timeout": Session._reserve_with_timeout,
    "quit": Session._quit,
    "haqueue-operator": Session._operator,
}
assert set(_HANDLERS) == set(_KIND)
_DISPATCH = {name: (_KIND[name], handler) for name, handler in _HANDLERS.items()}  # one lookup per command
assert set(COUNTED_COMMANDS) <= set(_KIND)
