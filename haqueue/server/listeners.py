"""Where clients connect: the beanstalkd port's listeners, and the one VIP binder every front end uses.

Every front end (beanstalkd, Gearman, the id service) listens on the node's own
address and, while this node leads, on the cluster's virtual IP, so that clients
of the VIP reach the leader as soon as keepalived moves the address here. Two
rules make that work, and they live here once:
- The VIP is bound with IP_FREEBIND (`bound_socket(..., freebind=True)`): the
  address arrives after leadership does, and the listener must be ready first.
- A VIP that cannot be bound yet (another node on this host still holds it: a
  loopback cluster in transition) is tried again every VIP_RETRY_S for as long
  as the front end wants it (`VipBinder`), with one warning per attempt.

`ClientListener` is the beanstalkd port itself: a TCP address, a Unix socket or
a socket handed over by the early listener (haqueue/cli/early.py), TLS when
configured (tls.py), and the connections that arrived while the node started.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from dataclasses import dataclass, field
from functools import partial
from typing import Awaitable, Callable

log = logging.getLogger(__name__)

IP_FREEBIND = getattr(socket, "IP_FREEBIND", 15)  # linux/in.h
# Connections the kernel completes before the node accepts them, as beanstalkd's
# listen(fd, 1024). Passed on every listener, sockets handed over included: the loop
# listens again on a socket it is given, with its own default (100) otherwise.
BACKLOG = 1024
VIP_RETRY_S = 0.2


def bound_socket(host: str, port: int, kind: int = socket.SOCK_STREAM, *, freebind: bool = False,
                 rcvbuf: int | None = None) -> socket.socket:
    """A socket bound to host:port (IPv6 if the host has a colon), listening if it is a
    stream; IP_FREEBIND for the VIP. SO_REUSEADDR: the VIP's socket and a wildcard
    host's share the port, and the more specific binding gets the VIP's traffic.
    OSError, with the socket closed, if it cannot bind."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, kind)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if rcvbuf is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        if freebind:
            sock.setsockopt(socket.SOL_IP, IP_FREEBIND, 1)
        sock.bind((host, port))
        if kind == socket.SOCK_STREAM:
            sock.listen(BACKLOG)
    except BaseException:
        sock.close()
        raise
    return sock


class VipBinder:
    """A front end's VIP: `bind()` runs the front end's own binding (which binds with
    bound_socket(..., freebind=True)) and, while it raises OSError, runs it again every
    VIP_RETRY_S for as long as `wanted()` holds; `cancel()` stops the retries."""

    def __init__(self, what: str, vip: str, port: int, bind: Callable[[], Awaitable[None]],
                 wanted: Callable[[], bool]) -> None:
        self.what = what  # for the warning: "cannot {what} on the VIP ..."
        self.vip = vip
        self.port = port
        self._bind = bind
        self._wanted = wanted
        self._retry: asyncio.TimerHandle | None = None

    async def bind(self) -> None:
        self._retry = None
        if not self._wanted():
            return
        try:
            await self._bind()
        except OSError as exc:
            log.warning("cannot %s on the VIP %s:%d yet: %s", self.what, self.vip, self.port, exc.strerror)
            loop = asyncio.get_running_loop()
            self._retry = loop.call_later(VIP_RETRY_S, lambda: loop.create_task(self.bind()))

    def cancel(self) -> None:
        if self._retry is not None:
            self._retry.cancel()
            self._retry = None


@dataclass
class Listen:
    """Where clients connect: a TCP address, a Unix socket path, or a socket handed over."""

    host: str = "0.0.0.0"
    port: int = 11300
    unix_path: str | None = None
    sock: socket.socket | None = None
    # Connections the early socket accepted while the node started, each with the
    # monotonic time its first bytes were readable (or None) and how many they were
    # (haqueue/cli/arrivals.py): served as the listener's own, their first commands'
    # delays and timeouts counted from then (beanstalk/session.py, arrived_early).
    arrived: list = field(default_factory=list)
    # The cluster's virtual IP: the leader listens there too, so clients of
    # the VIP reach it as soon as keepalived moves the address here. Bound
    # with IP_FREEBIND, since the address arrives after leadership does.
    vip: str | None = None

    def describe(self) -> str:
        if self.sock is not None:
            name = self.sock.getsockname()
            return f"unix:{name}" if isinstance(name, str) else "{}:{}".format(*name[:2])
        if self.unix_path:
            return f"unix:{self.unix_path}"
        return f"{self.host}:{self.port}"


class RefusedConnection(asyncio.Protocol):
    """A connection beyond max_connections: closed at once, without a reply.

    beanstalkd closes a connection it cannot make room for (prot.c h_accept,
    make_conn failing) without a word; so does haqueue, and counts it.
    """

    def connection_made(self, transport) -> None:
        transport.close()

    def connection_lost(self, exc) -> None:
        pass


class ClientListener:
    """The beanstalkd port while this node leads: opened by `open`, closed by `close`.

    `factory()` makes each connection's protocol; `tls` holds create_server's TLS
    keywords (empty without TLS, tls.py)."""

    def __init__(self, listen: Listen, factory: Callable[[], asyncio.Protocol], tls: dict) -> None:
        self.listen = listen
        self.factory = factory
        self.tls = tls
        self._server: asyncio.AbstractServer | None = None
        self._vip_server: asyncio.AbstractServer | None = None
        self._vip = VipBinder("listen", listen.vip, listen.port, self._bind_vip, lambda: self._server is not None)

    @property
    def is_open(self) -> bool:
        return self._server is not None

    async def open(self, loop: asyncio.AbstractEventLoop) -> None:
        """Listen (OSError, with the system's words, if it cannot); then the VIP, retried."""
        listen, factory, tls = self.listen, self.factory, self.tls
        if listen.sock is not None:
            self._server = await loop.create_server(factory, sock=listen.sock, backlog=BACKLOG, **tls)
        elif listen.unix_path:
            if os.path.exists(listen.unix_path):
                os.unlink(listen.unix_path)
            self._server = await loop.create_unix_server(factory, path=listen.unix_path, backlog=BACKLOG, **tls)
        else:
            self._server = await loop.create_server(
                factory, host=listen.host, port=listen.port, reuse_address=True, backlog=BACKLOG, **tls
            )
            if listen.vip is not None and listen.vip != listen.host:
                await self._vip.bind()

    async def _bind_vip(self) -> None:
        sock = bound_socket(self.listen.vip, self.listen.port, freebind=True)
        try:
            self._vip_server = await asyncio.get_running_loop().create_server(
                self.factory, sock=sock, backlog=BACKLOG, **self.tls)
        except BaseException:
            sock.close()
            raise

    async def serve_arrived(self, loop: asyncio.AbstractEventLoop,
                            factory: Callable[[float | None, int], asyncio.Protocol]) -> None:
        """The connections the early socket accepted while the node started (Listen.arrived),
        served once the node serves, oldest first; factory(first_at, count) makes each one's protocol."""
        arrived, self.listen.arrived = self.listen.arrived, []
        for conn, first_at, count in arrived:
            await loop.connect_accepted_socket(partial(factory, first_at, count), sock=conn, **self.tls)

    def close(self) -> None:
        self._vip.cancel()
        for name in ("_vip_server", "_server"):
            server = getattr(self, name)
            if server is not None:
                setattr(self, name, None)
                server.close()
