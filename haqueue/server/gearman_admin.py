"""Gearman's text admin protocol: each line's answer, as gearmand words it.

On the Gearman port, a line that does not start with NUL is an admin command
(protocol/gearman.py tells them apart). The answers here are gearmand
1.1.20's, byte for byte where both servers do the same thing
(tests/differential/test_gearman_differential.py):

    status               FUNCTION\\tTOTAL\\tRUNNING\\tAVAILABLE_WORKERS lines, then "."
    workers              FD IP-ADDRESS CLIENT-ID : FUNCTION ... lines, newest first, then "."
    maxqueue F [N]       OK (N: the function's bound on queued jobs; none or 0: no bound)
    version              OK <version>
    getpid               OK <pid>
    shutdown [graceful]  OK, then the node stops (graceful: once every Gearman
                         connection has closed, new ones refused meanwhile)

Deliberate differences: `maxqueue` is enforced (gearmand 1.1.20 accepts the
bound and ignores it) and replicated; `shutdown` is implemented (gearmand
1.1.20 answers UNKNOWN_COMMAND); `version` names haqueue's version; the FD
column is the connection's number on this leader, not a file descriptor;
`status` lists the functions that have jobs, a bound or a connected worker
(gearmand never forgets a function once named).
"""

from __future__ import annotations

import re
from urllib.parse import quote_plus

UNKNOWN = b"ERR UNKNOWN_COMMAND Unknown+server+command"
INCOMPLETE = b"ERR INVALID_ARGUMENTS An+incomplete+set+of+arguments+was+sent+to+this+command+"


def unknown_command(word: bytes) -> bytes:
    return UNKNOWN + quote_plus(word.decode("latin-1")).encode() + b"\r\n"


def status_lines(counts: list[tuple[str, int, int]], workers: dict[str, int]) -> bytes:
    """counts: (function, total, running) of the replicated state; workers: connected
    workers per function on this leader."""
    rows = {name: (total, running) for name, total, running in counts}
    for name in workers:
        rows.setdefault(name, (0, 0))
    out = [b"%s\t%d\t%d\t%d\n" % (name.encode("latin-1"), total, running, workers.get(name, 0))
           for name, (total, running) in sorted(rows.items())]
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
