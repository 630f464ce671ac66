"""In-process three-node ReplicatedQueue clusters on loopback, for replication tests."""

from __future__ import annotations

import socket
import time
from contextlib import contextmanager

from haqueue.replication.fsync_policy import NEVER
from haqueue.replication.raft_node import RaftTiming, ReplicatedQueue


def free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def wait_for(predicate, timeout: float) -> bool:
    """Poll `predicate` until it holds or `timeout` passes (bounded; 10 ms steps)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return False


def make_nodes(timing: RaftTiming | None = None, count: int = 3) -> list[ReplicatedQueue]:
    """`count` unstarted nodes that know each other, in memory, with a shared secret."""
    addresses = [f"127.0.0.1:{p}" for p in free_ports(count)]
    return [ReplicatedQueue(a, [b for b in addresses if b != a], data_dir=None, policy=NEVER,
                            secret="s", timing=timing or RaftTiming()) for a in addresses]


@contextmanager
def running_cluster(timing: RaftTiming | None = None, count: int = 3):
    """`count` started nodes with one leader that everyone follows; stopped on exit."""
    nodes = make_nodes(timing, count)
    try:
        for node in nodes:
            node.start()
        assert wait_for(lambda: sum(n._isLeader() for n in nodes) == 1
                        and all(n._getLeader() is not None for n in nodes), 10), "no stable leader"
        yield nodes
    finally:
        for node in nodes:
            node.stop()


def drop_messages(receivers, from_senders) -> list:
    """Drop every message a node of `receivers` gets from a node of `from_senders`,
    where pysyncobj receives it (the TCP links stay up); returns what heal() needs."""
    senders = {n.selfNode.address for n in from_senders}
    saved = []
    for node in receivers:
        transport = node._SyncObj__transport
        deliver = transport._onMessageReceivedCallback

        def filtered(sender, message, deliver=deliver):
            if sender.address not in senders:
                deliver(sender, message)

        transport._onMessageReceivedCallback = filtered
        saved.append((transport, deliver))
    return saved


def heal(saved) -> None:
    for transport, deliver in saved:
        transport._onMessageReceivedCallback = deliver
