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

# protocol.txt: "<pri> is an integer < 2**32"; the codec refuses more, the core too
# (a ready entry's key depends on it, tube.py).
MAX_PRI = 2**32 - 1
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


# A job's five counters share one int, TALLY_BITS each (far more than a counter
# can reach): with reserves alone below 257 it is one of Python's cached small ints.
TALLY_BITS = 64
RESERVE = 1
RELEASE = 1 << TALLY_BITS
TIMEOUT = 1 << 2 * TALLY_BITS
BURY = 1 << 3 * TALLY_BITS
KICK = 1 << 4 * TALLY_BITS
_TALLY_MASK = (1 << TALLY_BITS) - 1


def tallies(reserves: int, timeouts: int, releases: int, buries: int, kicks: int) -> int:
    """The packed counters, as Job.tallies holds them."""
    return reserves * RESERVE + releases * RELEASE + timeouts * TIMEOUT + buries * BURY + kicks * KICK


class Job:
    """One job. Plain slots: it is created a million times and must stay small.

    Ten slots (112 bytes with the object's and the collector's headers) instead of
    one per field: what can be derived is derived. Its deadline and, while reserved,
    the connection holding it are read from its current heap entry; the five
    counters are packed into `tallies` (add RESERVE, RELEASE, TIMEOUT, BURY or KICK
    to count one). The fields read as before: job.deadline, job.reserver,
    job.reserves, job.timeouts, job.releases, job.buries, job.kicks.
    """

    __slots__ = (
        "id",
        "tube",
        "pri",
        "delay",
        "ttr",
        "body",
        "state",
        "created",
        "tallies",
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
        self.created = created
        self.tallies = 0
        # The one heap entry that speaks for this job now, or None: its ready
        # key (an int, see tube.py), its delayed entry (deadline, id, job) or
        # its time-to-run entry (deadline, id, job, connection). Any other
        # entry naming the job is stale, even one with the same key: a job
        # released at the priority it was reserved at must not be found twice.
        self.entry = None

    @property
    def deadline(self) -> int:
        """When DELAYED: ready at; when RESERVED: times out at; else 0."""
        entry = self.entry
        return entry[0] if entry is not None and self.state in (DELAYED, RESERVED) else 0

    @property
    def reserver(self) -> int | None:
        """The connection id holding the reservation, when RESERVED."""
        entry = self.entry
        return entry[3] if entry is not None and self.state == RESERVED else None

    @property
    def reserves(self) -> int:
        return self.tallies & _TALLY_MASK

    @property
    def releases(self) -> int:
        return self.tallies >> TALLY_BITS & _TALLY_MASK

    @property
    def timeouts(self) -> int:
        return self.tallies >> 2 * TALLY_BITS & _TALLY_MASK

    @property
    def buries(self) -> int:
        return self.tallies >> 3 * TALLY_BITS & _TALLY_MASK

    @property
    def kicks(self) -> int:
        return self.tallies >> 4 * TALLY_BITS

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
            self.deadline,  # 0 unless timed: stale values must not tell equal states apart
            self.created,
            self.reserver,
            self.reserves,
            self.timeouts,
            self.releases,
            self.buries,
            self.kicks,
        )
