"""QueueState: the deterministic queue state machine replicated by the Raft log.

Theory of operation. Every node applies the same batches in the same order
through `apply_batch(stamp, commands)`; the stamp is the leader's wall clock
at the time it made the entry. Before the commands of a batch run, time
advances to the stamp: delayed jobs whose deadline passed become ready,
reservations whose time-to-run passed are released (counted as timeouts) and
paused tubes whose pause ended resume. Time never runs backwards here: a new
leader whose clock is behind the old one's is clamped to the last stamp seen,
so deadlines can fire late by the skew but never twice.

Rules (docs/design.md I2, I4, I6):
- No clock, randomness, I/O or node identity: same log, same state.
- Every client mistake is a result, never an exception (an exception inside
  a replicated method stalls pysyncobj's apply loop forever).
- A command no server should send (unknown opcode, wrong arity or types) is
  refused whole, INTERNAL_ERROR and counted in `internal_errors`, before it
  changes anything.
- Job ids come from `next_id`, which is replicated: unique and increasing.
- A job is reserved by at most one connection; reservations are entries.

Read-only queries (peek, stats) take `now` too, and never change anything.
"""

from __future__ import annotations

import heapq
import io
import pickle
from collections import OrderedDict

from haqueue.core import commands as C
from haqueue.core import job as J
from haqueue.core import results as R
from haqueue.core.effects import Applied, Effects
from haqueue.core.results import INTERNAL_ERROR, NO_JOB, NOT_FOUND, Tag
from haqueue.core import gearman as G
from haqueue.core.gearman import GearmanState
from haqueue.core.ids import IdState
from haqueue.core.job import (BURIED, DELAYED, DELETED, MAX_PRI, MIN_TTR_MS, READY, RESERVED, Job, SharedInts,
                              tallies)
from haqueue.core.tube import Tube, compact, overgrown

_new_tuple = tuple.__new__

# 2: each tube record ends with its buried job ids, first in first out (in 1
# they came back in id order, which kick and peek-buried could tell apart).
# 3: a ninth section, the id service's state (core/ids.py); 2 reads as no ids yet.
# That section carries its own version (ids.IDS_FORMAT_VERSION), so its shape
# changes without a new snapshot format.
# 4: a tenth section, Gearman's state (core/gearman.py); 3 and older read as no Gearman jobs.
# Before a new format, store a data directory of this one (core/commands.py,
# checklist item 4; tests/replication/test_old_journals.py insists).
SNAPSHOT_FORMAT_VERSION = 4

# Deadlines one entry fires at most (delays ending and time-to-runs running out,
# together): a job costs ~5-9 us here, and an entry applied for longer than an
# election timeout (0.3 s) deposed its leader (issue 23, B3: 200,000 delayed jobs
# ending at once took 1.9 s). The rest stay due, in deadline order; next_deadline
# is then in the past, so the leader sends another TICK at once.
DEADLINES_PER_ENTRY = 5000
# A closed connection's reservations one DROP_CONN_SOME puts back at most, for the same
# reason: the server splits a bigger drop into entries of this many (server/beanstalk/drops.py).
REQUEUES_PER_ENTRY = 5000



