"""A tube: its ready queue, delayed queue, buried list, pause state and counters.

Ready jobs are ordered by (priority, id), delayed jobs by (deadline, id) and
buried jobs first-in first-out, as in beanstalkd. The heaps are cleaned lazily:
an entry is only trusted if it is the very tuple the job names as its current
`entry` (a key match is not enough: a job reserved and released at the same
priority would be listed twice, and the copies would never be dropped). So
removing a job from the middle (delete, kick-job, reserve-job) is O(1) and the
stale entry is dropped when it reaches the top. A heap is filtered in place
when its stale entries outnumber its live ones, which bounds memory.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict

from haqueue.core.job import BURIED, DELAYED, READY, URGENT_THRESHOLD, Job


class Tube:
    __slots__ = (
        "name",
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

    def __init__(self, name: str) -> None:
        self.name = name
        self.ready: list[tuple[int, int, Job]] = []  # heap of (pri, id, job)
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
        job.entry = entry = (job.pri, job.id, job)
        heapq.heappush(self.ready, entry)
        self.ready_count += 1
        if job.pri < URGENT_THRESHOLD:
            self.urgent_count += 1
        if len(self.ready) > 2 * self.ready_count + 64:
            compact(self.ready)

    def peek_ready(self) -> Job | None:
        return _top_live(self.ready)

    def unlink_ready(self, job: Job) -> None:
        """Account for a ready job leaving the queue; its heap entry goes stale."""
        job.entry = None
        self.ready_count -= 1
        if job.pri < URGENT_THRESHOLD:
            self.urgent_count -= 1
        # Also here, not only on push: deleted jobs' entries (and bodies)
        # must not wait for the next put to be let go.
        if len(self.ready) > 2 * self.ready_count + 64:
            compact(self.ready)

    # delayed -----------------------------------------------------------
    def push_delayed(self, job: Job, deadline: int) -> tuple[int, int, Job]:
        """Delay a job; return its entry, which the global deadline heap shares."""
        job.state = DELAYED
        job.entry = entry = (deadline, job.id, job)
        heapq.heappush(self.delayed, entry)
        self.delayed_count += 1
        if len(self.delayed) > 2 * self.delayed_count + 64:
            compact(self.delayed)
        return entry

    def peek_delayed(self) -> Job | None:
        return _top_live(self.delayed)

    def unlink_delayed(self, job: Job) -> None:
        """Account for a delayed job leaving the queue; its heap entry goes stale."""
        job.entry = None
        self.delayed_count -= 1
        if len(self.delayed) > 2 * self.delayed_count + 64:
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
