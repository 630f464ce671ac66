"""Links between followers stay usable through quiet periods (failover speed, issue 3).

Two followers never talk to each other while a leader is healthy. pysyncobj
drops a connection on the first send after `connectionTimeout` without
reading anything, so a follower's first request_vote after a leader dies
would be lost and the election would need a second timeout round (measured:
failover ~1 s instead of ~0.5 s). ReplicatedQueue keeps every link alive.
"""

from __future__ import annotations

import time

from pysyncobj.tcp_connection import CONNECTION_STATE

from haqueue.replication.raft_node import RaftTiming
from tests.replication.raft_nodes import running_cluster


def test_follower_to_follower_link_survives_a_quiet_period_longer_than_the_connection_timeout():
    timing = RaftTiming()
    with running_cluster(timing) as nodes:
        a, b = [n for n in nodes if not n._isLeader()]
        time.sleep(timing.connection_timeout * 2)  # nothing to replicate: only heartbeats flow

        transport = a._SyncObj__transport
        to_b = next(node for node in transport._connections if node.address == b.selfNode.address)
        # What a candidate does first: send to its peer. The link must carry it.
        assert transport.send(to_b, {"type": "haqueue-probe"})
        assert transport._connections[to_b].state == CONNECTION_STATE.CONNECTED