class QueueState:
    """The whole replicated queue. Not thread-safe: one applier at a time."""

    def __init__(self) -> None:
        self.jobs: dict[int, Job] = {}
        self.tubes: dict[str, Tube] = {}
        self.next_id = 1
        self.now = 0  # the latest stamp applied (ms)
        self.total_jobs = 0
        self.job_timeouts = 0
        self.internal_errors = 0  # bugs caught at the apply boundary; must stay 0
        # Connection ids are (leader epoch << 32 | serial). A new leader raises
        # the floor when it releases orphans, so a command of an older leader's
        # connection that reaches the log after that release cannot take a
        # reservation again (I4, I5). Nothing forwards commands (a follower
        # answers NOT_LEADER: docs/design.md, docs/pysyncobj.md D7), so none
        # should arrive; the floor is the second guard, applied on every node.
        self.conn_epoch_floor = 0
        # Global deadline heaps, cleaned lazily like the tube heaps, and
        # filtered when stale entries outnumber live ones: a stale entry keeps
        # a finished job (and its body) alive until its deadline, which may be
        # days away.
        self._delays: list[tuple[int, int, Job]] = []  # (deadline, id, job) of DELAYED jobs
        self._delayed_count = 0  # live entries in _delays
        self._ttrs: list[tuple[int, int, Job, int]] = []  # (deadline, id, job, conn) of RESERVED jobs
        self._pauses: list[tuple[int, str]] = []  # (unpause_at, tube name)
        self._reserved_by: dict[int, dict[int, Job]] = {}  # conn -> {id: job}
        # Counts over all tubes, kept incrementally for `stats`.
        self.reserved_count = 0
        self._ints = SharedInts()  # one object per priority, delay and ttr value
        # The id service rides on the same log, with its own section of the records.
        self.ids = IdState()
        # ...and so does Gearman, in a namespace of its own (core/gearman.py says why).
        self.gearman = GearmanState()
        # What the entry being applied did (effects.py); fresh sets per entry.
        self._woken: set[str] = set()  # tubes in which a job became ready
        self._emptied: set[str] = set()  # tubes that lost their last job

    # ------------------------------------------------------------------
    # applying the log
    def apply_batch(self, stamp: int, commands: list[tuple]) -> Applied:
        """Apply one log entry: one result per command, and what it did. Never raises."""
        self._woken = set()
        self._emptied = set()
        self.gearman.woken = set()
        results = self._apply_commands(stamp, commands)
        return _new_tuple(Applied, (results, self.effects()))  # Applied(...) without its Python __new__

    def effects(self) -> Effects:
        """What happened since the last entry began (apply_batch returns it)."""
        return _new_tuple(Effects, (self._woken, self._emptied, self.next_deadline(), self.gearman.woken))

    def _apply_commands(self, stamp: int, commands: list[tuple]) -> list[tuple]:
        if type(commands) is not list and type(commands) is not tuple:
            self.internal_errors += 1
            return []
        if type(stamp) is not int:
            # Not a time: refuse the whole entry rather than guess one.
            self.internal_errors += 1
            return [INTERNAL_ERROR] * len(commands)
        self.advance(stamp)
        now = self.now
        handlers = _HANDLERS
        results = []
        append = results.append
        for cmd in commands:
            try:
                result = handlers[cmd[0]](self, cmd, now)
            except Exception:
                # An unknown opcode, a command of the wrong arity, or a bug:
                # every node hits it at the same entry, so state stays
                # identical; the count makes tests fail loudly. Handlers check
                # their arguments' types before changing anything, so a wrong
                # one cannot leave a command half applied.
                self.internal_errors += 1
                result = INTERNAL_ERROR
            append(result)
        return results

    def _malformed(self) -> tuple:
        """A command no server should send (wrong types): counted, refused."""
        self.internal_errors += 1
        return INTERNAL_ERROR

    def advance(self, stamp: int) -> None:
        """Move time forward to `stamp` and fire every deadline up to it."""
        if stamp > self.now:
            self.now = stamp
        now = self.now
        budget = DEADLINES_PER_ENTRY
        delays = self._delays
        while budget and delays and delays[0][0] <= now:
            entry = heapq.heappop(delays)
            job = entry[2]
            if job.entry is entry:
                budget -= 1
                self._delayed_count -= 1
                tube = job.tube
                tube.unlink_delayed(job)
                tube.push_ready(job)
                self._woken.add(tube.name)
        ttrs = self._ttrs
        while budget and ttrs and ttrs[0][0] <= now:
            entry = heapq.heappop(ttrs)
            job = entry[2]
            if job.entry is entry:
                budget -= 1
                job.tallies += J.TIMEOUT
                self.job_timeouts += 1
                self._unreserve(job)
                job.tube.push_ready(job)
                self._woken.add(job.tube.name)
        pauses = self._pauses
        while pauses and pauses[0][0] <= now:
            unpause_at, name = heapq.heappop(pauses)
            tube = self.tubes.get(name)
            if tube is not None and tube.pause and tube.unpause_at == unpause_at:
                tube.pause = 0
                tube.unpause_at = 0
                if tube.ready_count:
                    self._woken.add(name)
        self.gearman.advance(now)

    def next_deadline(self) -> int | None:
        """The earliest pending deadline (ms), for the leader's timer."""
        # Once per entry on every node: the live-entry checks of _heap_top_live, inlined.
        best = None
        for heap in (self._delays, self._ttrs):
            while heap:
                entry = heap[0]
                if entry[2].entry is entry:
                    if best is None or entry[0] < best:
                        best = entry[0]
                    break
                heapq.heappop(heap)
        pauses = self._pauses
        if pauses:
            while pauses and not self._heap_top_live(pauses):
                heapq.heappop(pauses)
            if pauses and (best is None or pauses[0][0] < best):
                best = pauses[0][0]
        scheduled = self.gearman.next_deadline()
        if scheduled is not None and (best is None or scheduled < best):
            best = scheduled
        return best

    def ready_at(self, now: int) -> dict[str, int]:
        """Per tube, how many jobs would be ready to reserve after `advance(now)` that are
        not now: delays and time-to-runs ending by `now`, and the ready jobs of tubes whose
        pause ends by then. Read-only. The leader sends waiting reserves in the same entry
        as the TICK that fires these deadlines, instead of in the entry after it."""
        counts: dict[str, int] = {}
        budget = DEADLINES_PER_ENTRY  # as advance() fires them: in order, at most this many
        for heap in (self._delays, self._ttrs):
            for entry in _due_in_order(heap, now):
                if not budget:
                    break
                job = entry[2]
                if job.entry is entry:
                    budget -= 1
                    name = job.tube.name
                    counts[name] = counts.get(name, 0) + 1
        unpausing = set()  # a tube paused, unpaused and paused again to the same end has two entries
        for unpause_at, name in _due_entries(self._pauses, now):
            tube = self.tubes.get(name)
            if tube is not None and tube.pause and tube.unpause_at == unpause_at and name not in unpausing:
                unpausing.add(name)
                counts[name] = counts.get(name, 0) + tube.ready_count
        tubes = self.tubes
        return {name: n for name, n in counts.items() if n and not tubes[name].paused(now)}

    def _heap_top_live(self, heap) -> bool:
        entry = heap[0]
        if heap is self._pauses:
            tube = self.tubes.get(entry[1])
            return tube is not None and tube.pause > 0 and tube.unpause_at == entry[0]
        return entry[2].entry is entry

    # ------------------------------------------------------------------
    # helpers
    def tube(self, name: str) -> Tube:
        tube = self.tubes.get(name)
        if tube is None:
            tube = self.tubes[name] = Tube(name, self.jobs)
        return tube

    def _make_ready_or_delayed(self, job: Job, delay: int, now: int) -> None:
        if delay > 0:
            delays = self._delays
            heapq.heappush(delays, job.tube.push_delayed(job, now + delay))
            self._delayed_count += 1
            if overgrown(delays, self._delayed_count):
                compact(delays)
        else:
            job.tube.push_ready(job)
            self._woken.add(job.tube.name)

    def _reserve(self, job: Job, conn: int, now: int) -> tuple:
        job.state = RESERVED
        job.tallies += J.RESERVE
        deadline = now + job.ttr
        job.tube.reserved_count += 1
        self.reserved_count += 1
        held = self._reserved_by.get(conn)
        if held is None:
            held = self._reserved_by[conn] = {}
        held[job.id] = job
        job.entry = entry = (deadline, job.id, job, conn)
        ttrs = self._ttrs
        heapq.heappush(ttrs, entry)
        if overgrown(ttrs, self.reserved_count):
            compact(ttrs)
        return (Tag.RESERVED, job.id, job.body)

    def _unreserve(self, job: Job) -> None:
        conn = job.entry[3]
        held = self._reserved_by.get(conn)
        if held is not None:
            held.pop(job.id, None)
            if not held:
                del self._reserved_by[conn]
        job.entry = None
        job.tube.reserved_count -= 1
        self.reserved_count -= 1
        if overgrown(self._ttrs, self.reserved_count):
            compact(self._ttrs)  # in place: advance() may be popping it

    def _take_out(self, job: Job) -> None:
        """Remove a job from whatever queue holds it (its heap entries go stale)."""
        tube = job.tube
        state = job.state
        if state == READY:
            tube.unlink_ready(job)
        elif state == DELAYED:
            tube.unlink_delayed(job)
            self._delayed_count -= 1
            if overgrown(self._delays, self._delayed_count):
                compact(self._delays)
        elif state == BURIED:
            del tube.buried[job.id]
        elif state == RESERVED:
            self._unreserve(job)

    def _reserved_by_conn(self, conn: int, job_id: int) -> Job | None:
        held = self._reserved_by.get(conn)
        return held.get(job_id) if held is not None else None

    # ------------------------------------------------------------------
    # commands
    def _put(self, cmd: tuple, now: int) -> tuple:
        _, tube_name, pri, delay, ttr, body = cmd
        if (type(tube_name) is not str or type(pri) is not int or type(delay) is not int
                or type(ttr) is not int or type(body) is not bytes or not 0 <= pri <= MAX_PRI):
            return self._malformed()
        job_id = self.next_id
        self.next_id = job_id + 1
        tube = self.tubes.get(tube_name) or self.tube(tube_name)
        ints = self._ints
        job = Job(job_id, tube, ints[pri], ints[delay], ints[ttr] if ttr >= MIN_TTR_MS else MIN_TTR_MS,
                  body, now)
        self.jobs[job_id] = job
        self.total_jobs += 1
        tube.total_jobs += 1
        if delay > 0:
            self._make_ready_or_delayed(job, delay, now)
        else:  # the common case, inlined
            tube.push_ready(job)
            self._woken.add(tube_name)
        return (Tag.INSERTED, job_id)

    def _reserve_cmd(self, cmd: tuple, now: int) -> tuple:
        _, conn, tube_names = cmd
        if type(conn) is not int or (type(tube_names) is not tuple and type(tube_names) is not list):
            return self._malformed()
        if conn >> 32 < self.conn_epoch_floor:
            return NO_JOB
        best = None
        tubes = self.tubes
        for name in tube_names:
            if type(name) is not str:
                return self._malformed()
            tube = tubes.get(name)
            if tube is None or not tube.ready_count or tube.paused(now):
                continue
            job = tube.peek_ready()
            if job is not None and (best is None or (job.pri, job.id) < (best.pri, best.id)):
                best = job
        if best is None:
            return NO_JOB
        best.tube.unlink_ready(best)
        return self._reserve(best, conn, now)

    def _conn_and_job(self, cmd: tuple) -> tuple[int, Job | None] | None:
        """(conn, the job it names or None) of an (OP, conn, job_id) command; None if malformed."""
        _, conn, job_id = cmd
        if type(conn) is not int or type(job_id) is not int:
            return None
        return conn, self.jobs.get(job_id)

    def _reserve_job(self, cmd: tuple, now: int) -> tuple:
        named = self._conn_and_job(cmd)
        if named is None:
            return self._malformed()
        conn, job = named
        if job is None or job.state == RESERVED or conn >> 32 < self.conn_epoch_floor:
            return NOT_FOUND
        self._take_out(job)
        return self._reserve(job, conn, now)

    def _delete(self, cmd: tuple, now: int) -> tuple:
        _, conn, job_id = cmd
        if type(conn) is not int or type(job_id) is not int:
            return self._malformed()
        job = self.jobs.get(job_id)
        if job is None or (job.state == RESERVED and job.entry[3] != conn):  # entry: (deadline, id, job, conn)
            return NOT_FOUND
        self._take_out(job)
        job.state = DELETED
        del self.jobs[job.id]
        tube = job.tube
        tube.cmd_delete += 1
        if tube.job_count == 0:
            self._emptied.add(tube.name)
        return R.DELETED

    def _give_back(self, conn: int, job_id: int, pri: int) -> Job | None:
        """The job `conn` holds, no longer reserved, at priority `pri` (release and bury
        both start so); None if `conn` holds no such job."""
        job = self._reserved_by_conn(conn, job_id)
        if job is not None:
            self._unreserve(job)
            job.pri = self._ints[pri]
        return job

    def _release(self, cmd: tuple, now: int) -> tuple:
        _, conn, job_id, pri, delay = cmd
        if (type(conn) is not int or type(job_id) is not int or type(pri) is not int or type(delay) is not int
                or not 0 <= pri <= MAX_PRI):
            return self._malformed()
        job = self._give_back(conn, job_id, pri)
        if job is None:
            return NOT_FOUND
        job.delay = self._ints[delay]
        job.tallies += J.RELEASE
        self._make_ready_or_delayed(job, delay, now)
        return R.RELEASED

    def _bury(self, cmd: tuple, now: int) -> tuple:
        _, conn, job_id, pri = cmd
        if type(conn) is not int or type(job_id) is not int or type(pri) is not int or not 0 <= pri <= MAX_PRI:
            return self._malformed()
        job = self._give_back(conn, job_id, pri)
        if job is None:
            return NOT_FOUND
        job.tallies += J.BURY
        job.tube.push_buried(job)
        return R.BURIED

    def _touch(self, cmd: tuple, now: int) -> tuple:
        _, conn, job_id = cmd
        if type(conn) is not int or type(job_id) is not int:
            return self._malformed()
        job = self._reserved_by_conn(conn, job_id)
        if job is None:
            return NOT_FOUND
        deadline = now + job.ttr
        if deadline != job.entry[0]:  # touched again in the same ms: entry stands
            job.entry = entry = (deadline, job_id, job, conn)
            ttrs = self._ttrs
            heapq.heappush(ttrs, entry)
            if overgrown(ttrs, self.reserved_count):
                compact(ttrs)
        return R.TOUCHED

    def _kick_one(self, job: Job) -> None:
        self._take_out(job)
        job.tallies += J.KICK
        job.tube.push_ready(job)
        self._woken.add(job.tube.name)

    def _kick(self, cmd: tuple, now: int) -> tuple:
        _, tube_name, bound = cmd
        if type(tube_name) is not str or type(bound) is not int:
            return self._malformed()
        tube = self.tubes.get(tube_name)
        kicked = 0
        if tube is not None:
            if tube.buried:
                while kicked < bound and tube.buried:
                    self._kick_one(next(iter(tube.buried.values())))
                    kicked += 1
            else:
                while kicked < bound:
                    job = tube.peek_delayed()
                    if job is None:
                        break
                    self._kick_one(job)
                    kicked += 1
        return (Tag.KICKED, kicked)

    def _kick_job(self, cmd: tuple, now: int) -> tuple:
        _, job_id = cmd
        if type(job_id) is not int:
            return self._malformed()
        job = self.jobs.get(job_id)
        if job is None or job.state not in (BURIED, DELAYED):
            return NOT_FOUND
        self._kick_one(job)
        return R.KICKED

    def _pause_tube(self, cmd: tuple, now: int) -> tuple:
        _, tube_name, delay = cmd
        if type(tube_name) is not str or type(delay) is not int:
            return self._malformed()
        tube = self.tube(tube_name)
        tube.cmd_pause += 1
        if delay <= 0:
            # beanstalkd 1.12 pauses for 1 ns, so that waiting reserves notice
            # the deadline: at ms resolution the pause is over at once.
            tube.pause = 0
            tube.unpause_at = 0
            if tube.ready_count:
                self._woken.add(tube.name)
            return R.PAUSED
        unpause_at = now + delay
        fresh = not (tube.pause and tube.unpause_at == unpause_at)  # else its entry stands
        tube.pause = delay
        tube.unpause_at = unpause_at
        if fresh:
            pauses = self._pauses
            heapq.heappush(pauses, (unpause_at, tube_name))
            if overgrown(pauses, len(self.tubes)):
                # Rebuilt from the tubes: (time, name) keys can repeat.
                pauses[:] = [(t.unpause_at, t.name) for t in self.tubes.values() if t.pause]
                heapq.heapify(pauses)
        return R.PAUSED

    def _drop_conn(self, cmd: tuple, now: int) -> tuple:
        _, conn = cmd
        if type(conn) is not int:
            return self._malformed()
        self._requeue_reservations([conn])
        return R.DONE

    def _drop_conn_some(self, cmd: tuple, now: int) -> tuple:
        """DROP_CONN of at most `limit` reservations, the lowest ids first (the order every
        node agrees on); answers (OK, how many the connection still holds)."""
        _, conn, limit = cmd
        if type(conn) is not int or type(limit) is not int or limit < 1:
            return self._malformed()
        held = self._reserved_by.get(conn)
        if held:
            ids = sorted(held) if len(held) <= limit else heapq.nsmallest(limit, held)
            self._requeue([held[job_id] for job_id in ids])
        return (R.Tag.OK, len(self._reserved_by.get(conn, ())))

    def _release_orphans(self, cmd: tuple, now: int) -> tuple:
        if len(cmd) == 2:
            _, keep = cmd
            epoch = 0
        else:
            _, keep, epoch = cmd
        if (type(keep) is not tuple and type(keep) is not list) or type(epoch) is not int:
            return self._malformed()
        keep = set(keep)
        if any(type(conn) is not int for conn in keep):
            return self._malformed()
        if epoch > self.conn_epoch_floor:
            self.conn_epoch_floor = epoch
        self._requeue_reservations([c for c in sorted(self._reserved_by) if c not in keep])
        self.gearman.drop_all_but(keep)
        return R.DONE

    def _requeue_reservations(self, conns: list[int]) -> None:
        # As beanstalkd's enqueue_reserved_jobs on connection close: back to
        # ready with no release or timeout counted (the `reserves` count tells
        # workers a job was handed out before).
        for conn in conns:
            held = self._reserved_by.get(conn)
            if held:
                self._requeue(sorted(held.values(), key=_by_id))

    def _requeue(self, jobs: list[Job]) -> None:
        for job in jobs:
            self._unreserve(job)
            job.tube.push_ready(job)
            self._woken.add(job.tube.name)

    def _id_reserve(self, cmd: tuple, now: int) -> tuple:
        _, rule, app, n = cmd
        return self.ids.reserve(rule, app, n, now)  # checks its own argument types

    def _id_set_rules(self, cmd: tuple, now: int) -> tuple:
        _, records = cmd
        return self.ids.set_rules(records)  # validates every record; never raises
    # Gearman (core/gearman.py): arguments checked here, the state machine trusts them.
    def _gm_submit(self, cmd: tuple, now: int) -> tuple:
        op, conn, function, unique, data, priority, background, run_at = cmd
        if (type(conn) is not int or type(function) is not str or type(unique) is not bytes
                or type(data) is not bytes or type(priority) is not int or type(background) is not bool
                or type(run_at) is not int or not G.HIGH <= priority <= G.LOW):
            return self._malformed()
        if not background and conn >> 32 < self.conn_epoch_floor:
            # A dead leader's client, its command forwarded late: nobody would
            # ever hear of this job, and nothing would end it.
            return NOT_FOUND
        return self.gearman.submit(function, unique, data, priority, background, run_at, conn, now,
                                   as_gearmand=op == C.GM_SUBMIT_KEEP)

    def _gm_grab(self, cmd: tuple, now: int) -> tuple:
        _, conn, functions = cmd
        if type(conn) is not int or (type(functions) is not tuple and type(functions) is not list) or any(
                type(f) is not str for f in functions):
            return self._malformed()
        if conn >> 32 < self.conn_epoch_floor:
            return NO_JOB  # a dead leader's worker (as _reserve_cmd)
        return self.gearman.grab(conn, tuple(functions), now)

    def _gm_work_status(self, cmd: tuple, now: int) -> tuple:
        _, conn, handle, numerator, denominator = cmd
        if (type(conn) is not int or type(handle) is not str or type(numerator) is not int
                or type(denominator) is not int):
            return self._malformed()
        return self.gearman.work_status(conn, handle, numerator, denominator)

    def _gm_finish(self, cmd: tuple, now: int) -> tuple:
        _, conn, handle = cmd
        if type(conn) is not int or type(handle) is not str:
            return self._malformed()
        return self.gearman.finish(conn, handle)

    def _gm_requeue(self, cmd: tuple, now: int) -> tuple:
        _, conn, handle = cmd
        if type(conn) is not int or type(handle) is not str:
            return self._malformed()
        return self.gearman.requeue(conn, handle)

    def _gm_drop_conn(self, cmd: tuple, now: int) -> tuple:
        _, conn = cmd
        if type(conn) is not int:
            return self._malformed()
        return self.gearman.drop_connection(conn)

    def _gm_max_queue(self, cmd: tuple, now: int) -> tuple:
        _, function, size = cmd
        if type(function) is not str or type(size) is not int:
            return self._malformed()
        return self.gearman.set_max_queue(function, size)

    def _forget_tube(self, cmd: tuple, now: int) -> tuple:
        _, tube_name = cmd
        if type(tube_name) is not str:
            return self._malformed()
        tube = self.tubes.get(tube_name)
        if tube is not None and tube.job_count == 0:
            del self.tubes[tube_name]
            # Only stale entries are left; the delayed ones point at their
            # jobs, which point back at the tube: a reference cycle the
            # server's frozen collector would never find (server/gc_policy.py).
            # Cut it, and let the stale ready keys go too.
            tube.ready.clear()
            tube.delayed.clear()
        return R.DONE

    def _tick(self, cmd: tuple, now: int) -> tuple:
        if len(cmd) != 1:
            return self._malformed()
        return R.DONE

    # ------------------------------------------------------------------
    # read-only queries
    def job_time_left(self, job: Job, now: int) -> int:
        if job.state in (RESERVED, DELAYED):
            return max(0, job.deadline - now)
        return 0

    def reservations_of(self, conn: int) -> dict[int, Job]:
        return self._reserved_by.get(conn, {})

    def holders_of_more_than(self, count: int) -> list[int]:
        """The connections holding more than `count` reservations, in id order."""
        return sorted(conn for conn, held in self._reserved_by.items() if len(held) > count)

    def soonest_reservation_deadline(self, conn: int) -> int | None:
        held = self._reserved_by.get(conn)
        if not held:
            return None
        return min(job.deadline for job in held.values())

    def job(self, job_id: int) -> Job | None:
        return self.jobs.get(job_id)

    # peek-ready, peek-delayed, peek-buried: the next job of each queue of a tube
    # (dropping stale heap entries on the way, which changes nothing replicated).
    def peek_ready(self, tube_name: str) -> Job | None:
        tube = self.tubes.get(tube_name)
        return tube.peek_ready() if tube is not None else None

    def peek_delayed(self, tube_name: str) -> Job | None:
        tube = self.tubes.get(tube_name)
        return tube.peek_delayed() if tube is not None else None

    def peek_buried(self, tube_name: str) -> Job | None:
        tube = self.tubes.get(tube_name)
        return tube.peek_buried() if tube is not None else None

    def reservable(self, tube_name: str, now: int) -> int:
        """How many jobs a reserve could take from this tube at `now`: its ready
        jobs, none while it is paused."""
        tube = self.tubes.get(tube_name)
        if tube is None or tube.paused(now):
            return 0
        return tube.ready_count

    def has_ready(self, tube_names, now: int) -> bool:
        tubes = self.tubes
        for name in tube_names:
            tube = tubes.get(name)
            if tube is not None and tube.ready_count and not tube.paused(now):
                return True
        return False

    def counts(self) -> dict[str, int]:
        urgent = ready = delayed = buried = 0
        for tube in self.tubes.values():
            urgent += tube.urgent_count
            ready += tube.ready_count
            delayed += tube.delayed_count
            buried += len(tube.buried)
        return {
            "urgent": urgent,
            "ready": ready,
            "reserved": self.reserved_count,
            "delayed": delayed,
            "buried": buried,
        }

    # ------------------------------------------------------------------
    # snapshots and digests
    def to_records(self) -> tuple:
        """Everything replicated, as plain data in a canonical order."""
        tubes = tuple(
            (t.name, t.total_jobs, t.cmd_delete, t.cmd_pause, t.pause, t.unpause_at, tuple(t.buried))
            for t in self.tubes.values()
        )
        jobs = tuple(self.jobs[i].to_record() for i in sorted(self.jobs))
        return (
            SNAPSHOT_FORMAT_VERSION,
            self.next_id,
            self.now,
            self.total_jobs,
            self.job_timeouts,
            tubes,
            jobs,
            self.conn_epoch_floor,
            self.ids.to_records(),
            G.to_records(self.gearman),
        )

    def serialize(self) -> bytes:
        return pickle.dumps(self.to_records(), protocol=5)

    @classmethod
    def deserialize(cls, data: bytes) -> "QueueState":
        return cls.from_records(pickle.loads(data))

    @classmethod
    def from_records(cls, records: tuple) -> "QueueState":
        version = records[0]
        ids = gearman = None
        if version == SNAPSHOT_FORMAT_VERSION:
            _, next_id, now, total_jobs, job_timeouts, tubes, jobs, floor, ids, gearman = records
        elif version == 3:
            _, next_id, now, total_jobs, job_timeouts, tubes, jobs, floor, ids = records
        elif version == 2:
            _, next_id, now, total_jobs, job_timeouts, tubes, jobs, floor = records
        elif version == 1:
            # Buried jobs are restored in id order, the best 1 can do; some
            # version-1 records predate the epoch floor.
            _, next_id, now, total_jobs, job_timeouts, tubes, jobs = records[:7]
            floor = records[7] if len(records) > 7 else 0
            tubes = [(*t, None) for t in tubes]
        else:
            raise ValueError(f"snapshot format {version}, this node reads {SNAPSHOT_FORMAT_VERSION}")
        state = cls()
        if ids is not None:
            state.ids = IdState.from_records(ids)
        if gearman is not None:
            state.gearman = G.from_records(gearman)
        state.next_id = next_id
        state.now = now
        state.total_jobs = total_jobs
        state.job_timeouts = job_timeouts
        state.conn_epoch_floor = floor
        buried_order = []
        for name, total, cmd_delete, cmd_pause, pause, unpause_at, buried in tubes:
            tube = state.tube(name)
            if buried is not None:
                buried_order.append((tube, buried))
            tube.total_jobs = total
            tube.cmd_delete = cmd_delete
            tube.cmd_pause = cmd_pause
            tube.pause = pause
            tube.unpause_at = unpause_at
            if pause:
                state._pauses.append((unpause_at, name))
        last_created = None
        for rec in jobs:
            (job_id, tube_name, pri, delay, ttr, body, job_state, deadline, created, reserver,
             reserves, timeouts, releases, buries, kicks) = rec
            tube = state.tube(tube_name)
            # Unpickled ints are one object each: share the repeated values again
            # (jobs come in id order, so equal creation times are neighbours).
            if created == last_created:
                created = last_created
            last_created = created
            ints = state._ints
            job = Job(job_id, tube, ints[pri], ints[delay], ints[ttr], body, created)
            state.jobs[job_id] = job
            if job_state == READY:
                tube.push_ready(job)
            elif job_state == DELAYED:
                state._delays.append(tube.push_delayed(job, deadline))
                state._delayed_count += 1
            elif job_state == BURIED:
                tube.push_buried(job)  # reordered below when the record says how
            elif job_state == RESERVED:
                state._reserve(job, reserver, deadline - job.ttr)
            job.tallies = tallies(reserves, timeouts, releases, buries, kicks)
        for tube, buried in buried_order:
            if len(buried) != len(tube.buried):
                raise ValueError(f"snapshot lists {len(buried)} buried jobs for {tube.name!r}, has {len(tube.buried)}")
            tube.buried = OrderedDict((job_id, tube.buried[job_id]) for job_id in buried)
        heapq.heapify(state._delays)
        heapq.heapify(state._pauses)
        return state

    def digest(self) -> str:
        """A hash of the replicated state: equal on every node that applied the same log."""
        # Without pickle's memo: with it, the bytes depend on which equal
        # values happen to be one object (a body shared by two puts, a name
        # read back from a snapshot), so equal states could hash apart.
        out = io.BytesIO()
        pickler = pickle.Pickler(out, protocol=5)
        pickler.fast = True
        pickler.dump(self.to_records())
        import hashlib  # here: a node's start has no use for it (2 ms)

        return hashlib.sha256(out.getvalue()).hexdigest()


