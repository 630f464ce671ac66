"""QueueServer: one haqueue node — Raft underneath, the client protocols on top.

Duties, in the order they happen:
1. Open the replica (haqueue/replication/replica.py): a Raft member, or a lone node.
2. When this node becomes leader: log RELEASE_ORPHANS (every reservation not
   held by one of our connections — we have none yet — goes back,
   docs/design.md I5) and wait until it is applied, which also proves this
   node has applied everything committed before it; commit the id rules if
   they changed (ids/rules.py). Only then open the client listener (I3).
3. While leader: sessions submit commands through the group-commit batcher;
   after each applied entry, wake waiting reserves (waiters.py), flush
   replies, and arm the timer for the next deadline (deadlines.py: delay,
   time-to-run, pause), which logs a TICK so that expiry is a committed,
   replicated change.
4. When leadership is lost: close the listeners and drop every client at once;
   in-flight commands end with their connections (outcome unknown).
5. On SIGTERM/SIGINT stop gracefully; on SIGUSR1 enter drain mode (puts get
   DRAINING), as beanstalkd does. On SIGHUP re-read the cluster file's id
   rules; the leader commits them if they differ (`_reload_id_rules`).

What this module keeps is the node's lifecycle, its leadership, and being the
beanstalkd sessions' host (host.SessionHost); where clients connect is
listeners.py (TLS: tls.py), and each front end has its folder (beanstalk/,
gearman/, ids/). It reads a Session only through host.HostedSession.
"""
from __future__ import annotations

import asyncio
import dataclasses
import logging
import signal
import ssl
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Callable

from haqueue import events
from haqueue.config.limits import ClientLimits
from haqueue.config.replication import ReplicationSettings
from haqueue.core import commands as C
from haqueue.core.effects import Effects
from haqueue.core.state import REQUEUES_PER_ENTRY
from haqueue.replication.replica import ReplicaLike, open_replica
from haqueue.server.batcher import MAX_BATCH_BYTES, Batcher, wall_ms
from haqueue.server.beanstalk.drops import Drops
from haqueue.server.beanstalk.session import Session
from haqueue.server.beanstalk.stats import ServerCounters, server_stats
from haqueue.server.beanstalk.tubes import TubeDirectory
from haqueue.server.deadlines import Deadlines
from haqueue.server.disk_reserve import DiskReserve
from haqueue.server.input_budget import InputBudget
from haqueue.server.gc_policy import CollectorPolicy
from haqueue.server.ids import rules as id_rules
from haqueue.server.limits import MemoryGauge, raise_fd_limit
from haqueue.server.listeners import ClientListener, Listen, RefusedConnection
from haqueue.server.tls import TlsFiles, server_options
from haqueue.server.turns import TurnQueue
from haqueue.server.waiters import Waiters

if TYPE_CHECKING:
    from haqueue.server.gearman.service import GearmanService
    from haqueue.server.ids.udp import IdListener, IdRequests

log = logging.getLogger(__name__)

@dataclass
class NodeOptions:
    listen: Listen
    # Raft: endpoint, peers, data directory, fsync policy, secret, timing, journal limit;
    # built once by the command line and taken whole by the replica (config/replication.py).
    replication: ReplicationSettings
    max_job_size: int = 65535
    admin: tuple[str, int] | None = None
    name: str = "haqueue"
    # Every member of the cluster as (id, address, admin port, Raft endpoint),
    # this node included, for the status page's cluster view (status_page.py).
    members: list[tuple[str, str, int, str]] = field(default_factory=list)
    node_id: str | None = None
    # Signals that arrived before run() handled signals (haqueue/cli/early.py): () -> [signum]
    early_signals: Callable[[], list[int]] | None = None
    limits: ClientLimits = field(default_factory=ClientLimits)
    tls: "TlsFiles | None" = None
    admin_token: str | None = None
    # The id service's UDP port on the client listener's host (and, on the
    # leader, the VIP); 0: off (server/ids/udp.py). GET /id/... on the admin
    # port works either way. id_endpoints: Raft endpoint -> "address:id_port"
    # of every member, so that followers can name the leader.
    id_port: int = 0
    id_endpoints: dict[str, str] = field(default_factory=dict)
    # The cluster file's [[id_rules]]: a new leader commits them (with the
    # built-in rules) when they differ from the replicated rules.
    id_rules: tuple = ()
    id_rate_limit: int = 20_000  # datagrams a second per source address (ids.udp.SourceLimit); 0: off
    config_path: str | None = None  # the cluster file, re-read for its id rules on SIGHUP
    # The Gearman port on the client listener's host (and the VIP), served by
    # the leader only, like the beanstalkd port; 0: off (server/gearman/service.py).
    gearman_port: int = 0

    # Read by more than the replica (the disk reserve, metrics, the admin port), named here
    # so those readers need not know where the Raft settings live.
    @property
    def data_dir(self) -> str | None:
        return self.replication.data_dir

    @property
    def raft_address(self) -> str:
        return self.replication.self_address


