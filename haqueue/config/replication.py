"""The Raft settings a node runs with: one value the replica takes whole.

`ReplicationSettings` is built once, from the command line or the cluster file
(haqueue/cli/serve.py, node_start.py), carried by the server's NodeOptions and
handed whole to the replica (haqueue/replication/replica.py), which hands it on
to raft_node.ReplicatedQueue, the one place pysyncobj's SyncObjConf is built
from it (or to lone.LoneReplica, which needs no Raft). `RaftTiming` is its
clock: heartbeat, election timeouts, leader fallback, link timeouts.

Plain values, importing no pysyncobj: the server and the command line name them
without paying for Raft (a lone node never imports it).
"""

from __future__ import annotations

from dataclasses import dataclass

from haqueue.config.fsync_policy import DEFAULT_FSYNC_MS, FsyncPolicy


@dataclass(frozen=True)
class RaftTiming:
    """Raft timing in seconds. The defaults aim at failover well under 1.5 s."""

    # appendEntriesPeriod. What an idle cluster costs, a wake-up of every node each
    # (docs/benchmarks.md: idle CPU per node); under load appends flow anyway. At least
    # four fit in election_min, and twice it within hear_window: an idle leader reads its
    # heartbeats' answers a heartbeat late, its lease still held (docs/pysyncobj.md D36).
    heartbeat: float = 0.075
    election_min: float = 0.3  # raftMinTimeout
    election_max: float = 0.6  # raftMaxTimeout
    # A leader that has heard from no majority for this long steps down
    # (pysyncobj's default is 30 s: a partitioned leader would keep serving).
    leader_fallback: float = 0.6
    connection_timeout: float = 0.9
    connection_retry: float = 0.3
    # A follower campaigns only if it heard a majority within this long (docs/pysyncobj.md
    # D9): several heartbeats (the leader's, or without one the keepalives that flow
    # every heartbeat, D35), and less than election_min, so a cut-off node stops
    # before its first timeout.
    hear_window: float = 0.2


@dataclass(frozen=True)
class ReplicationSettings:
    """Where this node's Raft endpoint is, who its peers are, and how it keeps its log."""

    self_address: str  # this node's Raft endpoint, host:port
    partners: list[str]  # the other members' endpoints; none: a cluster of one (lone.py)
    data_dir: str | None = None  # None: in memory
    policy: FsyncPolicy = FsyncPolicy(DEFAULT_FSYNC_MS)
    secret: str | None = None  # encrypts Raft traffic (the cluster file's secret)
    timing: RaftTiming | None = None  # None: RaftTiming's defaults
    # Journal bytes past the last snapshot that make a new one due (-s); None: never (-n).
    journal_limit: int | None = None
    # The largest entry the leader will log: pysyncobj sends anything smaller in one piece
    # (docs/pysyncobj.md D13). The server sets it from its batch size and max_job_size.
    max_entry_bytes: int = 8 << 20
