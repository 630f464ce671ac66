"""GearmanState: the Gearman job server's queue as a deterministic state machine (issue 13).

What gearmand keeps in one process, kept here in the Raft log's state, so
that background jobs and their status survive the loss of any node. Pure:
time is the entry's stamp, connection ids are arguments, no I/O.

Decisions (docs/gearman.md describes them for users):
- **Its own namespace.** Gearman functions are not beanstalkd tubes. A
  Gearman client may wait for WORK_COMPLETE, and may share a job with other
  clients through its unique id; a beanstalkd worker draining the same queue
  would end such jobs without either. Both protocols ride the same log.
- **Handles** are "H:haqueue:N" with N from a replicated counter: unique
  across failovers and restarts (gearmand's include its host and a counter
  that restarts with the process).
- **Priorities** high, normal, low, first in first out within each; a job
  whose worker goes away goes back to the end of its priority's queue, as
  gearmand 1.1.20 does (tests/gearman/test_gearman_differential.py shows it).
- **A worker's functions** are tried in its order (the front end passes
  the newest ability first, as gearmand keeps them), and the first with a
  queued job gives its most urgent one, as gearmand's job_take does.
- **Unique ids**: a second submission of the same function and unique id
  while the job exists attaches to it (same handle); a foreground client is
  then told its result too. An empty unique id never coalesces; the unique
  id "-" coalesces submissions of the same data, as gearmand's does.
- **Foreground jobs** are logged like background ones (so a worker can finish
  them), but their clients' connections belong to the leader: when a client's
  connection goes, its queued foreground jobs that no other client waits for
  are dropped, and running ones finish without anyone to tell. When the
  leader changes every connection goes, workers' too, so those running ones
  are dropped as well (drop_all_but). Background jobs always stay.
- **maxqueue**: a function's jobs, queued or running as gearmand counts them
  (GM_SUBMIT, the older opcode: queued only), are bounded when set; a
  submission beyond it is refused (QUEUE_FULL), as gearmand answers.
- **A background submission of a foreground job's unique id** makes that job
  background (GM_SUBMIT_KEEP): it was acknowledged as background, so it must
  survive its foreground clients leaving and a change of leader.
- **Scheduled jobs** (SUBMIT_JOB_EPOCH) wait until an entry's stamp
  reaches their time, like beanstalkd's delayed jobs.
"""

from __future__ import annotations

import heapq
from collections import deque

from haqueue.core.results import DONE, NO_JOB, NOT_FOUND, QUEUE_FULL, REQUEUED, Tag

HIGH, NORMAL, LOW = 0, 1, 2
QUEUED, RUNNING = "queued", "running"
HANDLE_PREFIX = "H:haqueue:"



class GearmanJob:
    __slots__ = ("handle", "function", "unique", "data", "priority", "background", "state", "worker",
                 "clients", "numerator", "denominator", "run_at")

    def __init__(self, handle: str, function: str, unique: bytes, data: bytes, priority: int,
                 background: bool, run_at: int) -> None:
        self.handle = handle
        self.function = function
        self.unique = unique
        self.data = data
        self.priority = priority
        self.background = background
        self.state = QUEUED
        self.worker: int | None = None
        self.clients: list[int] = []  # foreground clients waiting for the result, in order
        self.numerator = 0
        self.denominator = 0
        self.run_at = run_at  # ms; 0: at once


class GearmanFunction:
    __slots__ = ("name", "queues", "running", "max_queue", "queued")

    def __init__(self, name: str) -> None:
        self.name = name
        self.queues = (deque(), deque(), deque())  # handles by priority, oldest first
        self.running = 0
        self.queued = 0
        self.max_queue = 0  # 0: unlimited


