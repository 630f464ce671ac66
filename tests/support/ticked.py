"""In-process Raft nodes ticked by hand, in virtual time: replication logic without the wall clock.

`ticked_cluster()` builds three ReplicatedQueue nodes on loopback (ephemeral
ports, real pysyncobj sockets) and never starts them on a loop. Instead
`TickedCluster.round()` moves a virtual clock on by one `step` and ticks every
node once, in turn, without waiting on its sockets (`tick(0)`). The virtual
clock is the one pysyncobj and raft_node share (pysyncobj_patches.use_clock)
and the read lease's clock, so heartbeats, election timeouts, connection
timeouts and leases all run out after a number of rounds, whatever the
machine's load. A message sent over loopback is readable by the time the
send returns, so it is read in the same round or the next one.

Tests therefore wait for logic by rounds: `run_until(predicate, seconds=…)`
ticks until the predicate holds and fails if it does not within that much
virtual time; `run(seconds=…)` lets virtual time pass (several election
timeouts in which nothing must happen) in milliseconds of real time. A node
left out of the rounds (`paused`) is a node whose loop is stuck (a long fsync).
"""

from __future__ import annotations

import math
import os
import socket
from contextlib import contextmanager
from typing import Callable, Iterator

from haqueue.replication import pysyncobj_patches
from haqueue.replication import transport as raft_transport
from haqueue.config.fsync_policy import NEVER
from haqueue.config.replication import RaftTiming, ReplicationSettings
from haqueue.replication.raft_node import ReplicatedQueue

STEP = 0.005  # virtual seconds per round: a tenth of the default heartbeat


def free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


