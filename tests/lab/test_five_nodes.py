"""A five-node lab (`haqueue lab up --nodes 5`): the process and network faults lose nothing,
and every fault leaves the VIP on the Raft leader alone.

Five nodes hold a majority with two down. Four of the three-node lab's faults
(tests/lab/test_chaos.py): restart-all and rolling-restart walk through five
nodes, the leader's partition leaves four that must elect among themselves,
and a follower cut off from the leader still has three peers. The lab is torn
down in a finally, also when a check fails.
"""

from __future__ import annotations


import pytest

from haqueue.lab.report import format_report
from haqueue.lab.runner import run_chaos
from tests.lab.labtools import running_lab
from tests.lab.test_chaos import SEED, assert_clean, assert_vip_on_the_raft_leader

pytestmark = [pytest.mark.lab, pytest.mark.root, pytest.mark.slow]

FIVE = ["n1", "n2", "n3", "n4", "n5"]


@pytest.fixture
def five_lab():
    with running_lab(nodes=5) as the_lab:
        yield the_lab


@pytest.mark.timeout(300)
def test_five_node_lab_loses_nothing_through_process_and_network_faults(five_lab):
    lab = five_lab
    assert lab.node_ids == FIVE
    assert [m.id for m in lab.cluster.nodes] == FIVE
    # keepalived on each node advertises to the four others.
    conf = (lab.keepalived_dir / "keepalived-n3.conf").read_text()
    peers = conf.split("unicast_peer {\n", 1)[1].split("}", 1)[0].split()
    assert peers == [lab.state.node_address(n) for n in FIVE if n != "n3"]
    report = run_chaos(lab, "partition-leader,cut-follower,restart-all,rolling-restart", runs=1,
                       seed=SEED + 5, out_dir=lab.dir / "runs" / "five")
    print(format_report(report))
    assert_clean(report)
    rolling = next(f for f in report["faults"] if f["name"] == "rolling-restart")
    assert sorted(rolling["order"]) == FIVE  # every node restarted, the leader last
    assert rolling["order"][-1] == rolling["node"]
    assert_vip_on_the_raft_leader(lab)
    gone = lab.down()
    assert len(gone["processes"]) == 10  # five haqueue, five keepalived
    assert len(gone["mounts"]) == 6  # five disks and their shared mount
