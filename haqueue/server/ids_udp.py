"""The id service's front end on the leader: JSON over UDP, and the requests behind `GET /id/...`.

`IdRequests` turns a parsed request (protocol/idjson.py) into an answer:
- get/create: an ID_RESERVE command through the group-commit batcher, so a
  reservation rides the same Raft entries as the queue's commands; the id is
  rendered from the committed values and the entry's stamp, and the reply
  goes out only after commit and apply (docs/design.md I1). Outcome unknown
  (leadership lost with the entry in flight) -> no reply: the client retries,
  an id may be wasted, never issued twice.
- monitor: a read of the applied state, answered only while the read lease
  holds (a deposed leader that does not know it yet would report stale
  counters); otherwise no reply.
- bad input (unknown rule, a salt the rule does not take) is answered from
  the applied state without a log entry: a hostile client cannot grow the log.

`IdListener` owns the UDP sockets. The node's own address is served by every
node from start to stop: followers answer `not_leader` naming the leader's id
endpoint, so a client that walks a server list until `code == 0` (id_server's
client pattern) finds the leader. The VIP, when one is configured, is bound
only while this node serves as leader (IP_FREEBIND: the address arrives after
leadership does), like the client listener (server/app.py). Each socket is bound to one address,
so a reply leaves from the address its request was sent to: a client that
connect()s its UDP socket, as id_server's own client does, drops a reply
from any other source.

Memory: at most MAX_PENDING requests wait for a commit; beyond that a
datagram is dropped unanswered (the client retries), so a flood cannot grow
the batcher's queue without bound.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from typing import Callable

from haqueue.core import commands as C
from haqueue.protocol import idjson
from haqueue.protocol.idjson import BadRequest, GetId, Monitor

log = logging.getLogger(__name__)

IP_FREEBIND = getattr(socket, "IP_FREEBIND", 15)  # linux/in.h
MAX_PENDING = 10_000
RCVBUF = 4 << 20  # a burst of datagrams waits here while the loop commits the last

# respond(outcome, body): outcome is "ok", an idjson error name, or None when
# the outcome is unknown (body None: no reply).
Respond = Callable[[str | None, bytes | None], None]


class IdRequests:
    def __init__(self, server, leader_endpoints: dict[str, str] | None = None) -> None:
        self.server = server  # haqueue.server.app.QueueServer
        self.pending = 0
        # Raft endpoint -> that node's id service "address:port", to name the leader.
        self.leader_endpoints = leader_endpoints or {}
        self._leader_cache: tuple[float, str | None] = (-1.0, None)

    def leader(self) -> str | None:
        """The leader's id endpoint, as far as this node knows (cached 0.1 s: a
        flood at a follower must not ask Raft for its status per datagram)."""
        replica = self.server.replica
        if replica is None or not self.leader_endpoints:
            return None
        now = self.server.loop.time()
        at, endpoint = self._leader_cache
        if now - at > 0.1:
            endpoint = self.leader_endpoints.get(replica.status().get("leader") or "")
            self._leader_cache = (now, endpoint)
        return endpoint

    def handle(self, request: GetId | Monitor | BadRequest, respond: Respond) -> None:
        if isinstance(request, BadRequest):
            respond(request.error, idjson.bad_request(request))
            return
        server = self.server
        if not server.serving or server.replica is None:
            respond("not_leader", idjson.not_leader(request, self.leader()))
            return
        if isinstance(request, Monitor):
            self._monitor(request, respond)
            return
        with server.state_lock:
            rule = server.state.ids.rules.get(request.rule)
        if rule is None:
            respond("unknown_rule", idjson.unknown_rule(request))
            return
        if not idjson.salt_fits(request.salt, rule.salt_max_len):
            bad = BadRequest("bad_request", "bad salt", request.seq)
            respond(bad.error, idjson.error(request, bad.error, bad.message))
            return
        if self.pending >= MAX_PENDING:
            respond(None, None)
            return
        self.pending += 1
        server.batcher.submit((C.ID_RESERVE, request.rule, request.app, 1),
                              lambda result: self._reserved(request, respond, result))

    def _monitor(self, request: Monitor, respond: Respond) -> None:
        server = self.server
        if not server.replica.read_lease_valid():
            respond(None, None)
            return
        with server.state_lock:
            ids = server.state.ids
            known = request.rule in ids.rules
            report = ids.monitor(request.rule, request.app)
        if not known:
            respond("unknown_rule", idjson.unknown_rule(request))
        elif report is None:
            respond("not_exist", idjson.not_exist(request))
        else:
            respond("ok", idjson.monitor_reply(request, report))

    def _reserved(self, request: GetId, respond: Respond, result: tuple | None) -> None:
        self.pending -= 1
        if result is None:
            respond(None, None)  # outcome unknown: the id may be taken, so say nothing
            return
        tag = result[0]
        if tag == "RESERVED":
            _, first, _count, _step, now = result
            with self.server.state_lock:
                rule = self.server.state.ids.rules[request.rule]
            respond("ok", idjson.success(request, rule.render(first, now, request.salt or "")))
        elif tag == "EXHAUSTED":
            with self.server.state_lock:
                rule = self.server.state.ids.rules.get(request.rule)
            respond("exhausted", idjson.exhausted(request, result[1], rule.utc_offset if rule else 0))
        elif tag == "UNKNOWN_RULE":
            respond("unknown_rule", idjson.unknown_rule(request))
        elif tag == "TOO_MANY_APPS":
            respond("too_many_apps", idjson.too_many_apps(request))
        else:  # BAD_ARGUMENTS: the codec let through what the state machine refuses
            log.error("id reservation refused: %r for %r", result, request)
            respond("bad_request", idjson.error(request, "bad_request", "bad request"))


class IdDatagrams(asyncio.DatagramProtocol):
    """One bound UDP socket: each datagram parsed, answered to its sender from this socket."""

    def __init__(self, requests: IdRequests) -> None:
        self.requests = requests
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport) -> None:
        self.transport = transport

    def datagram_received(self, data: bytes, addr) -> None:
        request = idjson.parse(data)
        if request is None:
            return
        self.requests.handle(request, lambda outcome, body: self._send(body, addr))

    def _send(self, body: bytes | None, addr) -> None:
        if body is not None and self.transport is not None and not self.transport.is_closing():
            self.transport.sendto(body, addr)

    def error_received(self, exc) -> None:
        pass  # an ICMP error for an earlier reply: the client has gone; nothing to do

    def connection_lost(self, exc) -> None:
        self.transport = None


class IdListener:
    def __init__(self, server, requests: IdRequests, host: str, port: int, vip: str | None = None) -> None:
        self.server = server
        self.requests = requests
        self.host = host
        self.port = port
        self.vip = vip if vip != host else None
        self.transports: list[asyncio.DatagramTransport] = []
        self._vip_transport: asyncio.DatagramTransport | None = None
        self._vip_retry: asyncio.TimerHandle | None = None
        self.open_ = False
        self.vip_open = False

    async def open(self) -> None:
        """Bind host:port, on every node from the start (OSError if it cannot)."""
        self.open_ = True
        await self._bind(self.host, freebind=False)

    async def open_vip(self) -> None:
        """While leader: bind the VIP too, retried until it binds or close_vip."""
        if self.vip is not None and self.open_ and not self.vip_open:
            self.vip_open = True
            await self._bind_vip()

    def close_vip(self) -> None:
        self.vip_open = False
        if self._vip_retry is not None:
            self._vip_retry.cancel()
            self._vip_retry = None
        if self._vip_transport is not None:
            transport, self._vip_transport = self._vip_transport, None
            transport.close()

    async def _bind(self, host: str, freebind: bool) -> asyncio.DatagramTransport | None:
        sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_DGRAM)
        try:
            # The VIP's socket and a wildcard host's share the port: the more
            # specific binding gets the VIP's datagrams (and replies from the VIP).
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCVBUF)
            if freebind:
                sock.setsockopt(socket.SOL_IP, IP_FREEBIND, 1)
            sock.bind((host, self.port))
            transport, _ = await self.server.loop.create_datagram_endpoint(
                lambda: IdDatagrams(self.requests), sock=sock)
        except BaseException:
            sock.close()
            raise
        if not self.open_ or (freebind and not self.vip_open):  # closed while we were binding
            transport.close()
            return None
        if freebind:
            self._vip_transport = transport
        else:
            self.transports.append(transport)
        return transport

    async def _bind_vip(self) -> None:
        self._vip_retry = None
        if not self.open_ or not self.vip_open:
            return
        try:
            await self._bind(self.vip, freebind=True)
        except OSError as exc:
            log.warning("cannot serve ids on the VIP %s:%d yet: %s", self.vip, self.port, exc.strerror)
            loop = self.server.loop
            self._vip_retry = loop.call_later(0.2, lambda: loop.create_task(self._bind_vip()))

    def close(self) -> None:
        self.open_ = False
        self.close_vip()
        for transport in self.transports:
            transport.close()
        self.transports.clear()

    def addresses(self) -> list[tuple]:
        vip = [self._vip_transport] if self._vip_transport is not None else []
        return [t.get_extra_info("sockname") for t in self.transports + vip]
