"""The leader logs a follower that fell behind and caught up (haqueue/replication/observed.py)."""

from __future__ import annotations

import signal
import time

from tests.cluster.clients import client_for


def test_leader_logs_a_follower_catching_up_after_a_pause(make_cluster):
    cluster = make_cluster(("-f0", "-V"))
    leader = cluster.leader()
    follower = next(m for m in cluster.spec.nodes if m.id != leader.id)
    cluster.signal_node(follower.id, signal.SIGSTOP)
    try:
        client = client_for(cluster, leader.id)
        try:
            until = time.monotonic() + 2.0  # puts for longer than FOLLOWER_BEHIND_SECONDS
            while time.monotonic() < until:
                client.put(b"x")
        finally:
            client.close()
    finally:
        cluster.signal_node(follower.id, signal.SIGCONT)
    log_path = cluster.nodes[leader.id].log_path
    deadline = time.monotonic() + 20
    # The paused follower's line (on a loaded machine the other one may lag and catch up too).
    caught_up = f"follower caught up: {follower.address}:"
    while caught_up not in log_path.read_text(errors="replace"):
        assert time.monotonic() < deadline, cluster.log_tail(leader.id, 30)
        time.sleep(0.05)  # polling the leader's log, bounded by the deadline
    line = next(l for l in log_path.read_text().splitlines() if caught_up in l)
    assert "s behind" in line
