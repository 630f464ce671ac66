"""A closed connection's reservations on their way back, and the reads that wait for them.

beanstalkd puts a closed connection's reservations back before it reads anything
else. haqueue logs DROP_CONN for a closed connection that holds jobs (or has
work in flight, which the drop lands after: log order follows submit order), so
for a moment its jobs are still reserved; a read of another connection that
comes meanwhile (a peek, a stats, a reserve that would answer at once) waits
until every pending drop is applied (`defer`), then goes on (`_applied`: the
session's resume_read, and the server flushes it). Tested by
tests/server/test_drop_ordering.py.
"""

from __future__ import annotations

from functools import partial
from typing import Callable

from haqueue.core import commands as C
from haqueue.server.host import HostedSession, Submits


class Drops:
    def __init__(self, resumed: Callable[[HostedSession], None]) -> None:
        self.resumed = resumed  # a read that waited went on: the server flushes its session
        self.pending: set[int] = set()  # connection ids whose DROP_CONN is in flight
        self.readers: set[HostedSession] = set()  # sessions whose read waits for them

    def __bool__(self) -> bool:
        return bool(self.pending)

    def drop(self, batcher: Submits, conn_id: int) -> None:
        """Log DROP_CONN for a closed connection."""
        self.pending.add(conn_id)
        batcher.submit((C.DROP_CONN, conn_id), partial(self._applied, conn_id))

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
