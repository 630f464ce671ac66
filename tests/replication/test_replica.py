"""The replication façade (haqueue/replication/replica.py): the one way into pysyncobj."""

from __future__ import annotations

import ast
import subprocess
import sys
import threading
from pathlib import Path

from haqueue.core import commands as C
from haqueue.replication.fsync_policy import NEVER
from haqueue.replication.lone import LoneReplica
from haqueue.replication.raft_node import ROLE_NAMES
from haqueue.replication.replica import Replica, ReplicaConfig, ReplicaLike, _term_of
from tests.support.ticked import free_ports, ticked_cluster

PACKAGE = Path(__file__).resolve().parents[2] / "haqueue"
# Inside the replication package, the modules that touch pysyncobj, each for a reason
# its docstring gives.
REACHES_IN = {"pysyncobj_patches.py", "raft_node.py", "transport.py"}


def imports_of(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_only_the_replication_package_imports_pysyncobj():
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if any(name == "pysyncobj" or name.startswith("pysyncobj.") for name in imports_of(path)):
            inside = path.parent.name == "replication" and path.name in REACHES_IN
            if not inside:
                offenders.append(str(path.relative_to(PACKAGE)))
    assert offenders == []


def test_the_server_and_the_cli_reach_replication_through_the_facade_only():
    # The façade, the fsync policy it takes, and the offline replay of a stopped node's files.
    allowed = {"haqueue.replication.replica", "haqueue.replication.fsync_policy",
               "haqueue.replication.replay", "haqueue.replication"}
    offenders = []
    for folder in ("server", "cli"):
        for path in sorted((PACKAGE / folder).rglob("*.py")):
            for name in imports_of(path):
                if name.startswith("haqueue.replication") and name not in allowed:
                    offenders.append(f"{folder}/{path.name}: {name}")
    assert offenders == []


def test_another_pysyncobj_version_is_refused_with_one_clear_line():
    code = ("import pysyncobj.version as v; v.VERSION = '0.3.99'\n"
            "import haqueue.replication.pysyncobj_patches\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode != 0
    assert "haqueue needs pysyncobj 0.3.17 exactly" in out.stderr and "found 0.3.99" in out.stderr


def test_a_lone_replica_leads_and_returns_each_entry_s_results_and_effects():
    roles: list[tuple[str, int]] = []
    leading = threading.Event()

    def role_changed(role: str, term: int) -> None:
        roles.append((role, term))
        if role == "leader":
            leading.set()

    replica = Replica(ReplicaConfig(f"127.0.0.1:{free_ports(1)[0]}", [], policy=NEVER),
                      on_role_change=role_changed, on_fatal=lambda message: None)
    assert isinstance(replica, ReplicaLike)
    replica.start()
    try:
        assert leading.wait(5), roles
        term = replica.term
        assert replica.is_leader() and replica.leads_in(term) and not replica.leads_in(term + 1)
        assert replica.read_lease_valid() and replica.is_followed()
        assert replica.status()["role"] == "leader" and replica.follower_lag() == {}

        outcome: list = []
        applied_event = threading.Event()

        def applied(value) -> None:
            outcome.append(value)
            applied_event.set()

        stamp = 1_700_000_000_000
        replica.submit(C.encode_batch(stamp, [(C.PUT, "a", 0, 0, 60_000, b"x"),
                                              (C.PUT, "b", 0, 5_000, 60_000, b"y")]), applied)
        assert applied_event.wait(5)
        (value,) = outcome
        assert value.results == [("INSERTED", 1), ("INSERTED", 2)]
        assert value.effects.woken == {"a"}  # b's job is delayed
        assert value.effects.next_deadline == stamp + 5_000
        with replica.state_lock:
            assert sorted(replica.state.jobs) == [1, 2]
    finally:
        replica.stop()



def test_a_lone_replica_offers_everything_the_interface_names():
    lone = LoneReplica(ReplicaConfig("127.0.0.1:0", []), on_role_change=print, on_fatal=print)
    assert isinstance(lone, ReplicaLike)


def test_a_candidate_is_announced_with_the_term_it_stands_for():
    """pysyncobj reports the candidate state before raising the term it stands for; the
    façade's role callback names the election's term, the one the winner then leads in."""
    nodes: list = []
    announced: list[tuple[str, int]] = []

    def on_role_change(role: str) -> None:
        # Every node shares this callback; the candidate is the one whose state says so.
        node = next((n for n in nodes if ROLE_NAMES[n._SyncObj__raftState] == role), None)
        if node is not None:
            announced.append((role, _term_of(role, node.raftCurrentTerm)))

    with ticked_cluster(elect=False, on_role_change=on_role_change) as cluster:
        nodes.extend(cluster.nodes)
        cluster.run_until(cluster.settled, seconds=5, what="a leader everyone follows")
        leader = cluster.leader()
        assert ("leader", leader.raftCurrentTerm) in announced
        assert ("candidate", leader.raftCurrentTerm) in announced
