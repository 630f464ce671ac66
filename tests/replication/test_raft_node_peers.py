"""Links between followers stay usable through quiet periods (failover speed, issue 3).

Two followers never talk to each other while a leader is healthy. pysyncobj
drops a connection on the first send after `connectionTimeout` without
reading anything, so a follower's first request_vote after a leader dies
would be lost and the election would need a second timeout round (measured:
failover ~1 s instead of ~0.5 s). ReplicatedQueue keeps every link alive.
Nodes ticked by hand in virtual time (tests/support/ticked.py).
"""

from __future__ import annotations

import gc
import weakref

import haqueue.replication.pysyncobj_patches  # noqa: F401  (pysyncobj imported safely first)
from pysyncobj.tcp_connection import CONNECTION_STATE

from tests.support.ticked import ticked_cluster


def test_follower_to_follower_link_survives_a_quiet_period_longer_than_the_connection_timeout():
    with ticked_cluster() as cluster:
        a, b = cluster.followers()
        cluster.run(seconds=cluster.timing.connection_timeout * 2)  # nothing to replicate: only heartbeats flow

        transport = a.transport
        to_b = next(node for node in transport._connections if node.address == b.selfNode.address)
        # What a candidate does first: send to its peer. The link must carry it.
        assert transport.send(to_b, {"type": "haqueue-probe"})
        assert transport._connections[to_b].state == CONNECTION_STATE.CONNECTED


def test_a_dropped_incoming_link_is_freed_by_reference_counting():
    # pysyncobj wires an accepted connection to itself through its callbacks;
    # once down it must not need the cycle collector, which the server keeps
    # from walking frozen objects (haqueue/server/gc_policy.py).
    with ticked_cluster() as cluster:
        accepted = None
        for acceptor in cluster.nodes:
            transport = acceptor.transport
            for peer_node, conn in transport._connections.items():
                if conn not in transport._outgoing:
                    accepted = (acceptor, peer_node, conn)
                    break
            if accepted:
                break
        assert accepted, "no node holds an accepted connection"
        acceptor, peer_node, conn = accepted
        gone = weakref.ref(conn)
        del conn, accepted
        peer = next(n for n in cluster.nodes if n.selfNode.address == peer_node.address)
        gc.disable()
        try:
            cluster.restart(peer)  # its side closes: the acceptor sees the link go down
            # The restarted peer connects again, replacing the dead link.
            cluster.run_until(lambda: acceptor.transport._connections.get(peer_node) not in (None, gone()),
                              seconds=2, what="the restarted peer's new link")
            # pysyncobj's own poller kept mapping a dead link's fd to it until a
            # new socket reused the number; on_loop.EpollPoller forgets it when
            # pysyncobj unsubscribes, so nothing but a cycle could keep it alive.
            assert gone() is None, "the dead connection is kept alive by a cycle or by the poller"
        finally:
            gc.enable()
