"""The replication façade (haqueue/replication/replica.py): the one way into pysyncobj."""

from __future__ import annotations

import ast
import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from haqueue.core import commands as C
from haqueue.config.fsync_policy import NEVER
from haqueue.replication.lone import LoneReplica
from haqueue.replication.raft_node import ROLE_NAMES
from haqueue.config.replication import ReplicationSettings
from haqueue.replication.replica import Replica, ReplicaLike, _term_of, open_replica
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
    # The façade, the offline replay of a stopped node's files, and node recover's offline work.
    allowed = {"haqueue.replication.replica", "haqueue.replication.replay",
               "haqueue.replication.recover", "haqueue.replication"}
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


def test_replicas_on_a_loop_elect_a_leader_that_returns_each_entry_s_results_and_effects():
    """The Raft façade, started as the server starts it: on the running event loop
    (three members here; a cluster of one is lone.LoneReplica)."""
    roles: list[tuple[str, str, int]] = []

    async def run() -> None:
        loop = asyncio.get_running_loop()
        addresses = [f"127.0.0.1:{port}" for port in free_ports(3)]
        replicas = []
        for address in addresses:
            replicas.append(Replica(
                ReplicationSettings(address, [a for a in addresses if a != address], policy=NEVER, secret="s"),
                on_role_change=lambda role, term, address=address: roles.append((address, role, term)),
                on_fatal=lambda message: None))
        try:
            for replica in replicas:
                assert isinstance(replica, ReplicaLike)
                replica.start()
            deadline = loop.time() + 10
            while not any(r.is_leader() and r.read_lease_valid() for r in replicas):
                assert loop.time() < deadline, roles
                await asyncio.sleep(0.01)
            replica = next(r for r in replicas if r.is_leader())
            term = replica.term
            assert replica.leads_in(term) and not replica.leads_in(term + 1)
            assert replica.status()["role"] == "leader"

            done = loop.create_future()
            stamp = 1_700_000_000_000
            replica.submit(C.encode_batch(stamp, [(C.PUT, "a", 0, 0, 60_000, b"x"),
                                                  (C.PUT, "b", 0, 5_000, 60_000, b"y")]), done.set_result)
            value = await asyncio.wait_for(done, 5)
            assert value.results == [("INSERTED", 1), ("INSERTED", 2)]
            assert value.effects.woken == {"a"}  # b's job is delayed
            assert value.effects.next_deadline == stamp + 5_000
            assert sorted(replica.state.jobs) == [1, 2]
            assert set(replica.follower_lag()) == set(addresses) - {addresses[replicas.index(replica)]}
        finally:
            for replica in replicas:
                replica.stop()

    asyncio.run(run())
    assert any(role == "leader" for _, role, _ in roles)


def test_a_lone_replica_offers_everything_the_interface_names_and_always_holds_its_lease():
    lone = LoneReplica(ReplicationSettings("127.0.0.1:0", []), on_role_change=print, on_fatal=print)
    assert isinstance(lone, ReplicaLike)
    assert lone.read_lease_valid()  # nobody else can lead


def test_a_raft_node_without_partners_is_refused_a_cluster_of_one_is_a_lone_replica():
    from haqueue.replication.raft_node import ReplicatedQueue

    with pytest.raises(ValueError, match="needs partners"):
        ReplicatedQueue(ReplicationSettings("127.0.0.1:0", [], policy=NEVER))
    replica = open_replica(ReplicationSettings("127.0.0.1:0", []), on_role_change=print, on_fatal=print)
    assert isinstance(replica, LoneReplica)


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
