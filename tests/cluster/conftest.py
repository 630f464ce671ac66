"""Fixtures for real three-node clusters on loopback (haqueue/local_cluster.py).

`make_cluster(serve_args, nodes=3)` starts a LocalCluster in the test's tmp_path and waits
for a serving leader (tests/cluster/running.py); every cluster it made is
stopped when the test ends, pass or fail. When a test fails, the tail of each
node's log is attached to the report.
"""

from __future__ import annotations

import contextlib

import pytest

from tests.cluster.running import running_cluster


@pytest.fixture
def make_cluster(tmp_path, request):
    made = []
    with contextlib.ExitStack() as stack:
        def make(serve_args=("-f0",), start: bool = True, nodes: int = 3):
            workdir = tmp_path / f"cluster{len(made)}"
            cluster = stack.enter_context(running_cluster(workdir, serve_args, start=start, nodes=nodes))
            made.append(cluster)
            return cluster

        request.node._clusters = made
        yield make
    # After every cluster test, pysyncobj must never have truncated entries a
    # follower had already applied (haqueue/replication/append_guard.py): that
    # is the window in which committed entries can be lost.
    for n, cluster in enumerate(made):
        for node_id, node in sorted(cluster.nodes.items()):
            if node.log_path is not None and node.log_path.exists():
                text = node.log_path.read_text(errors="replace")
                assert "truncating already-applied" not in text, (
                    f"cluster{n} {node_id} truncated applied entries:\n{cluster.log_tail(node_id, 30)}")


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
