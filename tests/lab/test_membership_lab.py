"""The lab's membership scenarios (issue 27): replace a node, grow from three to five and
shrink back, each with the leader killed during the change, under the chaos workload
through the VIP; lost 0, double reservations 0, and the VIP on the Raft leader alone.

The lab starts with three members (n1..n3). replace-node takes the leader's host
away for good and brings in n4 at a new address; grow-3-to-5 adds n5 and n6;
shrink-5-to-3 removes the leader and a follower. Every change is made with the real
`haqueue cluster add-node/remove-node` (haqueue/lab/members.py), and the lab's
keepalived configs are rendered again and reloaded after each.
"""

from __future__ import annotations


import pytest

from haqueue.lab.report import format_report
from haqueue.lab.runner import run_chaos
from tests.lab.labtools import running_lab
from tests.lab.test_chaos import SEED, assert_clean, assert_vip_on_the_raft_leader

pytestmark = [pytest.mark.lab, pytest.mark.root, pytest.mark.slow]


@pytest.fixture
def lab():
    with running_lab() as the_lab:
        yield the_lab


@pytest.mark.timeout(400)
def test_replace_grow_and_shrink_with_leader_kills_lose_nothing(lab):
    report = run_chaos(lab, "replace-node,grow-3-to-5,shrink-5-to-3", runs=1, seed=SEED + 27,
                       out_dir=lab.dir / "runs" / "membership")
    text = format_report(report)
    print(text)
    assert_clean(report)
    by_name = {f["name"]: f for f in report["faults"]}
    assert list(by_name) == ["replace-node", "grow-3-to-5", "shrink-5-to-3"], text
    replaced = by_name["replace-node"]
    assert replaced["node"] == replaced["leader"]  # the first replacement takes the leader's host
    assert replaced["node"] not in replaced["members"] and "n4" in replaced["members"], text
    assert len(replaced["members"]) == 3
    assert len(by_name["grow-3-to-5"]["members"]) == 5
    assert len(by_name["shrink-5-to-3"]["members"]) == 3
    assert all(f["members_agree"] for f in report["faults"]), text  # `haqueue cluster members` exits 0
    assert all(s["vip_kept"] for f in report["faults"] for s in f["steps"] if "vip_kept" in s), text
    for f in report["faults"]:
        for step in f["steps"]:
            # After every step, a leader served and the VIP reached it.
            assert step["leader_after_s"] <= 15.0 and step["vip_after_s"] is not None, text
    # The lab's cluster file, its members and the Raft group all say the same three.
    final = by_name["shrink-5-to-3"]["members"]
    assert lab.node_ids == final and [n.id for n in lab.cluster.nodes] == final
    leader = lab.leader()
    assert sorted(lab.node_status(leader)["members"]) == sorted(n.raft_endpoint for n in lab.cluster.nodes)
    assert_vip_on_the_raft_leader(lab)
