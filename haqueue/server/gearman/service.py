"""GearmanService: the Gearman front end of a leader — its listener, its connections, its wake-ups.

A second front end on the same log, as the id service is (server/ids/udp.py): the
queue itself is GearmanState inside QueueState (core/gearman.py), changed
only by log entries; this object owns what belongs to the leader's process
and dies with its leadership:
- the listener on the Gearman port (and the VIP), open only while this node
  serves as leader, like the beanstalkd port (app.py opens and closes both);
- the connections (server/gearman/session.py) by connection id, so that a worker's
  WORK_* reach the clients a job names;
- which connection can do which function, and which workers sleep
  (PRE_SLEEP) waiting for a NOOP: after each applied entry, the functions in
  which a job became grabbable (Effects.gearman_woken) wake theirs;
- the admin protocol's answers (server/gearman/admin.py words them);
- `shutdown graceful`: no new connections, the node stops when the last closes.

A connection's id comes from the leader's connection counter, shared with
beanstalkd connections (epoch << 32 | serial), so a new leader's
RELEASE_ORPHANS drops every Gearman connection of the old one: its workers'
jobs go back to their queues, foreground jobs whose clients are gone end.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from typing import Protocol

from haqueue import __version__
from haqueue.core import commands as C
from haqueue.protocol import gearman as P
from haqueue.server.gearman import admin as A
from haqueue.server.gearman.session import GearmanSession
from haqueue.server.host import ConnectionHost
from haqueue.server.listeners import VipBinder, bound_socket

log = logging.getLogger(__name__)


class RefusedGearmanConnection(asyncio.Protocol):
    def connection_made(self, transport) -> None:
        transport.close()


class GearmanHost(ConnectionHost, Protocol):
    """What the service uses of the server that runs it (QueueServer): what every
    connection-serving front end uses (host.ConnectionHost), the beanstalkd connections
    (both count toward max_connections), connection ids, and a way to stop the node
    (`shutdown`). Typed here so that the dependency is one way: app.py imports this
    module, and this module knows the server only as this interface
    (tests/server/test_session_host.py)."""

    sessions: set

    def next_conn_id(self) -> int: ...

    def request_stop(self) -> None: ...


class GearmanService:
    def __init__(self, server: GearmanHost, host: str, port: int, vip: str | None = None) -> None:
        self.server = server
        self.host = host
        self.port = port
        self.vip = vip if vip != host else None
        self.sessions: dict[int, GearmanSession] = {}
        self.workers: dict[str, set[GearmanSession]] = {}  # function -> connections that can do it
        self.sleepers: dict[str, set[GearmanSession]] = {}  # function -> those waiting for a NOOP
        # Functions named on this leader (CAN_DO, a submission): `status` lists them with
        # no job and no worker, as gearmand lists every function it was ever told of;
        # bounded (the oldest forgotten first), and gone with the leadership.
        self.named: dict[str, None] = {}
        self._listeners: list[asyncio.AbstractServer] = []
        self._vip = (VipBinder("serve Gearman", self.vip, port, self._bind_vip, lambda: self.open_)
                     if self.vip is not None else None)
        self.open_ = False
        self.stop_when_idle = False  # `shutdown graceful` was asked

    # -------------------------------------------------------------- listener
    async def open(self) -> None:
        """Listen on host:port (OSError, with the system's words, if it cannot), and on the
        VIP, retried until it binds."""
        self.open_ = True
        self.stop_when_idle = False
        await self._listen(bound_socket(self.host, self.port))
        if self._vip is not None:
            await self._vip.bind()

    async def _listen(self, sock: socket.socket) -> None:
        """Serve on a bound socket, unless closed meanwhile (leadership lost while awaiting:
        the socket must not stay bound, or the next term could not bind the port)."""
        try:
            listener = await self.server.loop.create_server(self._new_session, sock=sock)
        except BaseException:
            sock.close()
            raise
        if self.open_:
            self._listeners.append(listener)
        else:
            listener.close()

    async def _bind_vip(self) -> None:
        await self._listen(bound_socket(self.vip, self.port, freebind=True))

    def addresses(self) -> list[tuple]:
        return [s.getsockname() for listener in self._listeners for s in listener.sockets]

    def close(self, graceful: bool = False) -> None:
        """Leadership is gone (or the node stops): no listener, no connection."""
        self.open_ = False
        self._close_listeners()
        for session in list(self.sessions.values()):
            session.end(graceful)
        self.sleepers.clear()

    def _close_listeners(self) -> None:
        if self._vip is not None:
            self._vip.cancel()
        listeners, self._listeners = self._listeners, []
        for listener in listeners:
            listener.close()

    def _new_session(self):
        server = self.server
        if len(server.sessions) + len(self.sessions) >= server.limits.max_connections or not self.open_:
            server.counters.rejected_connections += 1
            return RefusedGearmanConnection()
        return GearmanSession(self, server.next_conn_id())

    # ----------------------------------------------------------- connections
    def session_opened(self, session: GearmanSession) -> None:
        self.sessions[session.conn_id] = session
        # Not in beanstalkd's total-connections: `stats` counts beanstalkd connections only.
        self.server.counters.gearman_connections += 1

    def session_closed(self, session: GearmanSession) -> None:
        self.sessions.pop(session.conn_id, None)
        self.drop_ability(session, None)
        self.server.dirty.discard(session)
        if self.server.serving:
            holds = self.server.state.gearman.holds(session.conn_id)
            if holds or session.in_flight:
                # After anything it still had in flight (log order is submit order):
                # its running jobs go back to the head of their queues.
                self.server.batcher.submit((C.GM_DROP_CONN, session.conn_id), _ignore)
        if self.stop_when_idle and not self.sessions:
            log.info("shutdown graceful: the last Gearman connection closed; stopping")
            self.server.request_stop()

    # ------------------------------------------------------------- abilities
    def name_function(self, function: str) -> None:
        named = self.named
        if function in named:
            return
        named[function] = None
        if len(named) > A.MAX_NAMED_FUNCTIONS:
            del named[next(iter(named))]

    def set_ability(self, session: GearmanSession, function: str, timeout: int) -> None:
        self.name_function(function)
        session.abilities[function] = timeout
        self.workers.setdefault(function, set()).add(session)
        if session.sleeping:
            self.sleepers.setdefault(function, set()).add(session)

    def drop_ability(self, session: GearmanSession, function: str | None) -> None:
        """CANT_DO (one function) or RESET_ABILITIES (None: all of them)."""
        names = list(session.abilities) if function is None else [function]
        for name in names:
            if session.abilities.pop(name, None) is None and function is not None:
                continue
            for index in (self.workers, self.sleepers):
                members = index.get(name)
                if members is not None:
                    members.discard(session)
                    if not members:
                        del index[name]

    # ----------------------------------------------------- sleep and wake-up
    def pre_sleep(self, session: GearmanSession) -> None:
        """PRE_SLEEP: a NOOP at once if a job waits for one of its functions, else when one does."""
        waiting = self.server.state.gearman.grabbable(tuple(session.abilities))
        if waiting:
            session._reply(P.response("NOOP"))
            return
        session.sleeping = True
        for name in session.abilities:
            self.sleepers.setdefault(name, set()).add(session)

    def wake_off(self, session: GearmanSession) -> None:
        """The worker is awake (it grabs): no NOOP is owed any more."""
        if not session.sleeping:
            return
        session.sleeping = False
        for name in session.abilities:
            members = self.sleepers.get(name)
            if members is not None:
                members.discard(session)
                if not members:
                    del self.sleepers[name]

    def wake(self, functions) -> None:
        """After an entry: jobs became grabbable in these functions; every sleeping worker
        that can do one gets a NOOP (gearmand wakes them all too)."""
        woken = set()
        for name in functions:
            woken.update(self.sleepers.get(name, ()))
        for session in sorted(woken, key=lambda s: s.conn_id):
            self.wake_off(session)
            session.send(P.response("NOOP"))

    # ------------------------------------------------------------ forwarding
    def forward(self, clients, name: str, *args: bytes) -> None:
        """A worker's WORK_* to every client waiting for the job, on this leader."""
        packet = P.response(name, *args)
        for conn in clients:
            session = self.sessions.get(conn)
            if session is None:
                continue
            if name == "WORK_EXCEPTION" and not session.exceptions:
                # Without OPTION_REQ "exceptions" a client learns only that it failed; gearmand
                # sends the handle with a NUL after it, and so does haqueue (byte for byte).
                session.send(P.response("WORK_FAIL", args[0] + b"\0"))
            else:
                session.send(packet)

    # ---------------------------------------------------------------- admin
    def admin_line(self, session: GearmanSession, line: bytes) -> None:
        words = line.split()
        command = words[0].lower() if words else b""
        if command == b"status":
            counts = self.server.state.gearman.function_counts()
            session._reply(A.status_lines(counts, self._worker_counts(), self.named))
        elif command == b"prioritystatus":
            counts = self.server.state.gearman.priority_counts()
            session._reply(A.priority_status_lines(counts, self._worker_counts(), self.named))
        elif command == b"workers":
            session._reply(A.workers_lines(self.sessions.values()))
        elif command == b"version":
            session._reply(b"OK haqueue-%s\n" % __version__.encode())
        elif command == b"getpid":
            session._reply(b"OK %d\n" % os.getpid())
        elif command == b"maxqueue":
            parsed = A.parse_maxqueue(words)
            if parsed is None:
                session._reply(A.INCOMPLETE + b"maxqueue\r\n")
                return
            session.submit((C.GM_MAX_QUEUE, *parsed), lambda result: b"OK\r\n")
        elif command == b"shutdown" and len(words) <= 2 and words[1:] in ([], [b"graceful"]):
            session._reply(b"OK\n")
            self._shutdown(graceful=len(words) == 2)
        else:
            session._reply(A.unknown_command(command))

    def _worker_counts(self) -> dict[str, int]:
        return {name: len(members) for name, members in self.workers.items()}

    def _shutdown(self, graceful: bool) -> None:
        log.info("Gearman admin asked for shutdown%s", " (graceful)" if graceful else "")
        if not graceful:
            # After this entry's replies are written: the OK reaches its asker.
            self.server.loop.call_soon(self.server.request_stop)
            return
        self.stop_when_idle = True
        self._close_listeners()  # refuse new connections; the open ones finish


def _ignore(result) -> None:
    pass

