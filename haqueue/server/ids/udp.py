"""The id service's front end on the leader: JSON over UDP, and the requests behind `GET /id/...`.

`IdRequests` turns a parsed request (protocol/idjson.py) into an answer:
- get/create of an exact-mode rule: an ID_RESERVE command through the group-commit batcher, so a
  reservation rides the same Raft entries as the queue's commands (the gets of one key
  that arrive together share one reservation of as many values); the id is
  rendered from the committed values and the entry's stamp, and the reply
  goes out only after commit and apply (docs/design.md I1). Outcome unknown
  (leadership lost with the entry in flight) -> no reply: the client retries,
  an id may be wasted, never issued twice.
- get/create of a segment-mode rule (Leaf-style): served from blocks of
  `segment` values that committed ID_RESERVE entries took ahead of need, in
  memory, with no commit per id. When what is left falls to 90 % of a block
  the next block is reserved, so a steady client never waits for a commit;
  a request that finds no block left waits for the one in flight. Blocks
  live only on this leader for this term: on step-down they are dropped
  (those values are wasted, never handed out again, since every block is
  below the committed high-water mark that the next leader reserves above).
  A block is served only while the read lease holds (a deposed leader that
  does not know it yet stays silent rather than hand out values below a
  new leader's), and only until its cycle ends by this node's clock. An id
  from a block carries the block's committed time, so per key the rendered
  time, like the counter, never goes back, on this leader or the next.
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
leadership does), like the client listener (server/listeners.py). Each socket is bound to one address,
so a reply leaves from the address its request was sent to: a client that
connect()s its UDP socket, as id_server's own client does, drops a reply
from any other source. A node bound to the IPv4 wildcard (`-l 0.0.0.0`)
cannot rely on that: there each datagram's destination address comes with
it (IP_PKTINFO), and its reply names that address as its source
(`PktinfoTransport`).

Memory: at most MAX_PENDING requests wait for a commit; beyond that a
datagram is dropped unanswered (the client retries), so a flood cannot grow
the batcher's queue without bound.

Rate limit (`SourceLimit`): each source address gets a token bucket of
`rate` datagrams a second (burst: a fifth of a second's worth, at least
100), checked before a datagram is parsed; beyond it datagrams are dropped
unanswered and counted. So one client, or one spoofed address, can neither
take the node's whole time nor be sent more than `rate` replies a second.
Buckets are kept for at most MAX_SOURCES addresses; beyond that, new
addresses share one bucket (a spoofed flood of random sources then limits
itself, not the known clients).
"""

from __future__ import annotations

import asyncio
import logging
import socket
import struct
from collections import deque
from functools import partial
from typing import Callable, Protocol

from haqueue.core import commands as C
from haqueue.core.idrules import SEGMENT
from haqueue.core.ids import MAX_RESERVE
from haqueue.core.results import Tag
from haqueue.core.state import QueueState
from haqueue.protocol import idjson
from haqueue.protocol.idjson import BadRequest, GetId, Monitor, Outcome
from haqueue.server.batcher import wall_ms
from haqueue.server.host import Admits, LeaseHolder, Submits
from haqueue.server.listeners import VipBinder, bound_socket

log = logging.getLogger(__name__)

IP_PKTINFO = getattr(socket, "IP_PKTINFO", None) or 8  # linux/in.h; Python 3.11 does not name it
_PKTINFO = struct.Struct("=I4s4s")  # struct in_pktinfo: ifindex, spec_dst, addr
READS_PER_WAKE = 64  # datagrams read per readiness event before others get the loop
MAX_PENDING = 10_000
RCVBUF = 4 << 20  # a burst of datagrams waits here while the loop commits the last

# respond(outcome, body): outcome is an idjson.Outcome (OK or the error the reply names), or None when
# the outcome is unknown (body None: no reply).
Respond = Callable[[Outcome | None, bytes | None], None]


DEFAULT_RATE = 20_000  # datagrams a second per source address; 0: no limit
MAX_SOURCES = 65_536


