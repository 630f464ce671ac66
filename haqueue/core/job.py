"""A job: the unit of work, and its lifecycle states.

A job moves between READY, DELAYED, RESERVED and BURIED (protocol.txt, "Job
Lifecycle"); DELETED is terminal and only ever seen on a job object that some
lazily-cleaned heap still points at. All times are integer milliseconds taken
from the log entry's stamp, never from a clock.
"""

from __future__ import annotations

READY = 0
DELAYED = 1
RESERVED = 2
BURIED = 3
DELETED = 4

STATE_NAMES = ("ready", "delayed", "reserved", "buried", "deleted")

# beanstalkd: a job whose priority is below this counts as "urgent" in stats.
URGENT_THRESHOLD = 1024
# beanstalkd: "If the client sends 0, the server will silently increase the ttr to 1."
MIN_TTR_MS = 1000

# Distinct values SharedInts keeps; past this, further values are stored unshared.
SHARED_INTS_LIMIT = 4096


class SharedInts(dict):
    """One int object per value for the job fields clients repeat (priority, delay,
    time-to-run): `shared[value]` is the first object seen with that value.

    Every put decodes its arguments from a log entry into fresh ints, and an int past
    256 is a 32-byte object: two per queued job (priority 1024, ttr 60000 ms) were a
    tenth of its memory. Clients use few distinct values, so after a while every
    lookup hits. Bounded, so a client inventing values costs at most the limit; the
    values, not their identity, are what the state means.
    """

    __slots__ = ()

    def __missing__(self, value: int) -> int:
        if len(self) < SHARED_INTS_LIMIT:
            self[value] = value
        return value


class Job:
    """One job. Plain slots: it is created a million times and must stay small."""

    __slots__ = (
        "id",
        "tube",
        "pri",
        "delay",
        "ttr",
        "body",
        "state",
        "deadline",
        "created",
        "reserver",
        "reserves",
        "timeouts",
        "releases",
        "buries",
        "kicks",
        "entry",
    )

    def __init__(self, id: int, tube, pri: int, delay: int, ttr: int, body: bytes, created: int) -> None:
        self.id = id
        self.tube = tube
        self.pri = pri
        self.delay = delay
        self.ttr = ttr
        self.body = body
        self.state = READY
        self.deadline = 0  # when DELAYED: ready at; when RESERVED: times out at
        self.created = created
        self.reserver = None  # connection id holding the reservation
        self.reserves = 0
        self.timeouts = 0
        self.releases = 0
        self.buries = 0
        self.kicks = 0
        # The one heap entry that speaks for this job now (its ready entry,
        # its delayed entry, or its time-to-run entry), or None. Any other
        # entry naming the job is stale, even one with the same key: a job
        # released at the priority it was reserved at must not be found
        # twice (see tube.py).
        self.entry = None

    def to_record(self) -> tuple:
        """Plain data for snapshots and digests (the tube by name)."""
        return (
            self.id,
            self.tube.name,
            self.pri,
            self.delay,
            self.ttr,
            self.body,
            self.state,
            # Only meaningful while timed; a stale value must not make two
            # equal states digest differently.
            self.deadline if self.state in (DELAYED, RESERVED) else 0,
            self.created,
            self.reserver,
            self.reserves,
            self.timeouts,
            self.releases,
            self.buries,
            self.kicks,
        )
