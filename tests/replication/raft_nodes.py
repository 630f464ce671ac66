"""In-process three-node ReplicatedQueue clusters on loopback, for replication tests."""

from __future__ import annotations

import socket
import time

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
