"""What one node lets its clients hold: connections, tubes, buffers, memory.

A careless or hostile client must not exhaust a node's memory or starve the
others (docs/design.md I8). The limits an operator sets are
haqueue/config/limits.py's `ClientLimits`; this module owns the fixed buffer
bounds and the few pieces of plumbing that enforce the limits outside a
connection: the file-descriptor limit that makes `max_connections` possible,
and the resident-memory gauge behind `max_memory`. The per-connection flow control that uses the buffer bounds
lives in session.py.

Per connection (docs/reliability.md, "Hostile clients", derives the total):
- input: the parser holds at most INPUT_HIGH unconsumed bytes once the
  pipeline is blocked (reading stops), plus one socket read, plus the one job
  body being received (at most max_job_size);
- output: commands stop being processed while the transport's unsent bytes
  exceed OUTPUT_HIGH, and restart below OUTPUT_LOW, so at most OUTPUT_HIGH plus
  one reply plus the replies of commands in flight;
- in flight: at most MAX_IN_FLIGHT commands, MAX_IN_FLIGHT_BYTES of put bodies;
- a connection whose unsent output passes OUTPUT_HARD is closed at once, and
  one whose output stays above OUTPUT_HIGH for output_timeout seconds (it
  sends but never reads) is closed then: Redis's client-output-buffer-limit,
  hard and soft.
"""

from __future__ import annotations

import logging
import os
import resource
import time
from typing import Callable

from haqueue.config.limits import ClientLimits

log = logging.getLogger(__name__)

INPUT_HIGH = 64 * 1024
OUTPUT_HIGH = 64 * 1024
OUTPUT_LOW = 16 * 1024
OUTPUT_HARD = 8 * 1024 * 1024
MAX_IN_FLIGHT = 1024
MAX_IN_FLIGHT_BYTES = 4 * 1024 * 1024
# Commands one connection may run before the loop serves others (fairness):
# enough that a pipelined window of puts still rides in one Raft entry.
COMMANDS_PER_TURN = 128
# ...and at most this long: expensive commands (stats, ~0.1 ms each) get fewer.
# A long turn pays off only for writes, which ride in one Raft entry together
# (fewer, fuller entries: 0.3 ms turns cost windowed puts a quarter of their
# rate). Reads gain nothing from it, so a turn that has written nothing yet
# ends sooner: a connection flooding `stats` then delays another client's put
# by READ_TURN_SECONDS, not TURN_SECONDS (bench --flood, docs/reliability.md).
TURN_SECONDS = 0.0005
READ_TURN_SECONDS = 0.00025
# A connection that used up its turn while a write waits for Raft runs again
# once the write is applied, or after this long at most (turns.py says why).
TURN_DEFER_SECONDS = 0.001
# ...and so does one that used up its turn when Raft has not ticked for this
# long (its timer sleeps until the next heartbeat, election deadline or
# keepalive, so an idle node can go a heartbeat without one: on_loop.py).
TICK_OVERDUE_SECONDS = 0.03
# Descriptors the node needs besides client connections: the listeners, the
# journal, Raft peers, the admin port, the loop's own.
RESERVED_FDS = 64
# How old a reading of the resident set may be when a put asks (/proc/self/statm: cheap).
MEMORY_POLL_S = 0.1


def raise_fd_limit(limits: ClientLimits) -> None:
    """Make room for max_connections descriptors, or lower max_connections to what fits.

    As Redis does for maxclients: raise the soft RLIMIT_NOFILE toward the hard
    one; if even that is too small, serve fewer connections and say so.
    """
    wanted = limits.max_connections + RESERVED_FDS
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    if soft != resource.RLIM_INFINITY and soft < wanted:
        fitting = max(1, soft - RESERVED_FDS)
        log.warning("open-files limit is %d: serving at most %d connections, not %d",
                    soft, fitting, limits.max_connections)
        limits.max_connections = fitting


_PAGE = os.sysconf("SC_PAGE_SIZE")


def resident_bytes() -> int:
    """This process's resident set, from /proc/self/statm (one read, no psutil import)."""
    with open("/proc/self/statm", "rb") as f:
        return int(f.read().split()[1]) * _PAGE


class MemoryGauge:
    """Whether a put still fits under the resident-memory limit (0: no limit).

    The resident set is read when a put asks and the last reading is older
    than MEMORY_POLL_S; in between, each admitted put counts an estimate of
    what it will hold (its body twice, in the log entry and in the job, plus
    PUT_OVERHEAD for the records), so a burst of big puts cannot run far past
    the limit before the next reading. Only puts are refused, so a reading
    taken when a put asks is as fresh as a timer's would be where it matters;
    and an idle node is not woken ten times a second to read it (it used to
    be: a fifth of an idle follower's wake-ups, docs/benchmarks.md).
    """

    PUT_OVERHEAD = 1024

    def __init__(self, limit: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.limit = limit
        self.clock = clock
        self.rss = resident_bytes()
        self.read_at = clock()
        self.pending = 0  # estimated bytes admitted since the last reading
        self.over = False

    def admits(self, body_size: int) -> bool:
        if not self.limit:
            return True
        self.resident()
        cost = 2 * body_size + self.PUT_OVERHEAD
        if self.rss + self.pending + cost > self.limit:
            self._note(True)
            return False
        self.pending += cost
        return True

    def resident(self) -> int:
        """The resident set, read again if the last reading is older than MEMORY_POLL_S."""
        if self.clock() - self.read_at >= MEMORY_POLL_S:
            self.read()
        return self.rss

    def read(self) -> int:
        """A fresh reading of the resident set (and, with a limit, whether it is over)."""
        self.rss = resident_bytes()
        self.read_at = self.clock()
        self.pending = 0
        if self.limit:
            self._note(self.rss > self.limit)
        return self.rss

    def _note(self, over: bool) -> None:
        if over != self.over:
            log.warning("resident memory %d MiB is %s the limit %d MiB: puts %s",
                        self.rss >> 20, "at" if over else "back under", self.limit >> 20,
                        "answer OUT_OF_MEMORY" if over else "are accepted again")
            self.over = over