class QueueServer:
    def __init__(self, options: NodeOptions) -> None:
        self.options = options
        self.max_job_size = options.max_job_size
        self.limits = options.limits
        self.loop: asyncio.AbstractEventLoop | None = None
        self.replica: ReplicaLike | None = None
        self.batcher: Batcher | None = None
        self.directory = TubeDirectory()
        self.counters = ServerCounters()
        self.sessions: set[Session] = set()
        self.waiters = Waiters()  # reserves waiting for a job (waiters.py)
        self.dirty: set[Session] = set()
        self.turns = TurnQueue(self)  # when a connection that used up its turn runs again
        # Closed connections' reservations on their way back, and the reads that wait for them.
        self.drops = Drops(lambda session: self.dirty.add(session))  # self.dirty: a new set per entry
        self.serving = False
        # Set while this node does not lead (Raft's role, not `serving`): what waits for a
        # leader to step down awaits it instead of asking every so often (removal_watch.py).
        self.not_leading = asyncio.Event()
        self.not_leading.set()
        self.draining = False
        self.epoch = 0
        self.conn_serial = 0
        self._listener: ClientListener | None = None
        self._leader_task: asyncio.Task | None = None
        self.deadlines = Deadlines(self)  # the TICK for the next deadline (deadlines.py)
        self._stopped = asyncio.Event()
        self.fatal: str | None = None
        self.removed_line: str | None = None  # removed from the Raft group: the line it stops with
        self.admin_server = None
        self.collector: CollectorPolicy | None = None
        self.memory: MemoryGauge | None = None
        self.disk: DiskReserve | None = None
        self.input_budget = InputBudget(self.limits.max_input_buffers)
        self._tls_context: ssl.SSLContext | None = None
        self._id_listener: IdListener | None = None
        self.gearman: GearmanService | None = None
        if options.gearman_port:
            # Imported only when served, as the id service is: a plain node starts sooner.
            from haqueue.server.gearman.service import GearmanService

            listen = options.listen
            self.gearman = GearmanService(self, listen.host, options.gearman_port, listen.vip)

    # ------------------------------------------------------------ properties
    @cached_property
    def id_requests(self) -> IdRequests:
        """The id service's requests, for its UDP listener and the admin port's /id/:
        made (and its modules imported, ~7 ms) when one of them first asks, not at start."""
        from haqueue.server.ids.udp import IdRequests

        return IdRequests(self, self.options.id_endpoints)

    @property
    def state(self):
        return self.replica.state

    # ------------------------------------------------------------- lifecycle
    async def run(self) -> int:
        self.loop = asyncio.get_running_loop()
        if self.options.id_port and not await self._open_id_listener():
            return 1
        # Millions of long-lived jobs: keep the cycle collector's passes
        # short whatever the backlog (gc_policy.py).
        self.collector = CollectorPolicy(self.loop)
        self.collector.start()
        self.counters.started_ms = wall_ms()
        loop = self.loop
        raise_fd_limit(self.limits)
        if self.options.tls is not None:
            self._tls_context = self.options.tls.server_context()
        self.memory = MemoryGauge(self.limits.max_memory)
        options = self.options
        self.replica = open_replica(
            # An entry holds up to MAX_BATCH_BYTES of bodies, or one body
            # bigger than that, plus the batch's framing.
            dataclasses.replace(options.replication,
                                max_entry_bytes=MAX_BATCH_BYTES + self.max_job_size + (64 << 10)),
            on_role_change=lambda role, term: loop.call_soon_threadsafe(self._role_changed, role, term),
            on_fatal=lambda msg: loop.call_soon_threadsafe(self._die, msg),
        )
        replica = self.replica
        self.disk = DiskReserve(loop, options.data_dir, self.limits.disk_reserve,
                                options.replication.journal_limit,
                                lambda: (replica.observations.last_snapshot_bytes or 0,
                                         replica.journal.file_bytes if replica.journal is not None else 0))
        self.disk.start()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.request_stop)
        loop.add_signal_handler(signal.SIGUSR1, self._enter_drain_mode)
        loop.add_signal_handler(signal.SIGHUP, self._reload_id_rules)
        if self.options.early_signals is not None:
            for signum in self.options.early_signals():
                if signum == signal.SIGUSR1:
                    self._enter_drain_mode()
                else:
                    self.request_stop()
        if self.options.admin is not None:
            from haqueue.server.admin import AdminServer

            self.admin_server = AdminServer(self, *self.options.admin, token=self.options.admin_token)
            await self.admin_server.start()
        self.replica.start()
        watcher = None
        if hasattr(self.replica, "removed_by_entry"):  # a Raft member: it may be removed (removal_watch.py)
            from haqueue.server.removal_watch import watch

            watcher = loop.create_task(watch(self))
        try:
            await self._stopped.wait()
        finally:
            if watcher is not None:
                watcher.cancel()
            await self._shutdown()
        if self.removed_line is not None:
            from haqueue.replication.replica import REMOVED_EXIT

            return REMOVED_EXIT
        return 1 if self.fatal else 0

    def request_stop(self) -> None:
        self._stopped.set()

    def removed(self, line: str) -> None:
        """This node was removed from the Raft group (removal_watch.py): stop for good."""
        self.removed_line = line
        self._stopped.set()

    def _die(self, message: str) -> None:
        self.fatal = message
        self._stopped.set()

    def _reload_id_rules(self) -> None:
        """SIGHUP: the cluster file's [[id_rules]] again (server/ids/rules.py). Every node
        keeps them for when it leads; the leader commits them now."""
        rules = id_rules.reread(self.options.config_path)
        if rules is None:
            return
        self.options.id_rules = rules
        if self.serving:
            self.loop.create_task(id_rules.commit(self, rules, self.epoch))

    def _enter_drain_mode(self) -> None:
        log.info("drain mode: new puts are refused with DRAINING")
        self.draining = True

    async def _shutdown(self) -> None:
        if self.collector is not None:
            self.collector.stop()
        if self.disk is not None:
            self.disk.stop()
        self._step_down(graceful=True)
        if self._id_listener is not None:
            self._id_listener.close()
        if self.admin_server is not None:
            await self.admin_server.stop()
        # On the loop's thread: the replica ticks on this loop (on_loop.py).
        self.replica.stop()

    # ------------------------------------------------------------ leadership
    def _role_changed(self, role: str, term: int) -> None:
        log.info("raft role: %s (term %s)", role, term)
        if role == "leader":
            self.not_leading.clear()
            if self._leader_task is None or self._leader_task.done():
                self._leader_task = self.loop.create_task(self._become_leader())
        else:
            self.not_leading.set()
            self._step_down()

    async def _become_leader(self) -> None:
        term = self.replica.term
        self.epoch = term
        self.conn_serial = 0
        self.drops.new_term()
        self.batcher = Batcher(self.replica, self.loop, self._after_entry)
        # The old leaders' connections are gone: RELEASE_ORPHANS puts their reservations
        # back, in one entry. One holding more than an entry's worth goes back first in
        # entries of REQUEUES_PER_ENTRY (as drops.py does at a close), so that no entry's
        # apply outlasts an election timeout and deposes this new leader. Read off the
        # state as applied so far: the rest of the old term's tail adds at most a few
        # entries' reserves, which RELEASE_ORPHANS takes with the others.
        for conn in self.state.holders_of_more_than(REQUEUES_PER_ENTRY):
            left = True
            while left:
                result = await self.batcher.committed((C.DROP_CONN_SOME, conn, REQUEUES_PER_ENTRY))
                if result is None or not self.replica.leads_in(term):
                    log.warning("lost leadership before serving (term %d)", term)
                    return
                left = result[1]
        result = await self.batcher.committed((C.RELEASE_ORPHANS, (), term))
        if result is None or not self.replica.leads_in(term):
            log.warning("lost leadership before serving (term %d)", term)
            return
        if not await id_rules.commit(self, self.options.id_rules, term):
            return
        self.directory = TubeDirectory(self.state.tubes)
        try:
            await self._open_listener()
        except OSError as exc:
            self._die(f"cannot listen on {self.options.listen.describe()}: {exc.strerror or exc}")
            return
        self.serving = True
        await self._listener.serve_arrived(self.loop, self._arrived_session)
        if self.gearman is not None:
            # After `serving`: a Gearman connection accepted while the VIP is being bound
            # is served, not turned away.
            try:
                await self.gearman.open()
            except OSError as exc:
                self._die(f"cannot serve Gearman on {self.gearman.host}:{self.gearman.port}: "
                          f"{exc.strerror or exc}")
                return
        log.info("leader for term %d: serving clients on %s", term, self.options.listen.describe())
        if self._id_listener is not None:
            await self._id_listener.open_vip()
        self._after_entry()

    async def _open_listener(self) -> None:
        # Held before it opens: a step-down while the VIP is being bound closes it.
        self._listener = ClientListener(self.options.listen, self._new_session, server_options(self._tls_context))
        try:
            await self._listener.open(self.loop)
        except OSError:
            self._listener = None
            raise

    async def _open_id_listener(self) -> bool:
        """The id service's own-address socket, open on every node from start to
        stop (followers answer not_leader); false, with self.fatal, if it cannot bind."""
        from haqueue.server.ids.udp import IdListener

        listen = self.options.listen
        self._id_listener = IdListener(self, self.id_requests, listen.host, self.options.id_port, listen.vip,
                                       rate=self.options.id_rate_limit)
        try:
            await self._id_listener.open()
        except OSError as exc:
            self.fatal = f"cannot serve ids on {listen.host}:{self.options.id_port}: {exc.strerror or exc}"
            return False
        log.info("id service on udp %s:%d", listen.host, self.options.id_port)
        return True

    def _new_session(self) -> Session | RefusedConnection:
        if len(self.sessions) >= self.limits.max_connections:
            self.counters.rejected_connections += 1
            if self.counters.rejected_connections & (self.counters.rejected_connections - 1) == 0:
                # Logged at the 1st, 2nd, 4th, 8th... refusal: visible, never a flood.
                log.warning("max-connections %d reached: refused %d connection(s) so far",
                            self.limits.max_connections, self.counters.rejected_connections)
            return RefusedConnection()
        return Session(self, self.next_conn_id())

    def _arrived_session(self, first_at: float | None, count: int) -> Session | RefusedConnection:
        session = self._new_session()
        if first_at is not None and type(session) is Session:
            session.arrived_early(first_at, count)
        return session

    def next_conn_id(self) -> int:
        """A connection id no other connection of any leader has: (term << 32) | serial."""
        self.conn_serial += 1
        return (self.epoch << 32) | self.conn_serial

    def _step_down(self, graceful: bool = False) -> None:
        was_serving = self.serving
        self.serving = False
        if self._leader_task is not None and not self._leader_task.done():
            self._leader_task.cancel()
        self.deadlines.cancel()
        if self._listener is not None:
            listener, self._listener = self._listener, None
            listener.close()
        if self._id_listener is not None:
            self._id_listener.close_vip()
        if "id_requests" in vars(self):  # made (cached_property) once the id service was asked
            self.id_requests.drop_blocks()
        if self.gearman is not None:
            self.gearman.close(graceful)
        for session in list(self.sessions):
            session.end(graceful)
        if self.batcher is not None:
            self.batcher.closed = True
            self.batcher.fail_pending()
        self.waiters.clear()
        self.drops.end_term()
        if was_serving:
            log.info("stopped serving clients")

    # ------------------------------------------------------------- sessions
    # (Session's host: every method and attribute a Session uses is listed in host.SessionHost.)
    def session_opened(self, session: Session) -> None:
        self.sessions.add(session)
        self.counters.total_connections += 1

    def session_closed(self, session: Session) -> None:
        self.sessions.discard(session)
        self.waiters.stop(session)
        self.dirty.discard(session)
        self.drops.forget(session)
        if not self.serving:
            return
        held = len(self.state.reservations_of(session.conn_id))
        if session.work_in_flight or held:
            self.drops.drop(self.batcher, session.conn_id, held)  # lands after what it had in flight

    def defer_until_drops_applied(self, session: Session) -> bool:
        return self.drops.defer(session)

    def unref_tube(self, name: str) -> None:
        forget = self.directory.unref(name, self.state)
        if forget and self.serving:
            self.batcher.submit((C.FORGET_TUBE, name), _ignore)

    def start_waiting(self, session: Session) -> None:
        self.waiters.start(session)

    def stop_waiting(self, session: Session) -> None:
        self.waiters.stop(session)

    def waiting_on(self, tube: str) -> int:
        return self.waiters.waiting_on(tube)

    def job_made_ready(self, tube: str) -> None:
        if self.waiters:
            self.waiters.reserve_with_put(tube)

    # ---------------------------------------------------------- after entry
    def _after_entry(self, effects: Effects | None = None) -> None:
        """Runs after each applied entry's continuations, with what the entry did:
        wake waiting reserves, forget emptied tubes, flush, arm the timer.
        Without effects (an entry whose outcome is unknown, or no entry at all)
        it only flushes and re-arms the timer from the state."""
        self.turns.release()
        if not self.serving:
            return
        if effects is None:
            next_deadline = self.state.next_deadline()
        else:
            next_deadline = effects.next_deadline
            if effects.emptied:
                state = self.state
                forget = [name for name in effects.emptied if self.directory.maybe_free(name, state)]
                for name in forget:
                    self.batcher.submit((C.FORGET_TUBE, name), _ignore)
            if effects.woken and len(self.waiters):
                self._wake_waiters()
            if effects.gearman_woken and self.gearman is not None:
                self.gearman.wake(effects.gearman_woken)
        dirty, self.dirty = self.dirty, set()
        for session in dirty:
            session.flush()
        self.deadlines.arm(next_deadline)

    def rearm(self) -> None:
        """The deadline timer fired before the state's deadline: flush, and arm again."""
        self._after_entry()

    def _wake_waiters(self) -> None:
        now = wall_ms()
        state = self.state
        self.dirty.update(self.waiters.wake(lambda tube: state.reservable(tube, now)))

    # ----------------------------------------------------------------- stats
    def stats_body(self) -> bytes:
        raft = self.replica.status()
        return server_stats(
            self.state, self.directory, self.counters, self.sessions, len(self.waiters),
            wall_ms(), self.max_job_size, self.draining,
            journal=self.replica.journal, raft=raft, limits=self.limits_report(),
        )

    def limits_report(self) -> list[tuple[str, int]]:
        """The client limits and what they did, for `stats` (haqueue-* keys)."""
        limits, counters = self.limits, self.counters
        return [
            ("max-connections", limits.max_connections),
            ("rejected-connections", counters.rejected_connections),
            ("max-tubes", limits.max_tubes),
            ("max-watched-tubes", limits.max_watched_tubes),
            ("max-memory", limits.max_memory),
            ("memory-rss", self.memory.resident() if self.memory is not None else 0),
            ("out-of-memory-replies", counters.out_of_memory_replies),
            ("output-limit-closes", counters.output_limit_closes),
            ("max-input-buffers", limits.max_input_buffers),
            ("input-buffers", self.input_budget.held),
            ("input-buffer-waits", self.input_budget.waits),
            ("input-stall-closes", self.input_budget.stall_closes),
            ("turns-yielded-to-raft", self.turns.deferred),
            ("tls", self._tls_context is not None),
        ]

    def leads_and_is_followed(self) -> bool:
        """The leader check (admin /leader): serving clients, and a majority
        answered this leader's appends within the leader fallback; false on a
        leader whose Raft is stuck (an fsync stalled for seconds), which cannot
        step down by itself."""
        return self.serving and self.replica is not None and self.replica.is_followed()

    def status(self) -> dict:
        """For the admin endpoint and `cluster status`."""
        replica = self.replica
        raft = replica.status() if replica is not None else {}
        lag = replica.follower_lag() if replica is not None else {}
        if lag:
            raft["follower_lag"] = lag
        return {
            "name": self.options.name,
            "serving": self.serving,
            "client_port_open": self._listener is not None and self._listener.is_open,
            "draining": self.draining,
            "connections": len(self.sessions),
            "internal_errors": replica.state.internal_errors if replica is not None else 0,
            **raft,
            "events": events.recent(),
        }


def _ignore(result) -> None:
    pass
