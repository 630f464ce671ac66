"""One Gearman connection on the leader: its packets in order, its replies after commit.

The Gearman counterpart of session.py, smaller because Gearman has no
blocking reserve: a worker asks (GRAB_JOB), is told NO_JOB, says PRE_SLEEP and
is woken with NOOP when a job for one of its functions arrives.

Theory of operation. Bytes go into the sans-I/O decoder (protocol/gearman.py);
packets and admin lines come out and are handled strictly in order. Replies
go into `slots`, one per request, and leave in order:
- a request that changes the queue (SUBMIT_JOB*, GRAB_JOB*, WORK_STATUS,
  WORK_COMPLETE/FAIL/EXCEPTION, `maxqueue N`) is a command for the group-commit
  batcher; its slot fills once its entry is committed and applied, so no reply
  reports a change before it is committed (docs/design.md I1). A job handed
  out (JOB_ASSIGN*) is written only while the read lease holds, as RESERVED is;
- a request that reads the queue (GET_STATUS*, `status`, `workers`) or that
  forwards to clients (WORK_DATA, WORK_WARNING) waits until this connection's
  earlier requests are applied, so it sees them and keeps their order;
- the rest (ECHO, CAN_DO, OPTION_REQ, PRE_SLEEP, ...) is answered at once.
WORK_* reach the job's clients through the service (server/gearman/service.py),
which appends them to each client's slots, behind what it was already told.
An entry whose outcome is unknown (leadership lost) closes the connection
without a reply.

Flow control as session.py's, with limits.py's numbers: requests are decoded
only while fewer than MAX_IN_FLIGHT are in flight and the unsent output is
under OUTPUT_HIGH; a blocked connection's input stops being read at
INPUT_HIGH, so TCP pushes back; one that does not read what it is sent is
closed at OUTPUT_HARD, or after output_timeout above OUTPUT_HIGH. Each
connection runs at most COMMANDS_PER_TURN requests, then yields (turns.py).

Bad input is answered as gearmand 1.1.20 answers it (the differential tests
in tests/gearman/test_gearman_differential.py hold both to it): a magic that
is not Gearman's or a type beyond gearmand's numbering closes the connection
without a word; a response's magic, a response type sent by a client, a
request gearmand does not serve (SUBMIT_JOB_SCHED, SUBMIT_REDUCE_JOB*,
ALL_YOURS) get an ERROR and the connection goes on; so do a wrong argument
count (gearmand closes) and an argument over gearmand's limits. A packet
larger than MAX_PACKET (or the job size, for a submission) gets an ERROR and
a close. Nothing a client sends raises out of here.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from functools import partial

from haqueue.core import commands as C
from haqueue.core.gearman import HIGH, LOW, NORMAL
from haqueue.core.results import Tag
from haqueue.protocol import gearman as P
from haqueue.protocol.gearman import AdminLine, Packet, ProtocolError
from haqueue.server.connection import Connection
from haqueue.server.gc_policy import cut_transport_cycle
from haqueue.server.gearman.admin import atoi
from haqueue.server.limits import (COMMANDS_PER_TURN, MAX_IN_FLIGHT, OUTPUT_HARD, OUTPUT_HIGH,
                                   OUTPUT_LOW)

log = logging.getLogger(__name__)

# gearmand's limits (libgearman-1.0/limits.h): a function name, a unique id, a client id,
# a job handle (GEARMAND_JOB_HANDLE_SIZE 64, with its NUL: 63 bytes fit).
MAX_FUNCTION = 512
MAX_UNIQUE = 64
MAX_CLIENT_ID = 64
MAX_HANDLE = 63
# Room for a submit's function and unique id besides its data, in the decoder's packet bound.
ARGUMENT_ROOM = MAX_FUNCTION + MAX_UNIQUE + 64
# Any packet up to this size is read (gearmand reads 64 MiB and more): a worker's result,
# an ECHO_REQ. It is the output bound (limits.OUTPUT_HARD) too, so whatever is read can be
# answered or forwarded to a client that reads it; a submission's data is bounded by -z.
MAX_PACKET = OUTPUT_HARD - P.HEADER.size  # a forwarded copy alone stays within the bound

_SUBMITS = {  # packet -> (priority, background); SUBMIT_JOB_SCHED: gearmand does not serve it
    "SUBMIT_JOB": (NORMAL, False), "SUBMIT_JOB_BG": (NORMAL, True),
    "SUBMIT_JOB_HIGH": (HIGH, False), "SUBMIT_JOB_HIGH_BG": (HIGH, True),
    "SUBMIT_JOB_LOW": (LOW, False), "SUBMIT_JOB_LOW_BG": (LOW, True),
    "SUBMIT_JOB_EPOCH": (NORMAL, True),
}
_WRITE, _READ, _LOCAL = range(3)
_KIND = dict.fromkeys(_SUBMITS, _WRITE)
_KIND.update(dict.fromkeys(("GRAB_JOB", "GRAB_JOB_UNIQ", "GRAB_JOB_ALL", "WORK_STATUS", "WORK_COMPLETE",
                            "WORK_FAIL", "WORK_EXCEPTION"), _WRITE))
_KIND.update(dict.fromkeys(("GET_STATUS", "GET_STATUS_UNIQUE", "WORK_DATA", "WORK_WARNING"), _READ))
_READ_LINES = {b"status", b"workers", b"prioritystatus"}


def error(code: bytes, text: bytes) -> bytes:
    return P.response("ERROR", code, text)


NOT_EXPECTED = error(b"INVALID_COMMAND", P.NOT_EXPECTED)
JOB_NOT_FOUND = error(b"JOB_NOT_FOUND", b"Job given in work result not found")
# gearmand's answers, word for word.
HANDLE_TOO_LARGE = error(b"ARGUMENT_TOO_LARGE",
                         b"Error occurred due to GEARMAND_JOB_HANDLE_SIZE being too small from snprintf")
UNIQUE_TOO_LARGE = error(b"ARGUMENT_TOO_LARGE", b"Unique value too large")
QUEUE_ERROR = error(b"QUEUE_ERROR", b"Job queue is full")


class GearmanSession(Connection):
    PROTOCOL = "Gearman client"

    def __init__(self, service, conn_id: int) -> None:
        super().__init__(service.server)  # connection.py: slots, output and input bounds, the lease
        self.service = service  # gearman.service.GearmanService
        self.conn_id = conn_id
        self.decoder = P.GearmanDecoder(max_packet=max(MAX_PACKET, self.host.max_job_size + ARGUMENT_ROOM))
        self.peer = "-"
        self.queue: deque = deque()  # at most the one decoded request the pipeline waits on
        self.in_flight = 0
        self.blocked_on_writes = False
        self.yielded = False
        self.pumping = False
        self.starved = True
        self.quitting = False
        # Gearman's per-connection state, none of it replicated.
        self.abilities: dict[str, int] = {}  # function -> CAN_DO_TIMEOUT seconds (0: none)
        self.client_id = b"-"
        self.exceptions = False  # OPTION_REQ "exceptions": WORK_EXCEPTION is forwarded as such
        self.sleeping = False
        self.flush_scheduled = False
        self.job_timers: dict[str, asyncio.TimerHandle] = {}  # CAN_DO_TIMEOUT of the jobs it runs

    # ------------------------------------------------------------ transport
    def connection_made(self, transport) -> None:
        self.transport = transport
        transport.set_write_buffer_limits(high=OUTPUT_HIGH, low=OUTPUT_LOW)
        peer = transport.get_extra_info("peername")
        self.peer = peer[0] if isinstance(peer, tuple) else "-"
        self.service.session_opened(self)

    def _input_buffered(self) -> int:
        return self.decoder.buffered

    def _request_size(self) -> int:
        return self.decoder.request_size

    def data_received(self, data: bytes) -> None:
        self.host.turns.raft_first()  # an overdue heartbeat before this connection's turn
        self.decoder.receive_data(data)
        self._input_arrived()

    def eof_received(self):
        self.quitting = True  # answer what was read, then close
        return self._input_ended()

    def connection_lost(self, exc) -> None:
        if self.closed:
            return
        self.closed = True
        self._stop_timers()
        for timer in self.job_timers.values():
            timer.cancel()
        self.job_timers.clear()
        self.service.session_closed(self)
        cut_transport_cycle(self.transport)

    # --------------------------------------------------------------- output
    def send(self, data: bytes) -> None:
        """Something for this connection from elsewhere (a worker's WORK_*, a NOOP):
        after every reply it is owed, flushed after the current entry."""
        if self.closed:
            return
        self._reply(data)
        if self.held_bytes > OUTPUT_HARD:
            self._close_for_output("passed %d bytes of forwarded results" % OUTPUT_HARD)
            return
        if not self.flush_scheduled:
            # Often outside any entry (WORK_DATA, a NOOP): written once this loop turn ends.
            self.flush_scheduled = True
            self.host.loop.call_soon(self._scheduled_flush)

    def _scheduled_flush(self) -> None:
        self.flush_scheduled = False
        self.flush()

    def _close_if_done(self) -> None:
        if self.closed or self.slots:
            return
        if self.quitting and not self.queue and (self.starved or self.decoder.buffered == 0):
            self.transport.close()

    # ------------------------------------------------------------- pipeline
    def _pump(self) -> None:
        queue = self.queue
        budget = COMMANDS_PER_TURN
        self.starved = False
        while (not self.blocked_on_writes and self.lease_timer is None and not self.output_paused
               and self.held_bytes < OUTPUT_HIGH and self.in_flight < MAX_IN_FLIGHT and not self.closed):
            if queue:
                event = queue[0]
            else:
                event = self.decoder.next_event()
                if event is P.NEED_DATA:
                    self.starved = True
                    break
                queue.append(event)
            if not budget:
                self._yield_turn()
                break
            budget -= 1
            kind = self._kind(event)
            if kind is _READ:
                if self.in_flight:
                    self.blocked_on_writes = True
                    break
                if not self.host.replica.read_lease_valid():
                    self._wait_for_lease()
                    break
            queue.popleft()
            if not self.host.serving:
                self.abort()
                return
            if type(event) is Packet:
                self._packet(event)
            elif type(event) is AdminLine:
                self.service.admin_line(self, event.line)
            else:
                self._protocol_error(event)
        if self.held_bytes >= OUTPUT_HIGH:
            self.held_stalled = True  # flush() goes on once they are written
        if self.paused_reading:
            self._regulate_reading()
        self._close_if_done()

    @staticmethod
    def _kind(event) -> int:
        if type(event) is Packet:
            return _KIND.get(event.name, _LOCAL)
        if type(event) is AdminLine:
            words = event.line.split()
            if words and words[0].lower() in _READ_LINES:  # admin words in any case
                return _READ
        return _LOCAL

    def _yield_turn(self) -> None:
        self.yielded = True
        self.host.turns.next_turn(self._next_turn)

    def _next_turn(self) -> None:
        self.yielded = False
        if not self.closed:
            self._serve()


    def submit(self, command: tuple, on_result) -> None:
        """Log `command`; its slot gets on_result(result) once applied (bytes, b"" for no reply).
        on_result runs even if this connection has closed meanwhile (a worker's result must
        still reach its clients); only the reply is then dropped."""
        slot = [None]
        self.slots.append(slot)
        self.in_flight += 1
        self.host.batcher.submit(command, partial(self._write_done, slot, on_result))

    def _write_done(self, slot: list, on_result, result) -> None:
        self.in_flight -= 1
        if result is None:
            self.abort()  # outcome unknown: no reply may guess it
            return
        reply = on_result(result)
        if self.closed:
            return
        if reply is None:
            self.abort()
            return
        slot[0] = reply
        self.held_bytes += len(reply)
        self.host.dirty.add(self)
        if self.in_flight == 0 and self.blocked_on_writes:
            self.blocked_on_writes = False
            self.pump()
        elif not self.pumping and self.in_flight == MAX_IN_FLIGHT - 1:
            self.pump()

    # ------------------------------------------------------------- requests
    def _protocol_error(self, event: ProtocolError) -> None:
        self.host.counters.gearman_errors += 1
        if event.answered:
            self._reply(error(event.code, event.error_text))
        if event.fatal:
            self._close_after_replies()

    def _close_after_replies(self) -> None:
        """Read nothing more; close once what is owed is written (gearmand closes at once;
        the replies before are the earlier requests')."""
        self.quitting = True
        self.queue.clear()
        self.decoder.stop()

    def _packet(self, packet: Packet) -> None:
        handler = _HANDLERS.get(packet.name)
        if handler is None:  # a response type sent as a request: the wrong role
            self.host.counters.gearman_errors += 1
            self._reply(NOT_EXPECTED)
            return
        handler(self, packet.args)

    # clients ----------------------------------------------------------------
    def _submit_job(self, name: str, args: tuple) -> None:
        priority, background = _SUBMITS[name]
        function, unique, data = args[0], args[1], args[-1]
        run_at = 0
        if name == "SUBMIT_JOB_EPOCH":
            run_at = _epoch_ms(args[2])
        if run_at is None:
            self._reply(error(b"INVALID_ARGUMENTS", b"Bad schedule"))
            return
        if len(unique) > MAX_UNIQUE:
            self._reply(UNIQUE_TOO_LARGE)
            return
        if len(function) > MAX_FUNCTION:
            self._reply(error(b"INVALID_ARGUMENTS", b"Function name too long"))
            return
        if len(data) > self.host.max_job_size:
            self._reply(error(b"DATA_TOO_LARGE", b"Job data larger than the server allows"))
            return
        if self.host.draining:
            self._reply(error(b"draining", b"Server is draining"))
            return
        if not self.host.memory.admits(len(data)):
            self.host.counters.out_of_memory_replies += 1
            self._reply(error(b"MEMORY_ALLOCATION_FAILURE", b"Server is out of memory"))
            return
        if not self.host.disk.admits(len(data) + len(unique) + len(function)):
            # Below the disk reserve (disk_reserve.py): gearmand's answer for a full
            # queue, as for maxqueue (docs/gearman.md, "Disk reserve").
            self._reply(QUEUE_ERROR)
            return
        name = function.decode("latin-1")
        self.service.name_function(name)
        self.submit((C.GM_SUBMIT_KEEP, self.conn_id, name, unique, data, priority, background, run_at),
                    _created)

    def _get_status(self, args) -> None:
        handle = args[0]
        if len(handle) > MAX_HANDLE:
            self._close_after_replies()  # gearmand closes the connection, unanswered
            return
        known, running, numerator, denominator = self.host.state.gearman.status(
            handle.decode("latin-1"))
        self._reply(P.response("STATUS_RES", handle, b"1" if known else b"0", b"1" if running else b"0",
                               b"%d" % numerator, b"%d" % denominator))

    def _get_status_unique(self, args) -> None:
        unique = args[0]
        if len(unique) >= MAX_UNIQUE:
            # gearmand closes the connection, unanswered, though a submission may name 64 bytes
            self._close_after_replies()
            return
        known, running, numerator, denominator, waiting = self.host.state.gearman.status_by_unique(unique)
        self._reply(P.response("STATUS_RES_UNIQUE", unique, b"1" if known else b"0", b"1" if running else b"0",
                               b"%d" % numerator, b"%d" % denominator, b"%d" % waiting))

    def _option_req(self, args) -> None:
        if args[0].lower() == b"exceptions":  # gearmand reads option names in any case
            self.exceptions = True
            self._reply(P.response("OPTION_RES", args[0]))
        else:
            self._reply(error(b"UNKNOWN_OPTION", b"Server does not recognize given option"))

    def _set_client_id(self, args) -> None:
        self.client_id = args[0][:MAX_CLIENT_ID].replace(b" ", b"_").replace(b"\n", b"_") or b"-"

    def _echo(self, args) -> None:
        self._reply(P.response("ECHO_RES", args[0]))

    # workers ----------------------------------------------------------------
    def _can_do(self, args) -> None:
        self._add_ability(args[0], 0)

    def _can_do_timeout(self, args) -> None:
        try:
            timeout = max(0, int(args[1]))
        except ValueError:
            timeout = 0
        self._add_ability(args[0], timeout)

    def _add_ability(self, name: bytes, timeout: int) -> None:
        if len(name) > MAX_FUNCTION:  # an empty name is a function too, as in gearmand
            self._reply(error(b"INVALID_ARGUMENTS", b"Function name too long"))
            return
        function = name.decode("latin-1")
        if function not in self.abilities and len(self.abilities) >= self.host.limits.max_watched_tubes:
            # Every GRAB_JOB logs the worker's functions: bounded, as watched tubes are.
            self.host.counters.out_of_memory_replies += 1
            self._reply(error(b"MEMORY_ALLOCATION_FAILURE", b"Too many functions for one worker"))
            return
        self.service.set_ability(self, function, timeout)

    def _cant_do(self, args) -> None:
        self.service.drop_ability(self, args[0].decode("latin-1"))

    def _reset_abilities(self, args) -> None:
        self.service.drop_ability(self, None)

    def _pre_sleep(self, args) -> None:
        self.service.pre_sleep(self)

    def _grab(self, name: str) -> None:
        self.service.wake_off(self)
        functions = tuple(reversed(self.abilities))  # newest first, as gearmand tries them
        if not self.in_flight:
            # Nothing of ours in flight: the applied state can tell "nothing for you"
            # without an entry (a stale answer costs the worker one PRE_SLEEP/NOOP round).
            found = self.host.state.gearman.grabbable(functions)
            if not found:
                self._reply(P.response("NO_JOB"))
                return
        self.submit((C.GM_GRAB, self.conn_id, functions), partial(self._assigned, name))

    def _assigned(self, name: str, result: tuple):
        if result[0] != Tag.ASSIGN:
            return P.response("NO_JOB")
        _, handle, function, unique, data = result
        if self.closed:
            return b""  # the drop of this connection, logged after, puts it back
        self.needs_lease = True
        timeout = self.abilities.get(function, 0)
        if timeout:
            self.job_timers[handle] = self.host.loop.call_later(timeout, self._job_timed_out, handle)
        h, f = handle.encode(), function.encode("latin-1")
        if name == "GRAB_JOB":
            return P.response("JOB_ASSIGN", h, f, data)
        return P.response("JOB_ASSIGN_UNIQ", h, f, unique, data)  # GRAB_JOB_ALL too, as gearmand answers

    def _job_timed_out(self, handle: str) -> None:
        """CAN_DO_TIMEOUT ran out: the job goes back to its queue for the next worker, as
        gearmand 1.1.20 does (its clients hear nothing); the worker's late result gets
        JOB_NOT_FOUND. Sleeping workers of the function are woken by the entry."""
        self.job_timers.pop(handle, None)
        if self.closed or not self.host.serving:
            return
        self.host.batcher.submit((C.GM_REQUEUE, self.conn_id, handle), _ignore)

    def _work_status(self, args) -> None:
        handle, numerator, denominator = args
        # Numbers in the state, read as gearmand reads them (GET_STATUS reports them);
        # forwarded to the clients as sent.
        n, d = atoi(numerator, 0xFFFFFFFF), atoi(denominator, 0xFFFFFFFF)
        h = handle.decode("latin-1")
        service = self.service

        def done(result):
            if result[0] != Tag.STATUS:
                return JOB_NOT_FOUND
            service.forward(result[1], "WORK_STATUS", handle, numerator, denominator)
            return b""

        self.submit((C.GM_WORK_STATUS, self.conn_id, h, n, d), done)

    def _work_end(self, name: str, args) -> None:
        handle = args[0]
        if name == "WORK_FAIL" and len(handle) > MAX_HANDLE:
            self._reply(HANDLE_TOO_LARGE)  # gearmand copies WORK_FAIL's handle into its buffer
            return
        h = handle.decode("latin-1")
        timer = self.job_timers.pop(h, None)
        if timer is not None:
            timer.cancel()
        service = self.service

        def done(result):
            if result[0] != Tag.ENDED:
                return JOB_NOT_FOUND
            service.forward(result[1], name, *args)
            return b""

        self.submit((C.GM_FINISH, self.conn_id, h), done)

    def _work_data(self, name: str, args) -> None:
        handle = args[0]
        service = self.service
        job = self.host.state.gearman.jobs.get(handle.decode("latin-1"))
        clients = tuple(job.clients) if job is not None and job.worker == self.conn_id else None
        if clients is None:
            self._reply(error(b"JOB_NOT_FOUND", b"Job does not exist on server"))
            return
        service.forward(clients, name, *args)


def _created(result: tuple) -> bytes | None:
    if result[0] == Tag.CREATED:
        return P.response("JOB_CREATED", result[1].encode())
    if result[0] == Tag.QUEUE_FULL:
        return QUEUE_ERROR
    return None  # NOT_FOUND: a dead leader's connection; it is closed


def _ignore(result) -> None:
    pass


def _epoch_ms(text: bytes) -> int | None:
    try:
        epoch = int(text)
    except ValueError:
        return None
    return max(0, epoch) * 1000


_HANDLERS = {name: (lambda name: lambda s, args: s._submit_job(name, args))(name) for name in _SUBMITS}
_HANDLERS.update({
    "GET_STATUS": GearmanSession._get_status,
    "GET_STATUS_UNIQUE": GearmanSession._get_status_unique,
    "OPTION_REQ": GearmanSession._option_req,
    "SET_CLIENT_ID": GearmanSession._set_client_id,
    "ECHO_REQ": GearmanSession._echo,
    "CAN_DO": GearmanSession._can_do,
    "CAN_DO_TIMEOUT": GearmanSession._can_do_timeout,
    "CANT_DO": GearmanSession._cant_do,
    "RESET_ABILITIES": GearmanSession._reset_abilities,
    "PRE_SLEEP": GearmanSession._pre_sleep,
    "GRAB_JOB": lambda s, args: s._grab("GRAB_JOB"),
    "GRAB_JOB_UNIQ": lambda s, args: s._grab("GRAB_JOB_UNIQ"),
    "GRAB_JOB_ALL": lambda s, args: s._grab("GRAB_JOB_ALL"),
    "WORK_STATUS": GearmanSession._work_status,
    "WORK_COMPLETE": lambda s, args: s._work_end("WORK_COMPLETE", args),
    "WORK_FAIL": lambda s, args: s._work_end("WORK_FAIL", args),
    "WORK_EXCEPTION": lambda s, args: s._work_end("WORK_EXCEPTION", args),
    "WORK_DATA": lambda s, args: s._work_data("WORK_DATA", args),
    "WORK_WARNING": lambda s, args: s._work_data("WORK_WARNING", args),
})
# SUBMIT_JOB_SCHED, SUBMIT_REDUCE_JOB*, ALL_YOURS and every response type: INVALID_COMMAND
# (gearmand's answer to a packet it does not expect; it serves SUBMIT_REDUCE_JOB*, haqueue
# does not); docs/gearman.md lists them.
