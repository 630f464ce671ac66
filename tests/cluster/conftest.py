"""Fixtures for real three-node clusters on loopback (haqueue/local_cluster.py).

`make_cluster(serve_args)` starts a LocalCluster in the test's tmp_path and waits
for a serving leader; every cluster it made is stopped when the test ends, pass
or fail (processes by PID only, a SIGSTOPped node is continued first). When a
test fails, the tail of each node's log is attached to the report.
"""

from __future__ import annotations

import random

import pytest

from haqueue.local_cluster import LocalCluster

LEADER_TIMEOUT = 15.0  # first election on a loaded 2-CPU CI machine


def _random_base_port() -> int:
    # LocalCluster searches upward from here for ports free on all three
    # addresses; a random start keeps concurrent test runs apart. Below the
    # kernel's ephemeral range (32768+), where outgoing connections live.
    return random.randrange(12000, 31000, 10)


@pytest.fixture
def make_cluster(tmp_path, request):
    made: list[LocalCluster] = []

    def make(serve_args=("-f0",), start: bool = True) -> LocalCluster:
        cluster = LocalCluster.create(tmp_path / f"cluster{len(made)}", nodes=3,
                                      serve_args=list(serve_args), client_port=_random_base_port())
        made.append(cluster)
        request.node._clusters = made
        if start:
            cluster.start()
            if cluster.leader(timeout=LEADER_TIMEOUT) is None:
                pytest.fail(f"no leader within {LEADER_TIMEOUT:g} s")
        return cluster

    try:
        yield make
    finally:
        for cluster in made:
            cluster.stop()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    clusters = getattr(item, "_clusters", None)
    if report.failed and clusters:
        for n, cluster in enumerate(clusters):
            for node_id in sorted(cluster.nodes):
                report.sections.append(
                    (f"cluster{n} {node_id} log tail ({report.when})", cluster.log_tail(node_id, 30)))
