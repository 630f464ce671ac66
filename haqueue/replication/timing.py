"""Raft's timing: heartbeat, election timeouts, leader fallback, link timeouts.

Its own module so that the server and the command line can name it without
importing pysyncobj (a lone node never does: lone.py).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RaftTiming:
    """Raft timing in seconds. The defaults aim at failover well under 1.5 s."""

    heartbeat: float = 0.05  # appendEntriesPeriod
    election_min: float = 0.3  # raftMinTimeout
    election_max: float = 0.6  # raftMaxTimeout
    # A leader that has heard from no majority for this long steps down
    # (pysyncobj's default is 30 s: a partitioned leader would keep serving).
    leader_fallback: float = 0.6
    connection_timeout: float = 0.9
    connection_retry: float = 0.3
    # A follower campaigns only if it heard a majority within this long (docs/pysyncobj.md
    # D9): several heartbeats (keepalives flow every heartbeat), and less
    # than election_min, so a cut-off node stops before its first timeout.
    hear_window: float = 0.2