class SourceLimit:
    """A token bucket per source address (see the module docstring)."""

    def __init__(self, rate: int, max_sources: int = MAX_SOURCES) -> None:
        self.rate = rate
        self.burst = max(100, rate // 5)
        self.max_sources = max_sources
        self.buckets: dict[str, list[float]] = {}  # address -> [tokens, at]
        self.shared = [float(self.burst), 0.0]  # addresses beyond max_sources
        self.dropped = 0

    def allow(self, source: str, now: float) -> bool:
        if not self.rate:
            return True
        bucket = self.buckets.get(source)
        if bucket is None:
            if len(self.buckets) >= self.max_sources:
                self._forget_idle(now)
            if len(self.buckets) >= self.max_sources:
                bucket = self.shared
            else:
                bucket = self.buckets[source] = [float(self.burst), now]
        tokens = min(self.burst, bucket[0] + (now - bucket[1]) * self.rate)
        bucket[1] = now
        if tokens < 1:
            bucket[0] = tokens
            self.dropped += 1
            if self.dropped & (self.dropped - 1) == 0:  # the 1st, 2nd, 4th, ...: visible, never a flood
                log.warning("id service: %d datagram(s) over the rate limit of %d/s per source dropped",
                            self.dropped, self.rate)
            return False
        bucket[0] = tokens - 1
        return True

    def _forget_idle(self, now: float) -> None:
        """Drop the buckets that have filled up again: forgetting them changes nothing."""
        refill = self.burst / self.rate
        for source in [s for s, (tokens, at) in self.buckets.items() if now - at >= refill]:
            del self.buckets[source]


PREFETCH_AT = 0.9  # reserve the next block when what is left is below this share of one


class Segments:
    """One key's blocks on the leader: values committed ahead, not yet handed out."""

    __slots__ = ("rule", "blocks", "fetching", "waiting", "exhausted")

    def __init__(self, rule) -> None:
        self.rule = rule  # the IdRule the blocks were taken under
        # Each block: [next value, values left, step, cycle, committed time ms].
        self.blocks: deque[list[int]] = deque()
        self.fetching = False
        self.waiting: list[tuple[GetId, Respond]] = []  # no block left: waiting for the next
        # The last reservation answered EXHAUSTED: (cycle end ms or None: never).
        # No more are tried before then, or every get near the end would be an entry.
        self.exhausted: tuple[int | None] | None = None

    def may_fetch(self, wall: int) -> bool:
        if self.fetching:
            return False
        if self.exhausted is not None:
            (until,) = self.exhausted
            if until is None or wall < until:
                return False
            self.exhausted = None
        return self.left() <= PREFETCH_AT * self.rule.segment

    def take(self, wall: int) -> tuple[int, int] | None:
        """The next value and the time to render it with, or None if no block has one.
        A block whose cycle has ended by this node's clock is dropped; a clock
        behind the block's keeps serving it (its time is frozen at the block's)."""
        blocks = self.blocks
        cycle_now = self.rule.cycle(wall)
        while blocks:
            block = blocks[0]
            if block[1] <= 0 or cycle_now > block[3]:
                blocks.popleft()
                continue
            value = block[0]
            block[0] += block[2]
            block[1] -= 1
            return value, block[4]
        return None

    def left(self) -> int:
        return sum(block[1] for block in self.blocks)


class IdHost(Protocol):
    """What the id front end uses of the server that runs it (QueueServer), typed so that
    this module knows the server only as this interface (tests/server/test_session_host.py)."""

    loop: asyncio.AbstractEventLoop
    batcher: Submits
    replica: LeaseHolder
    disk: Admits
    serving: bool

    @property
    def state(self) -> QueueState: ...


class IdRequests:
    def __init__(self, server: IdHost, leader_endpoints: dict[str, str] | None = None) -> None:
        self.server = server
        self.pending = 0
        self.segments: dict[tuple[str, str], Segments] = {}  # segment-mode keys: this leader's blocks
        # Exact-mode gets waiting for this loop iteration's reservations, by key (_reserve_gathered).
        self._gathered: dict[tuple[str, str], list[tuple[GetId, Respond]]] = {}
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
            respond(Outcome.NOT_LEADER, idjson.not_leader(request, self.leader()))
            return
        if isinstance(request, Monitor):
            self._monitor(request, respond)
            return
        rule = server.state.ids.rules.get(request.rule)
        if rule is None:
            respond(Outcome.UNKNOWN_RULE, idjson.unknown_rule(request))
            return
        if not idjson.salt_fits(request.salt, rule.salt_max_len):
            bad = BadRequest(Outcome.BAD_REQUEST, "bad salt", request.seq)
            respond(bad.error, idjson.error(request, bad.error, bad.message))
            return
        if rule.mode == SEGMENT:
            self._from_segment(request, rule, respond)
            return
        if self.pending >= MAX_PENDING:
            respond(None, None)
            return
        if not server.disk.admits(0):  # below the disk reserve (disk_reserve.py)
            respond(Outcome.DISK_FULL, idjson.disk_full(request))
            return
        self.pending += 1
        first = not self._gathered  # the first get of this loop turn: reserve once the turn's are in
        self._gathered.setdefault((request.rule, request.app), []).append((request, respond))
        if first:
            server.loop.call_soon(self._reserve_gathered)

    # -------------------------------------------------------------- exact mode
    def _reserve_gathered(self) -> None:
        """One ID_RESERVE of n values for the n gets of a key that arrived since the
        loop last came here. reserve(n) hands out up to n consecutive values, and the
        first `count` gets take them in the order they arrived: the same ids, and the
        same EXHAUSTED for the rest, as n reservations of one in one entry would give,
        at the cost of one command instead of n on every node. Measured, 64 clients:
        about 16 gets per entry, so an entry applied 16 reservations on each node."""
        gathered, self._gathered = self._gathered, {}
        server = self.server
        batcher = server.batcher
        for (rule, app), waiting in gathered.items():
            if not server.serving or batcher is None or batcher.closed:
                self._answer_gathered(waiting, None)
                continue
            for start in range(0, len(waiting), MAX_RESERVE):
                part = waiting[start:start + MAX_RESERVE]
                batcher.submit((C.ID_RESERVE, rule, app, len(part)),
                               lambda result, part=part: self._answer_gathered(part, result))

    def _answer_gathered(self, waiting: list, result: tuple | None) -> None:
        self.pending -= len(waiting)
        if result is None or result[0] != Tag.RESERVED:
            for request, respond in waiting:
                self._reserved_error(request, respond, result)
            return
        _, first, count, step, now = result
        rule = self.server.state.ids.rules.get(waiting[0][0].rule)
        if rule is None:  # removed by a later entry already applied: cannot render it
            for _request, respond in waiting:
                respond(None, None)
            return
        for i, (request, respond) in enumerate(waiting):
            if i < count:
                respond(Outcome.OK, idjson.success(request, rule.render(first + i * step, now, request.salt or "")))
            else:  # the counter ran out inside this reservation, as a later one of its own would
                respond(Outcome.EXHAUSTED, idjson.exhausted(request, rule.cycle_end_ms(rule.cycle(now)), rule.utc_offset))

    # ------------------------------------------------------------ segment mode
    def _from_segment(self, request: GetId, rule, respond: Respond) -> None:
        if not self.server.replica.read_lease_valid():
            respond(None, None)  # maybe deposed: a newer leader may be serving higher values
            return
        key = (request.rule, request.app)
        segments = self.segments.get(key)
        if segments is None:
            if self.pending >= MAX_PENDING:
                respond(None, None)
                return
            segments = self.segments[key] = Segments(rule)
        elif segments.rule is not rule:
            # The rules changed (a new ID_SET_RULES): blocks taken under the
            # old rule are dropped, wasted, rather than rendered with the new.
            segments.rule = rule
            segments.blocks.clear()
            segments.exhausted = None
        wall = wall_ms()
        taken = segments.take(wall)
        # A block in hand costs no disk; a new one is a log entry, refused below the reserve.
        fetch = segments.may_fetch(wall) and self.server.disk.admits(0)
        if taken is not None:
            value, now = taken
            respond(Outcome.OK, idjson.success(request, rule.render(value, now, request.salt or "")))
        elif segments.exhausted is not None:
            respond(Outcome.EXHAUSTED, idjson.exhausted(request, segments.exhausted[0], rule.utc_offset))
        elif not segments.fetching and not fetch:
            respond(Outcome.DISK_FULL, idjson.disk_full(request))
            if not segments.blocks and not segments.waiting:
                del self.segments[key]
            return
        elif self.pending >= MAX_PENDING:
            respond(None, None)
            return
        else:
            self.pending += 1
            segments.waiting.append((request, respond))
        if fetch:
            self._fetch(key, segments)

    def _fetch(self, key: tuple[str, str], segments: Segments) -> None:
        segments.fetching = True
        self.pending += 1
        rule = segments.rule
        self.server.batcher.submit((C.ID_RESERVE, rule.name, key[1], rule.segment),
                                   lambda result: self._block(key, segments, result))

    def _block(self, key: tuple[str, str], segments: Segments, result: tuple | None) -> None:
        """A block's reservation is applied (or its outcome unknown: None)."""
        self.pending -= 1
        segments.fetching = False
        if self.segments.get(key) is not segments:
            return  # dropped on step-down: its waiters were answered then
        waiting, segments.waiting = segments.waiting, []
        tag = result[0] if result is not None else None
        if tag == Tag.RESERVED:
            _, first, count, step, now = result
            segments.blocks.append([first, count, step, segments.rule.cycle(now), now])
            wall = wall_ms()
            while waiting:
                taken = segments.take(wall)
                if taken is None:
                    break
                request, respond = waiting.pop(0)
                self.pending -= 1
                respond(Outcome.OK, idjson.success(request, segments.rule.render(taken[0], taken[1],
                                                                           request.salt or "")))
            segments.waiting = waiting
            if waiting or segments.may_fetch(wall):
                self._fetch(key, segments)
            return
        if tag == Tag.EXHAUSTED:
            segments.exhausted = (result[1],)
        for request, respond in waiting:
            self.pending -= 1
            self._reserved_error(request, respond, result)
        if not segments.blocks:
            del self.segments[key]

    def drop_blocks(self) -> None:
        """Leadership is gone: every block is wasted, every waiter gets silence
        (the outcome of a reservation in flight is unknown), and so does every
        exact-mode get gathered but not yet submitted."""
        gathered, self._gathered = self._gathered, {}
        for waiting in gathered.values():
            self._answer_gathered(waiting, None)
        segments, self.segments = self.segments, {}
        for one in segments.values():
            for _request, respond in one.waiting:
                self.pending -= 1
                respond(None, None)
            one.waiting = []
            one.blocks.clear()

    def _monitor(self, request: Monitor, respond: Respond) -> None:
        server = self.server
        if not server.replica.read_lease_valid():
            respond(None, None)
            return
        ids = server.state.ids
        known = request.rule in ids.rules
        report = ids.monitor(request.rule, request.app)
        if not known:
            respond(Outcome.UNKNOWN_RULE, idjson.unknown_rule(request))
        elif report is None:
            respond(Outcome.NOT_EXIST, idjson.not_exist(request))
        else:
            respond(Outcome.OK, idjson.monitor_reply(request, report))

    def _reserved_error(self, request: GetId, respond: Respond, result: tuple | None) -> None:
        tag = result[0] if result is not None else None
        if tag is None:
            respond(None, None)
        elif tag == Tag.EXHAUSTED:
            rule = self.server.state.ids.rules.get(request.rule)
            respond(Outcome.EXHAUSTED, idjson.exhausted(request, result[1], rule.utc_offset if rule else 0))
        elif tag == Tag.UNKNOWN_RULE:
            respond(Outcome.UNKNOWN_RULE, idjson.unknown_rule(request))
        elif tag == Tag.TOO_MANY_APPS:
            respond(Outcome.TOO_MANY_APPS, idjson.too_many_apps(request))
        else:  # BAD_ARGUMENTS: the codec let through what the state machine refuses
            log.error("id reservation refused: %r for %r", result, request)
            respond(Outcome.BAD_REQUEST, idjson.error(request, Outcome.BAD_REQUEST, "bad request"))


class IdDatagrams(asyncio.DatagramProtocol):
    """One bound UDP socket: each datagram parsed, answered to its sender from this socket."""

    def __init__(self, requests: IdRequests, limit: SourceLimit, clock: Callable[[], float]) -> None:
        self.requests = requests
        self.limit = limit
        self.clock = clock
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport) -> None:
        self.transport = transport

    def datagram_received(self, data: bytes, addr, local: bytes | None = None) -> None:
        """`local`: the address it was sent to (packed), on a wildcard-bound socket."""
        if not self.limit.allow(addr[0], self.clock()):
            return
        request = idjson.parse(data)
        if request is None:
            return
        self.requests.handle(request, lambda outcome, body: self._send(body, addr, local))

    def _send(self, body: bytes | None, addr, local: bytes | None = None) -> None:
        if body is not None and self.transport is not None and not self.transport.is_closing():
            if local is None:
                self.transport.sendto(body, addr)
            else:
                self.transport.sendto_from(body, addr, local)

    def error_received(self, exc) -> None:
        pass  # an ICMP error for an earlier reply: the client has gone; nothing to do

    def connection_lost(self, exc) -> None:
        self.transport = None