def _due_entries(heap: list, now: int):
    """The entries of a heap whose key (first item) is at most `now`, in no order: a walk
    that stops below any entry past `now`, so it costs about as many steps as it finds."""
    stack = [0] if heap else []
    size = len(heap)
    while stack:
        i = stack.pop()
        entry = heap[i]
        if entry[0] > now:
            continue
        yield entry
        for child in (2 * i + 1, 2 * i + 2):
            if child < size:
                stack.append(child)


def _due_in_order(heap: list, now: int):
    """The entries of a heap whose key is at most `now`, in the order heappop would give
    them, without changing the heap: a walk that keeps the frontier in a heap of its own,
    so taking k entries costs O(k log k) however many are due."""
    if not heap or heap[0][0] > now:
        return
    frontier = [(heap[0], 0)]
    size = len(heap)
    while frontier:
        entry, i = heapq.heappop(frontier)
        yield entry
        for child in (2 * i + 1, 2 * i + 2):
            if child < size and heap[child][0] <= now:
                heapq.heappush(frontier, (heap[child], child))


def _by_id(job: Job) -> int:
    return job.id


_HANDLERS = {
    C.TICK: QueueState._tick,
    C.PUT: QueueState._put,
    C.RESERVE: QueueState._reserve_cmd,
    C.RESERVE_JOB: QueueState._reserve_job,
    C.DELETE: QueueState._delete,
    C.RELEASE: QueueState._release,
    C.BURY: QueueState._bury,
    C.TOUCH: QueueState._touch,
    C.KICK: QueueState._kick,
    C.KICK_JOB: QueueState._kick_job,
    C.PAUSE_TUBE: QueueState._pause_tube,
    C.DROP_CONN: QueueState._drop_conn,
    C.RELEASE_ORPHANS: QueueState._release_orphans,
    C.FORGET_TUBE: QueueState._forget_tube,
    C.ID_RESERVE: QueueState._id_reserve,
    C.ID_SET_RULES: QueueState._id_set_rules,
    C.GM_SUBMIT: QueueState._gm_submit,
    C.GM_GRAB: QueueState._gm_grab,
    C.GM_WORK_STATUS: QueueState._gm_work_status,
    C.GM_FINISH: QueueState._gm_finish,
    C.GM_DROP_CONN: QueueState._gm_drop_conn,
    C.GM_MAX_QUEUE: QueueState._gm_max_queue,
    C.GM_SUBMIT_KEEP: QueueState._gm_submit,
    C.GM_REQUEUE: QueueState._gm_requeue,
    C.DROP_CONN_SOME: QueueState._drop_conn_some,
}