class VirtualClock:
    """Seconds that pass only when a test says so."""

    def __init__(self, start: float = 1_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class TickedCluster:
    def __init__(self, nodes: list[ReplicatedQueue], clock: VirtualClock, timing: RaftTiming,
                 step: float, secrets: list[str], node_options: dict) -> None:
        self.nodes = nodes
        self._secrets = dict(zip(nodes, secrets))
        self._node_options = node_options
        self.clock = clock
        self.timing = timing
        self.step = step
        self.paused: set[ReplicatedQueue] = set()  # not ticked: their loop is stuck
        self.rounds = 0  # rounds run so far
        # Tick as the loop does for messages (ReplicatedQueue.tick's light ticks, which
        # do the periodic checks once the last full tick is FULL_PERIOD old), not always
        # fully. HAQUEUE_TICKED_LIGHT=1 runs every ticked test that way.
        self.light = os.environ.get("HAQUEUE_TICKED_LIGHT") == "1"

    def rounds_in(self, seconds: float) -> int:
        return max(1, math.ceil(seconds / self.step - 1e-9))

    def round(self) -> None:
        """Move the clock on one step, then tick every node that is not paused, once."""
        self.clock.advance(self.step)
        self.rounds += 1
        for node in self.nodes:
            if node not in self.paused:
                node.tick(0, light=self.light)

    def run(self, *, seconds: float) -> None:
        """Let `seconds` of virtual time pass, ticking all the while."""
        for _ in range(self.rounds_in(seconds)):
            self.round()

    def run_until(self, predicate: Callable[[], object], *, seconds: float, what: str = "the condition") -> float:
        """Tick until `predicate()` holds; fail if it does not within `seconds` of virtual
        time. Returns the virtual seconds it took."""
        budget = self.rounds_in(seconds)
        for used in range(budget + 1):
            if predicate():
                return used * self.step
            if used < budget:
                self.round()
        raise AssertionError(f"{what}: not within {seconds} s of virtual time ({budget} rounds)")

    def run_while(self, invariant: Callable[[], object], *, seconds: float, what: str = "the invariant") -> None:
        """Tick for `seconds` of virtual time, checking `invariant()` after every round."""
        assert invariant(), f"{what} did not hold to begin with"
        for used in range(self.rounds_in(seconds)):
            self.round()
            assert invariant(), f"{what} broke after {(used + 1) * self.step:.3f} s of virtual time"

    def restart(self, node: ReplicatedQueue) -> ReplicatedQueue:
        """Stop `node` (its sockets close) and put a fresh one at its address in its place."""
        node.stop()
        address = node.selfNode.address
        partners = [n.selfNode.address for n in self.nodes if n is not node]
        secret = self._secrets.pop(node)
        fresh = raft_node(address, partners, data_dir=None, policy=NEVER, secret=secret,
                          timing=self.timing, **self._node_options)
        self._secrets[fresh] = secret
        fresh.transport.tryGetReady()
        self.nodes[self.nodes.index(node)] = fresh
        return fresh

    def until_snapshots(self, node: ReplicatedQueue, count: int, *, seconds: float = 1.0) -> None:
        """Tick until `node` has taken `count` snapshots in all. A writer runs in real
        time: before each round, wait for the running one's exit (an event: waitid
        without reaping it), so that the node sees it at that round, with the
        virtual clock stopped meanwhile."""
        def taken() -> bool:
            pid = node.snapshot_writer.pid
            if pid:
                try:
                    os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
                except ChildProcessError:
                    pass  # reaped already
            return node.observations.snapshots >= count

        self.run_until(taken, seconds=seconds, what=f"{count} snapshot(s) taken")

    # ------------------------------------------------------------ views
    def leader(self) -> ReplicatedQueue:
        """The one leader that every node follows (fails otherwise)."""
        assert self.settled(), self.describe()
        return next(n for n in self.nodes if n._isLeader())

    def followers(self) -> list[ReplicatedQueue]:
        return [n for n in self.nodes if not n._isLeader()]

    def settled(self) -> bool:
        """One leader, of one term, followed by every node."""
        leaders = [n for n in self.nodes if n._isLeader()]
        return (len(leaders) == 1 and all(n._getLeader() == leaders[0].selfNode for n in self.nodes)
                and len({n.raftCurrentTerm for n in self.nodes}) == 1)

    def describe(self) -> list:
        return [(n.selfNode.address, n.status()["role"], n.raftCurrentTerm, n.status()["leader"])
                for n in self.nodes]

    def caught_up(self) -> bool:
        """Every node has applied everything the leader committed."""
        commit = max(n.raftCommitIndex for n in self.nodes)
        return all(n.raftLastApplied >= commit for n in self.nodes)

    # ------------------------------------------------------------ writes
    def submit(self, node: ReplicatedQueue, entry: bytes) -> list:
        """Submit `entry` on `node`; the returned list receives (applied, error) once it is done."""
        outcome: list = []
        node.submit(entry, lambda applied, error: outcome.append((applied, error)))
        return outcome

    def commit(self, node: ReplicatedQueue, entry: bytes, *, seconds: float = 1.0) -> tuple:
        """Submit `entry` on `node` and tick until its outcome comes back: (applied, error)."""
        outcome = self.submit(node, entry)
        self.run_until(lambda: outcome, seconds=seconds, what="the entry's outcome")
        return outcome[0]


def raft_node(address: str, partners: list[str], *, on_role_change=None, on_fatal=None,
              **settings) -> ReplicatedQueue:
    """A ReplicatedQueue at `address`; `settings` are ReplicationSettings' other fields."""
    return ReplicatedQueue(ReplicationSettings(address, partners, **settings),
                           on_role_change=on_role_change, on_fatal=on_fatal)


@contextmanager
def ticked_cluster(timing: RaftTiming | None = None, count: int = 3, *, secrets: list[str] | None = None,
                   elect: bool = True, step: float = STEP, data_root: str | None = None,
                   addresses: list[str] | None = None, policy=NEVER, node_dir: str = "node{n}",
                   prepare: Callable[[ReplicatedQueue], None] = lambda node: None,
                   **node_options) -> Iterator[TickedCluster]:
    """`count` nodes in memory on loopback (or with journals under `data_root`,
    one directory each, named by `node_dir`), ticked by hand in virtual time; by
    default ticked until they have one leader that everyone follows. The same
    `addresses` and `data_root` build the same cluster again (a restart of every
    node); `prepare(node)` runs before any node listens. `node_options` go to
    every node (raft_node: a ReplicationSettings field such as journal_limit, or a callback)."""
    timing = timing or RaftTiming()
    clock = VirtualClock()
    addresses = addresses or [f"127.0.0.1:{p}" for p in free_ports(count)]
    secrets = secrets or ["s"] * len(addresses)
    saved_lease_clock = raft_transport.lease_clock
    nodes: list[ReplicatedQueue] = []
    with pysyncobj_patches.use_clock(clock):
        raft_transport.lease_clock = clock  # the lease's clock too (module-level name, read at each call)
        try:
            for n, (address, secret) in enumerate(zip(addresses, secrets)):
                data_dir = os.path.join(data_root, node_dir.format(n=n)) if data_root is not None else None
                nodes.append(raft_node(address, [a for a in addresses if a != address], data_dir=data_dir,
                                       policy=policy, secret=secret, timing=timing, **node_options))
            for node in nodes:
                prepare(node)
                node.transport.tryGetReady()  # everyone listening before anyone connects
            cluster = TickedCluster(nodes, clock, timing, step, secrets, node_options)
            if elect:
                cluster.run_until(cluster.settled, seconds=10 * timing.election_max, what="a leader everyone follows")
            yield cluster
        finally:
            raft_transport.lease_clock = saved_lease_clock
            for node in nodes:
                node.stop()


def drop_messages(receivers, from_senders) -> list:
    """Drop every message a node of `receivers` gets from a node of `from_senders`,
    where pysyncobj receives it (the TCP links stay up); returns what heal() needs."""
    senders = {n.selfNode.address for n in from_senders}
    saved = []
    for node in receivers:
        transport = node.transport
        deliver = transport._onMessageReceivedCallback

        def filtered(sender, message, deliver=deliver):
            if sender.address not in senders:
                deliver(sender, message)

        transport._onMessageReceivedCallback = filtered
        saved.append((transport, deliver))
    return saved


def heal(saved) -> None:
    for transport, deliver in reversed(saved):
        transport._onMessageReceivedCallback = deliver


def filter_at(node: ReplicatedQueue, keep: Callable) -> Callable[[], None]:
    """Deliver to `node` only the messages for which keep(sender, message) holds;
    returns the function that restores delivery."""
    transport = node.transport
    deliver = transport._onMessageReceivedCallback

    def filtered(sender, message):
        if keep(sender, message):
            deliver(sender, message)

    transport._onMessageReceivedCallback = filtered
    return lambda: setattr(transport, "_onMessageReceivedCallback", deliver)
