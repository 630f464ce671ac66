"""Gearman's text admin protocol: each line's answer, as gearmand words it.

On the Gearman port, a line that does not start with NUL is an admin command
(protocol/gearman.py tells them apart). The answers here are gearmand
1.1.20's, byte for byte where both servers do the same thing
(tests/differential/test_gearman_differential.py):

    status               FUNCTION\\tTOTAL\\tRUNNING\\tAVAILABLE_WORKERS lines, then "."
    prioritystatus       FUNCTION\\tHIGH\\tNORMAL\\tLOW\\tAVAILABLE_WORKERS lines (queued
                         jobs by priority; running ones are in none), then "."
    workers              FD IP-ADDRESS CLIENT-ID : FUNCTION ... lines, newest first, then "."
    maxqueue F [N]       OK (N: the function's bound on queued jobs; none or 0: no bound)
    version              OK <version>
    getpid               OK <pid>
    shutdown [graceful]  OK, then the node stops (graceful: once every Gearman
                         connection has closed, new ones refused meanwhile)

Both list every function with jobs, a bound or a connected worker, and every
function named on this leader (by CAN_DO or a submission) with zeros, as
gearmand lists every function it was ever told of (up to MAX_NAMED_FUNCTIONS
of them here, and until the leader changes: see docs/gearman.md).

Deliberate differences: `maxqueue` of a function nobody named yet sets its
bound (gearmand 1.1.20 ignores it), replicated; one bound per function, the
largest of the per-priority numbers; `shutdown` is implemented (gearmand
1.1.20 answers UNKNOWN_COMMAND); `version` names haqueue's version; the FD
column is the connection's number on this leader, not a file descriptor;
lines are ordered by function name.
"""

from __future__ import annotations

import re
from urllib.parse import quote_plus

# Functions named on one leader that `status` remembers without jobs or workers: a client
# naming random functions costs at most this many names.
MAX_NAMED_FUNCTIONS = 65536

UNKNOWN = b"ERR UNKNOWN_COMMAND Unknown+server+command"
INCOMPLETE = b"ERR INVALID_ARGUMENTS An+incomplete+set+of+arguments+was+sent+to+this+command+"


def unknown_command(word: bytes) -> bytes:
    return UNKNOWN + quote_plus(word.decode("latin-1")).encode() + b"\r\n"


def status_lines(counts: list[tuple[str, int, int]], workers: dict[str, int], named=()) -> bytes:
    """counts: (function, total, running) of the replicated state; workers: connected
    workers per function on this leader; named: functions named on this leader."""
    rows = {name: (total, running) for name, total, running in counts}
    return _table(rows, (0, 0), workers, named)


def priority_status_lines(counts: dict[str, tuple[int, int, int]], workers: dict[str, int],
                          named=()) -> bytes:
    """counts: function -> queued jobs (high, normal, low) of the replicated state."""
    return _table(counts, (0, 0, 0), workers, named)


def _table(rows: dict, zeros: tuple, workers: dict[str, int], named) -> bytes:
    rows = dict(rows)
    for name in (*workers, *named):
        rows.setdefault(name, zeros)
    out = [b"\t".join((name.encode("latin-1"), *(b"%d" % n for n in (*numbers, workers.get(name, 0))))) + b"\n"
           for name, numbers in sorted(rows.items())]
    return b"".join(out) + b".\n"


def workers_lines(sessions) -> bytes:
    """One line per connection, newest first (as gearmand lists them)."""
    out = []
    for session in sorted(sessions, key=lambda s: s.conn_id, reverse=True):
        # Newest ability first, as gearmand lists them.
        functions = b"".join(b" " + name.encode("latin-1") for name in reversed(list(session.abilities)))
        out.append(b"%d %s %s :%s\n" % (session.conn_id & 0xFFFFFFFF, session.peer.encode(),
                                        session.client_id, functions))
    return b"".join(out) + b".\n"


def parse_maxqueue(words: list[bytes]) -> tuple[str, int] | None:
    """`maxqueue F`, `maxqueue F N` or gearmand's per-priority `maxqueue F HIGH NORMAL LOW`
    (one bound here, the largest) -> (function, bound); None without a function. Numbers
    are read as gearmand reads them (atoi: leading digits, else 0)."""
    if len(words) < 2:
        return None
    return words[1].decode("latin-1"), max((atoi(w) for w in words[2:5]), default=0)


def atoi(word: bytes, limit: int = 2**31 - 1) -> int:
    """A number as gearmand reads one (C's atoi): its leading digits, else 0; here never
    below 0 nor above `limit`. Admin bounds and WORK_STATUS figures are read this way."""
    match = re.match(rb"\s*([+-]?\d+)", word)
    return max(0, min(int(match[1]), limit)) if match else 0
