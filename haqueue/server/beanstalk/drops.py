"""A closed connection's reservations on their way back, and the reads that wait for them.

beanstalkd puts a closed connection's reservations back before it reads anything
else. haqueue logs DROP_CONN for a closed connection that holds jobs (or has
work in flight, which the drop lands after: log order follows submit order), so
for a moment its jobs are still reserved; a read of another connection that
comes meanwhile (a peek, a stats, a reserve that would answer at once) waits
until every pending drop is applied (`defer`), then goes on (`_applied`: the
session's resume_read, and the server flushes it). Tested by
tests/server/test_drop_ordering.py.

A connection holding more reservations than one entry should put back
(core/state.py REQUEUES_PER_ENTRY) is dropped with DROP_CONN_SOME, one entry of
that many after another until it holds none: a worker that reserved a million
jobs and left would otherwise make one entry whose apply outlasts an election
timeout on every node. The reads wait for the last of them.
"""

from __future__ import annotations

from functools import partial
from typing import Callable

from haqueue.core import commands as C
from haqueue.core.state import REQUEUES_PER_ENTRY
from haqueue.server.host import HostedSession, Submits


class Drops:
    def __init__(self, resumed: Callable[[HostedSession], None]) -> None:
        self.resumed = resumed  # a read that waited went on: the server flushes its session
        self.pending: set[int] = set()  # connection ids whose DROP_CONN is in flight
        self.readers: set[HostedSession] = set()  # sessions whose read waits for them

    def __bool__(self) -> bool:
        return bool(self.pending)

    def drop(self, batcher: Submits, conn_id: int, held: int = 0) -> None:
        """Log DROP_CONN for a closed connection that holds `held` reservations (and
        perhaps work in flight); DROP_CONN_SOME entries if that is more than one entry's."""
        self.pending.add(conn_id)
        if held <= REQUEUES_PER_ENTRY:
            # The usual case, and an opcode every version knows (a cluster being upgraded).
            batcher.submit((C.DROP_CONN, conn_id), partial(self._applied, conn_id))
        else:
            self._drop_some(batcher, conn_id)

    def _drop_some(self, batcher: Submits, conn_id: int) -> None:
        batcher.submit((C.DROP_CONN_SOME, conn_id, REQUEUES_PER_ENTRY),
                       partial(self._applied_some, batcher, conn_id))

    def _applied_some(self, batcher: Submits, conn_id: int, result) -> None:
        if result is not None and result[1] and conn_id in self.pending:
            self._drop_some(batcher, conn_id)  # more left: the next entry's worth
        else:
            self._applied(conn_id, result)

    def defer(self, session: HostedSession) -> bool:
        """True if drops are pending: the session's read waits for them."""
        if not self.pending:
            return False
        self.readers.add(session)
        return True

    def forget(self, session: HostedSession) -> None:
        self.readers.discard(session)  # closed itself

    def new_term(self) -> None:
        self.pending.clear()

    def end_term(self) -> None:
        self.readers.clear()

    def _applied(self, conn_id: int, result) -> None:
        self.pending.discard(conn_id)
        if self.pending or not self.readers:
            return
        readers, self.readers = self.readers, set()
        for session in readers:
            session.resume_read()
            self.resumed(session)