class PktinfoTransport:
    """A UDP socket bound to 0.0.0.0 that answers from the address each request was sent to.

    asyncio's datagram transports read with recvfrom and cannot pass the
    destination address along, so this reads with recvmsg (IP_PKTINFO on)
    and replies with sendmsg, naming that address as the source. Replies go
    out at once; one the kernel cannot take now (a full send buffer) is
    dropped, as the network may drop any datagram: the client retries.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, sock: socket.socket, protocol: IdDatagrams) -> None:
        self.loop = loop
        self.sock = sock
        self.protocol = protocol
        self.closing = False
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_IP, IP_PKTINFO, 1)
        self.ancillary = socket.CMSG_SPACE(_PKTINFO.size)
        protocol.connection_made(self)
        loop.add_reader(sock.fileno(), self._readable)

    def _readable(self) -> None:
        for _ in range(READS_PER_WAKE):
            try:
                data, ancdata, _flags, addr = self.sock.recvmsg(idjson.MAX_REQUEST + 1, self.ancillary)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:  # an ICMP error for an earlier reply: the client has gone
                continue
            local = None
            for level, kind, value in ancdata:
                if level == socket.IPPROTO_IP and kind == IP_PKTINFO and len(value) >= _PKTINFO.size:
                    local = _PKTINFO.unpack_from(value)[2]  # ipi_addr: where it was sent
            self.protocol.datagram_received(data, addr, local)
            if self.closing:
                return

    def sendto_from(self, body: bytes, addr, local: bytes) -> None:
        try:
            self.sock.sendmsg([body], [(socket.IPPROTO_IP, IP_PKTINFO, _PKTINFO.pack(0, local, bytes(4)))],
                               0, addr)
        except OSError:
            pass  # dropped, as UDP may drop it anywhere; the client retries

    def sendto(self, body: bytes, addr) -> None:
        try:
            self.sock.sendto(body, addr)
        except OSError:
            pass

    def is_closing(self) -> bool:
        return self.closing

    def get_extra_info(self, name: str, default=None):
        return self.sock.getsockname() if name == "sockname" else default

    def close(self) -> None:
        if not self.closing:
            self.closing = True
            self.loop.remove_reader(self.sock.fileno())
            self.sock.close()
            self.protocol.connection_lost(None)


class IdListener:
    def __init__(self, server, requests: IdRequests, host: str, port: int, vip: str | None = None,
                 rate: int = DEFAULT_RATE) -> None:
        self.server = server
        self.requests = requests
        self.limit = SourceLimit(rate)  # shared by the node's own socket and the VIP's
        self.host = host
        self.port = port
        self.vip = vip if vip != host else None
        self.transports: list[asyncio.DatagramTransport] = []
        self._vip_transport: asyncio.DatagramTransport | None = None
        self._vip = (VipBinder("serve ids", self.vip, port, partial(self._bind, self.vip, True),
                               lambda: self.open_ and self.vip_open) if self.vip is not None else None)
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
            await self._vip.bind()

    def close_vip(self) -> None:
        self.vip_open = False
        if self._vip is not None:
            self._vip.cancel()
        if self._vip_transport is not None:
            transport, self._vip_transport = self._vip_transport, None
            transport.close()

    async def _bind(self, host: str, freebind: bool) -> asyncio.DatagramTransport | None:
        # The VIP's socket and a wildcard host's share the port (SO_REUSEADDR): the more
        # specific binding gets the VIP's datagrams (and replies from the VIP).
        sock = bound_socket(host, self.port, socket.SOCK_DGRAM, freebind=freebind, rcvbuf=RCVBUF)
        try:
            protocol = IdDatagrams(self.requests, self.limit, self.server.loop.time)
            if host == "0.0.0.0":
                transport = PktinfoTransport(self.server.loop, sock, protocol)
            else:
                transport, _ = await self.server.loop.create_datagram_endpoint(lambda: protocol, sock=sock)
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

    def close(self) -> None:
        self.open_ = False
        self.close_vip()
        for transport in self.transports:
            transport.close()
        self.transports.clear()

    def addresses(self) -> list[tuple]:
        vip = [self._vip_transport] if self._vip_transport is not None else []
        return [t.get_extra_info("sockname") for t in self.transports + vip]
