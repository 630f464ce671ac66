"""Starting a real LocalCluster for a test, and always stopping it.

`running_cluster(workdir)` starts three (`nodes=5`: five) `haqueue serve` nodes on loopback,
waits for a serving leader and, however the block ends, stops every node it
started (by PID; a SIGSTOPped node is continued first, see LocalCluster).
Ports are searched from a random base so concurrent test runs keep apart.
"""

from __future__ import annotations

import contextlib
import random
from pathlib import Path
from typing import Iterator

from haqueue.local_cluster import LocalCluster

LEADER_TIMEOUT = 15.0  # first election on a loaded 2-CPU CI machine


class NoLeader(AssertionError):
    pass


def random_base_port() -> int:
    # LocalCluster searches upward from here for ports free on all three
    # addresses. Below the kernel's ephemeral range (32768+), where outgoing
    # connections get their ports.
    return random.randrange(12000, 31000, 10)


@contextlib.contextmanager
def running_cluster(workdir: Path, serve_args=("-f0",), start: bool = True,
                    leader_timeout: float = LEADER_TIMEOUT, nodes: int = 3) -> Iterator[LocalCluster]:
    cluster = LocalCluster.create(workdir, nodes=nodes, serve_args=list(serve_args),
                                  client_port=random_base_port())
    try:
        if start:
            cluster.start()
            if cluster.leader(timeout=leader_timeout) is None:
                tails = "\n".join(f"--- {n}:\n{cluster.log_tail(n, 10)}" for n in sorted(cluster.nodes))
                raise NoLeader(f"no leader within {leader_timeout:g} s; logs in {workdir}\n{tails}")
        yield cluster
    finally:
        cluster.stop()