class GearmanState:
    def __init__(self) -> None:
        self.next_handle = 1
        self.jobs: dict[str, GearmanJob] = {}
        self.functions: dict[str, GearmanFunction] = {}
        self.by_unique: dict[tuple[str, bytes], str] = {}
        self._scheduled: list[tuple[int, str]] = []  # (run_at, handle) of jobs not yet due
        # conn -> handles of the jobs it runs or waits for, so that a disconnect
        # costs what that connection held, not a walk over every job.
        self._held: dict[int, set[str]] = {}
        # Functions in which a job became grabbable during the entry being
        # applied: the leader wakes their sleeping workers (core/effects.py).
        self.woken: set[str] = set()

    def _function(self, name: str) -> GearmanFunction:
        function = self.functions.get(name)
        if function is None:
            function = self.functions[name] = GearmanFunction(name)
        return function

    # ------------------------------------------------------------------ apply
    def advance(self, now: int) -> None:
        """Jobs scheduled up to `now` join their queues."""
        scheduled = self._scheduled
        while scheduled and scheduled[0][0] <= now:
            run_at, handle = heapq.heappop(scheduled)
            job = self.jobs.get(handle)
            if job is not None and job.state == QUEUED and job.run_at == run_at:
                self._enqueue(job, at_head=False)

    def next_deadline(self) -> int | None:
        """When the next scheduled job comes due (ms), if one waits."""
        scheduled = self._scheduled
        while scheduled and self.jobs.get(scheduled[0][1]) is None:
            heapq.heappop(scheduled)  # ended before its time
        return scheduled[0][0] if scheduled else None

    def submit(self, function: str, unique: bytes, data: bytes, priority: int, background: bool,
               run_at: int, client: int, now: int, as_gearmand: bool = False) -> tuple:
        """(CREATED, handle) — the existing job's handle when the unique id matches — or QUEUE_FULL.

        as_gearmand (GM_SUBMIT_KEEP; GM_SUBMIT, logged before it, keeps its old meaning):
        a background submission that coalesces with a foreground job makes that job
        background, so that the acknowledged background submission is kept when the
        foreground clients leave; and maxqueue bounds the function's jobs queued or
        running, as gearmand 1.1.20 counts them (else queued ones only)."""
        self.advance(now)
        if unique:
            handle = self.by_unique.get((function, _key(unique, data)))
            if handle is not None:
                job = self.jobs[handle]
                if background and as_gearmand:
                    job.background = True
                if not background:
                    # Once per submission, as gearmand counts them: a connection that
                    # submitted twice is told twice (GET_STATUS_UNIQUE counts both).
                    job.clients.append(client)
                    self._hold(client, handle)
                return (Tag.CREATED, handle)
        fn = self._function(function)
        if fn.max_queue and fn.queued + (fn.running if as_gearmand else 0) >= fn.max_queue:
            return QUEUE_FULL
        handle = f"{HANDLE_PREFIX}{self.next_handle}"
        self.next_handle += 1
        job = GearmanJob(handle, function, unique, data, priority, background, run_at)
        if not background:
            job.clients.append(client)
            self._hold(client, handle)
        self.jobs[handle] = job
        if unique:
            self.by_unique[(function, _key(unique, data))] = handle
        if run_at > now:
            heapq.heappush(self._scheduled, (run_at, handle))
            fn.queued += 1  # counted as queued (status shows it), not grabbable yet
        else:
            fn.queued += 1
            fn.queues[priority].append(handle)
            self.woken.add(function)
        return (Tag.CREATED, handle)

    def _hold(self, conn: int, handle: str) -> None:
        held = self._held.get(conn)
        if held is None:
            held = self._held[conn] = set()
        held.add(handle)

    def _let_go(self, conn: int, handle: str) -> None:
        held = self._held.get(conn)
        if held is not None:
            held.discard(handle)
            if not held:
                del self._held[conn]

    def _enqueue(self, job: GearmanJob, at_head: bool) -> None:
        queue = self.functions[job.function].queues[job.priority]
        if at_head:
            queue.appendleft(job.handle)
        else:
            queue.append(job.handle)
        self.woken.add(job.function)

    def grab(self, worker: int, functions: tuple[str, ...], now: int) -> tuple:
        """A job for this worker: (ASSIGN, handle, function, unique, data), or NO_JOB.
        As gearmand: the first of the worker's functions (in the order given: the
        front end passes its newest ability first, as gearmand keeps them) that has a
        queued job, and in it the most urgent, oldest first."""
        self.advance(now)
        for name in functions:
            fn = self.functions.get(name)
            if fn is None or not fn.queued:
                continue
            for queue in fn.queues:
                while queue:
                    handle = queue.popleft()
                    job = self.jobs.get(handle)
                    if job is None or job.state != QUEUED:
                        continue  # ended while queued (its clients left)
                    job.state, job.worker = RUNNING, worker
                    self._hold(worker, handle)
                    fn.queued -= 1
                    fn.running += 1
                    return (Tag.ASSIGN, handle, job.function, job.unique, job.data)
        return NO_JOB

    def work_status(self, worker: int, handle: str, numerator: int, denominator: int) -> tuple:
        job = self._running_for(worker, handle)
        if job is None:
            return NOT_FOUND
        job.numerator, job.denominator = numerator, denominator
        return (Tag.STATUS, tuple(job.clients))

    def finish(self, worker: int, handle: str) -> tuple:
        """WORK_COMPLETE, WORK_FAIL, WORK_EXCEPTION: the job ends; (ENDED, clients to tell)."""
        job = self._running_for(worker, handle)
        if job is None:
            return NOT_FOUND
        self._remove(job)
        return (Tag.ENDED, tuple(job.clients))

    def requeue(self, worker: int, handle: str) -> tuple:
        """The worker ran out of its CAN_DO_TIMEOUT: its job goes back to the end of its
        queue, as when the worker goes away (gearmand 1.1.20 does the same); the worker's
        late result then finds no job. REQUEUED or NOT_FOUND."""
        job = self._running_for(worker, handle)
        if job is None:
            return NOT_FOUND
        fn = self.functions[job.function]
        self._let_go(worker, handle)
        fn.running -= 1
        fn.queued += 1
        job.state, job.worker = QUEUED, None
        job.numerator = job.denominator = 0
        self._enqueue(job, at_head=False)
        return REQUEUED

    def _running_for(self, worker: int, handle: str) -> GearmanJob | None:
        job = self.jobs.get(handle)
        if job is None or job.state != RUNNING or job.worker != worker:
            return None
        return job

    def _remove(self, job: GearmanJob) -> None:
        del self.jobs[job.handle]
        fn = self.functions[job.function]
        if job.state == RUNNING:
            fn.running -= 1
            self._let_go(job.worker, job.handle)
        else:
            fn.queued -= 1  # its handle stays in the queue and is skipped when reached
        for client in job.clients:
            self._let_go(client, job.handle)
        key = (job.function, _key(job.unique, job.data))
        if job.unique and self.by_unique.get(key) == job.handle:
            del self.by_unique[key]
        self._maybe_forget(fn)

    def _maybe_forget(self, fn: GearmanFunction) -> None:
        """A function with no jobs and no maxqueue is not state: forget it, so that
        names submitted once do not pile up (the queues hold only stale handles)."""
        if not fn.queued and not fn.running and not fn.max_queue:
            del self.functions[fn.name]

    def drop_connection(self, conn: int) -> tuple:
        """A client or worker connection went away: its running jobs go back to the
        end of their queue, oldest first; foreground jobs it alone waited for end."""
        self._drop(sorted(self._held.pop(conn, ()), key=_handle_number), {conn})
        return DONE

    def drop_all_but(self, keep) -> tuple:
        """A new leader: every connection not in `keep` is gone (all of them, as the
        leader keeps none across a change), handled as drop_connection handles one."""
        gone = {conn for conn in self._held if conn not in keep}
        handles = set()
        for conn in gone:
            handles.update(self._held.pop(conn))
        self._drop(sorted(handles, key=_handle_number), gone)
        return DONE

    def _drop(self, handles: list[str], gone: set[int]) -> None:
        requeued = []
        for handle in handles:  # oldest first, whatever order the connections held them in
            job = self.jobs.get(handle)
            if job is None:
                continue
            if any(c in gone for c in job.clients):
                job.clients = [c for c in job.clients if c not in gone]
                if not job.background and not job.clients and job.state == QUEUED:
                    self._remove(job)
                    continue
            if job.state == RUNNING and job.worker in gone:
                if not job.background and not job.clients:
                    self._remove(job)  # nobody waits for its result
                    continue
                fn = self.functions[job.function]
                fn.running -= 1
                job.state, job.worker = QUEUED, None
                job.numerator = job.denominator = 0
                fn.queued += 1
                requeued.append(job)
        for job in requeued:
            self._enqueue(job, at_head=False)

    def set_max_queue(self, function: str, size: int) -> tuple:
        fn = self._function(function)
        fn.max_queue = max(0, size)
        self._maybe_forget(fn)
        return DONE

    # ------------------------------------------------------------------ reads
    def status(self, handle: str) -> tuple[bool, bool, int, int]:
        """GET_STATUS: (known, running, numerator, denominator)."""
        job = self.jobs.get(handle)
        if job is None:
            return (False, False, 0, 0)
        return (True, job.state == RUNNING, job.numerator, job.denominator)

    def status_by_unique(self, unique: bytes) -> tuple[bool, bool, int, int, int]:
        """GET_STATUS_UNIQUE: (known, running, numerator, denominator, clients waiting), the
        unique id looked up in every function (the packet names none), by function name."""
        for name in sorted(self.functions):
            handle = self.by_unique.get((name, unique))
            if handle is not None:
                job = self.jobs[handle]
                return (True, job.state == RUNNING, job.numerator, job.denominator, len(job.clients))
        return (False, False, 0, 0, 0)

    def grabbable(self, functions) -> bool:
        """Whether a grab by a worker of these functions would find a job (read-only)."""
        jobs = self.jobs
        for name in functions:
            fn = self.functions.get(name)
            if fn is None or not fn.queued:
                continue
            for queue in fn.queues:
                for handle in queue:  # ended jobs leave stale handles; the first live one decides
                    job = jobs.get(handle)
                    if job is not None and job.state == QUEUED:
                        return True
        return False

    def holds(self, conn: int) -> bool:
        """Whether a connection runs or waits for a job (its going away changes something)."""
        return conn in self._held

    def function_counts(self) -> list[tuple[str, int, int]]:
        """The admin `status` lines' first columns: (function, total, running), by name."""
        return [(fn.name, fn.queued + fn.running, fn.running) for fn in sorted(self.functions.values(),
                                                                                 key=lambda f: f.name)]


    def priority_counts(self) -> dict[str, tuple[int, int, int]]:
        """The admin `prioritystatus` columns: function -> its queued (not running) jobs
        by priority, (high, normal, low); every function with a job or a bound."""
        counts = {name: [0, 0, 0] for name in self.functions}
        for job in self.jobs.values():
            if job.state == QUEUED:
                counts[job.function][job.priority] += 1
        return {name: tuple(c) for name, c in counts.items()}


