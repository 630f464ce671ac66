"""Gearman on a real three-node cluster answers as gearmand 1.1.20 does (issue 28).

The differential scripts of what issue 28 found different (tests/gearman/
test_gearman_differential.py, ISSUE_28) run in turn against one gearmand and
against the leader of one three-node cluster, through the VIP, and each script's
transcript must be the same. Both servers keep what the earlier scripts left (the
functions they named, their jobs), so the admin tables of later scripts compare
that too.
"""

from __future__ import annotations

import pytest

from haqueue.local_cluster import free_port_on_all
from tests.cluster.test_gearman_failover import VIP, connect
from tests.gearman.test_gearman_differential import ISSUE_28, World
from tests.support.gearman import gearmand

pytestmark = pytest.mark.timeout(180)


def transcript(script, port: int, host: str) -> list:
    world = World(port, host)
    try:
        script(world)
    finally:
        world.close()
    return world.transcript


def test_a_three_node_clusters_leader_answers_the_issue_28_scripts_as_gearmand_does(make_cluster):
    import time

    port = free_port_on_all(["127.0.0.11", "127.0.0.12", "127.0.0.13", VIP], 32000 - 1000)
    make_cluster(["-f0", "--gearman-port", str(port)])
    connect(port, time.monotonic() + 10).close()  # the leader serves Gearman on the VIP
    with gearmand() as reference:
        for script in ISSUE_28:
            theirs = transcript(script, reference.port, "127.0.0.1")
            ours = transcript(script, port, VIP)
            assert ours == theirs, script.__name__
