"""The lab's network: isolated from the root namespace, and removable after a crash."""

from __future__ import annotations

import shutil
import socket

import pytest
from tests.lab.labtools import lab_dir, namespaces_with, require_root_tools

from haqueue.lab import topology
from haqueue.lab.lab import Lab, wait_for
from haqueue.lab.topology import LabState

pytestmark = [pytest.mark.root]

FIVE = ["n1", "n2", "n3", "n4", "n5"]


def test_subnet_outside_the_benchmark_range_is_refused():
    with pytest.raises(ValueError, match="198.18.0.0/15"):
        topology.check_subnet("192.168.1")
    topology.check_subnet("198.19.7")


def test_node_nk_has_host_10_plus_k_and_other_ids_are_refused():
    state = LabState(dir="/nonexistent")
    assert [state.node_address(n) for n in ("n1", "n3", "n5", "n39")] == [
        "198.18.0.11", "198.18.0.13", "198.18.0.15", "198.18.0.49"]
    for bad in ("n0", "n40", "x1", "n", "n1a"):
        with pytest.raises(ValueError, match="expected n1 to n39"):
            state.node_address(bad)


@pytest.fixture
def built():
    require_root_tools()
    directory, prefix = lab_dir()
    directory.mkdir()
    state = LabState(dir=str(directory), prefix=prefix)
    try:
        topology.build(state, FIVE)  # the five-node lab's network (`lab up --nodes 5`)
        yield state
    finally:
        topology.destroy(state)
        shutil.rmtree(directory, ignore_errors=True)


def reachable(state: LabState, address: str) -> bool:
    """From the client namespace: does `address` answer (a closed port answers RST)?"""

    def probe() -> bool:
        try:
            socket.create_connection((address, 9), timeout=0.3).close()
        except ConnectionRefusedError:
            return True
        except OSError:
            return False
        return True

    return topology.in_namespace(state.client_ns, probe)


def test_namespaces_reach_each_other_over_the_bridge_and_have_no_default_route(built):
    for ns in [built.node_ns(n) for n in FIVE] + [built.client_ns]:
        assert not topology.routes_have_default(ns), ns
    assert all(reachable(built, built.node_address(n)) for n in FIVE)
    assert not reachable(built, "198.19.255.1")  # nothing beyond the lab's /24


def test_a_cut_link_takes_the_node_off_the_bridge_and_healing_restores_it(built):
    topology.set_link(built.node_ns("n1"), up=False)
    assert not reachable(built, built.node_address("n1"))
    topology.set_link(built.node_ns("n1"), up=True)
    # The veth's carrier and the client's ARP entry take a moment to come back.
    assert wait_for(lambda: reachable(built, built.node_address("n1")), 5)


def test_a_node_added_after_the_build_is_on_the_bridge_and_recorded_for_destroy(built):
    # A node joining a running lab (a membership change) gets its namespace the same way.
    topology.add_node(built, "n6")
    assert reachable(built, built.node_address("n6"))
    assert built.node_ns("n6") in LabState.load(built.dir).namespaces


def test_down_removes_what_a_crashed_up_left_behind():
    require_root_tools()
    directory, prefix = lab_dir()
    directory.mkdir()
    try:
        state = LabState(dir=str(directory), prefix=prefix)
        topology.build(state, ["n1", "n2"])  # then "crash": nothing cleaned up
        assert len(namespaces_with(prefix)) == 4
        gone = Lab(directory).down()  # a new process would read only the state file
        assert sorted(gone["namespaces"]) == sorted(f"{prefix}-{n}" for n in ("sw", "n1", "n2", "client"))
        assert namespaces_with(prefix) == []
    finally:
        for name in namespaces_with(prefix):
            topology.netns.remove(name)
        shutil.rmtree(directory, ignore_errors=True)