def _key(unique: bytes, data: bytes) -> bytes:
    """What coalesces: the unique id, or, for the unique id "-", the data itself (as
    gearmand does: a client asks for "the same work" without naming it)."""
    return data if unique == b"-" else unique


def _handle_number(handle: str) -> int:
    return int(handle[len(HANDLE_PREFIX):])


GEARMAN_FORMAT_VERSION = 1


def to_records(state: GearmanState) -> tuple:
    """Everything replicated, as plain data in a canonical order (the snapshot's
    Gearman section, and part of the digest). The queues are listed as they
    stand, live handles only: a requeued job's place is not its handle order."""
    jobs = tuple(
        (j.handle, j.function, j.unique, j.data, j.priority, j.background, j.state == RUNNING,
         j.worker or 0, tuple(j.clients), j.numerator, j.denominator, j.run_at)
        for j in sorted(state.jobs.values(), key=lambda j: _handle_number(j.handle)))
    functions = []
    for fn in sorted(state.functions.values(), key=lambda f: f.name):
        queues = tuple(tuple(h for h in queue if h in state.jobs and state.jobs[h].state == QUEUED)
                       for queue in fn.queues)
        functions.append((fn.name, fn.max_queue, queues))
    return (GEARMAN_FORMAT_VERSION, state.next_handle, jobs, tuple(functions))


