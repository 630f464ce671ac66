"""A tube: its ready queue, delayed queue, buried list, pause state and counters.

Ready jobs are ordered by (priority, id), delayed jobs by (deadline, id) and
buried jobs first-in first-out, as in beanstalkd. The heaps are cleaned lazily:
an entry is only trusted if it is the very object the job names as its current
`entry` (a key match is not enough: a job reserved and released at the same
priority would be listed twice, and the copies would never be dropped). So
removing a job from the middle (delete, kick-job, reserve-job) is O(1) and the
stale entry is dropped when it reaches the top. A heap is filtered in place
when its stale entries outnumber its live ones, which bounds memory.

A ready entry is one int, READY_KEY | priority << 64 | id, whose order is that of
(priority, id); the job is found by id in the state's `jobs`. Most queued jobs are
ready, and such an int is 48 bytes where a (priority, id, job) tuple is 64. Each
push makes a new int object, so identity still tells the live entry from stale
copies. Delayed entries are (deadline, id, job) tuples: the global deadline heap
shares them.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict

from haqueue.core.job import BURIED, DELAYED, READY, URGENT_THRESHOLD, Job

# Above any priority << 64 | id (priorities are below 2**32, ids below 2**64), so
# every ready key has the same size and is always a new object.
READY_KEY = 1 << 96
ID_MASK = (1 << 64) - 1


class Tube:
    __slots__ = (
        "name",
        "jobs",
        "ready",
        "ready_count",
        "urgent_count",
        "delayed",
        "delayed_count",
        "buried",
        "reserved_count",
        "total_jobs",
        "cmd_delete",
        "cmd_pause",
        "pause",
        "unpause_at",
    )

    def __init__(self, name: str, jobs: dict[int, Job] | None = None) -> None:
        self.name = name
        self.jobs = {} if jobs is None else jobs  # the state's jobs by id: ready keys name them
        self.ready: list[int] = []  # heap of READY_KEY | pri << 64 | id
        self.ready_count = 0
        self.urgent_count = 0
        self.delayed: list[tuple[int, int, Job]] = []  # heap of (deadline, id, job)
        self.delayed_count = 0
        # OrderedDict, not dict: kicking from the front of a dict whose head was
        # deleted rescans the holes each time (quadratic for big kicks).
        self.buried: OrderedDict[int, Job] = OrderedDict()  # FIFO
        self.reserved_count = 0
        self.total_jobs = 0
        self.cmd_delete = 0
        self.cmd_pause = 0
        self.pause = 0  # ms the tube was paused for; 0 when not paused
        self.unpause_at = 0

    @property
    def job_count(self) -> int:
        return self.ready_count + self.delayed_count + len(self.buried) + self.reserved_count

    # ready -------------------------------------------------------------
    def push_ready(self, job: Job) -> None:
        job.state = READY
        pri = job.pri
        job.entry = key = READY_KEY | pri << 64 | job.id
        heapq.heappush(self.ready, key)
        self.ready_count += 1
        if pri < URGENT_THRESHOLD:
            self.urgent_count += 1
        if overgrown(self.ready, self.ready_count):
            self._compact_ready()

    def peek_ready(self) -> Job | None:
        ready = self.ready
        jobs = self.jobs
        while ready:
            key = ready[0]
            job = jobs.get(key & ID_MASK)
            if job is not None and job.entry is key:
                return job
            heapq.heappop(ready)
        return None

    def _compact_ready(self) -> None:
        """Drop the stale ready keys, in place."""
        jobs = self.jobs
        ready = self.ready
        ready[:] = [key for key in ready if (job := jobs.get(key & ID_MASK)) is not None and job.entry is key]
        heapq.heapify(ready)

    def unlink_ready(self, job: Job) -> None:
        """Account for a ready job leaving the queue; its heap entry goes stale."""
        job.entry = None
        self.ready_count -= 1
        if job.pri < URGENT_THRESHOLD:
            self.urgent_count -= 1
        # Also here, not only on push: deleted jobs' entries must not wait for
        # the next put to be let go.
        if overgrown(self.ready, self.ready_count):
            self._compact_ready()

    # delayed -----------------------------------------------------------
    def push_delayed(self, job: Job, deadline: int) -> tuple[int, int, Job]:
        """Delay a job; return its entry, which the global deadline heap shares."""
        job.state = DELAYED
        job.entry = entry = (deadline, job.id, job)
        heapq.heappush(self.delayed, entry)
        self.delayed_count += 1
        if overgrown(self.delayed, self.delayed_count):
            compact(self.delayed)
        return entry

    def peek_delayed(self) -> Job | None:
        return _top_live(self.delayed)

    def unlink_delayed(self, job: Job) -> None:
        """Account for a delayed job leaving the queue; its heap entry goes stale."""
        job.entry = None
        self.delayed_count -= 1
        if overgrown(self.delayed, self.delayed_count):
            compact(self.delayed)

    # buried ------------------------------------------------------------
    def push_buried(self, job: Job) -> None:
        job.state = BURIED
        job.entry = None
        self.buried[job.id] = job

    def peek_buried(self) -> Job | None:
        for job in self.buried.values():
            return job
        return None

    def paused(self, now: int) -> bool:
        return self.pause > 0 and now < self.unpause_at


def overgrown(heap: list, live: int) -> bool:
    """The compaction rule for a lazily cleaned heap holding `live` live entries:
    filter it once its stale entries outnumber the live ones (the 64 spares small
    heaps the work). Memory stays within about twice the live entries, and each
    filtering is paid for by the stale entries that accumulated since the last."""
    return len(heap) > 2 * live + 64


def compact(heap: list[tuple[int, int, Job]]) -> None:
    """Drop the stale entries of a (key, id, job) heap, in place: callers may
    hold the list while they pop from it."""
    heap[:] = [entry for entry in heap if entry[2].entry is entry]
    heapq.heapify(heap)


def _top_live(heap: list) -> Job | None:
    """The job at the top of a lazily cleaned heap, dropping stale entries on the way."""
    while heap:
        entry = heap[0]
        if entry[2].entry is entry:
            return entry[2]
        heapq.heappop(heap)
    return None
