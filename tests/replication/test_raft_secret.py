"""Raft traffic is encrypted with the cluster secret: a node with another secret is shut out."""

from __future__ import annotations

from tests.support.ticked import ticked_cluster


def test_a_node_with_the_wrong_secret_never_joins():
    # Ticked by hand in virtual time (tests/support/ticked.py).
    with ticked_cluster(secrets=["right", "right", "wrong"], elect=False) as cluster:
        insiders, stranger = cluster.nodes[:2], cluster.nodes[2]

        def insiders_settled() -> bool:
            leaders = [n for n in insiders if n._isLeader()]
            return len(leaders) == 1 and all(n._getLeader() == leaders[0].selfNode for n in insiders)

        cluster.run_until(insiders_settled, seconds=10 * cluster.timing.election_max, what="the insiders' leader")
        term = insiders[0].raftCurrentTerm
        # Several election timeouts in which the outsider could hear from anyone.
        cluster.run_while(lambda: stranger._getLeader() is None and not stranger._isLeader(),
                          seconds=5 * cluster.timing.election_max, what="the outsider shut out")
        assert insiders[0].raftCurrentTerm == insiders[1].raftCurrentTerm == term  # not disturbed by it