def from_records(records: tuple) -> GearmanState:
    version, next_handle, jobs, functions = records
    if version != GEARMAN_FORMAT_VERSION:
        raise ValueError(f"gearman state format {version}: this node reads {GEARMAN_FORMAT_VERSION}")
    state = GearmanState()
    state.next_handle = next_handle
    for (handle, function, unique, data, priority, background, running, worker, clients, numerator,
         denominator, run_at) in jobs:
        job = GearmanJob(handle, function, unique, data, priority, background, run_at)
        job.clients = list(clients)
        job.numerator, job.denominator = numerator, denominator
        fn = state._function(function)
        state.jobs[handle] = job
        if unique:
            state.by_unique[(function, _key(unique, data))] = handle
        for client in clients:
            state._hold(client, handle)
        if running:
            job.state, job.worker = RUNNING, worker
            state._hold(worker, handle)
            fn.running += 1
        else:
            fn.queued += 1
    for name, max_queue, queues in functions:
        fn = state._function(name)
        fn.max_queue = max_queue
        for priority, handles in enumerate(queues):
            fn.queues[priority].extend(handles)
    queued = {h for _, _, queues in functions for q in queues for h in q}
    for job in state.jobs.values():
        if job.state == QUEUED and job.handle not in queued:
            state._scheduled.append((job.run_at, job.handle))  # not due yet when the snapshot was taken
    heapq.heapify(state._scheduled)
    return state
