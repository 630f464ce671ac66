"""The lab's membership helpers without a lab: node ids are never reused, the membership
scenarios run by name only, and one run at the wrong size says so in one line."""

from __future__ import annotations

import random

import pytest

from haqueue.lab import member_scenarios, members
from haqueue.lab.runner import plan, unknown
from haqueue.lab.scenarios import CHOICES, MEMBERSHIP
from haqueue.lab.lab import Lab, LabError


def lab_with(tmp_path, nodes: list[str], namespaces: list[str] = ()) -> Lab:
    lab = Lab(tmp_path / "lab", prefix="hqm")
    lab.state.nodes = list(nodes)
    lab.state.namespaces = ["hqm-sw", *namespaces, "hqm-client"]
    return lab


def test_next_id_skips_every_id_a_removed_node_left_a_namespace_for(tmp_path):
    assert members.next_id(lab_with(tmp_path, ["n1", "n2", "n3"])) == "n4"
    # n4 joined and left (its namespace stays until lab down), n1 was replaced by n5.
    lab = lab_with(tmp_path, ["n2", "n3", "n5"], ["hqm-n1", "hqm-n2", "hqm-n3", "hqm-n4", "hqm-n5"])
    assert members.next_id(lab) == "n6"


def test_membership_scenarios_run_by_name_only_never_in_mix_or_all():
    assert set(MEMBERSHIP) == {"replace-node", "grow-3-to-5", "shrink-5-to-3"}
    assert all(name in CHOICES for name in MEMBERSHIP)
    assert unknown("grow-3-to-5,shrink-5-to-3,replace-node*2") == []
    assert plan("grow-3-to-5,shrink-5-to-3", 2, random.Random(1)) == ["grow-3-to-5", "shrink-5-to-3"] * 2
    rng = random.Random(7)
    drawn = set(plan("mix", 300, rng)) | set(plan("all", 1, rng))
    assert not drawn & set(MEMBERSHIP)


@pytest.mark.parametrize(("scenario", "nodes", "expected"), [
    ("grow_3_to_5", ["n1", "n2", "n3", "n4", "n5"], "grow-3-to-5 needs a lab of 3 members; this one has 5 "
                                                     "(n1, n2, n3, n4, n5)"),
    ("shrink_5_to_3", ["n1", "n2", "n3"], "shrink-5-to-3 needs a lab of 5 members; this one has 3 (n1, n2, n3)"),
])
def test_a_size_changing_scenario_on_the_wrong_size_is_one_line_before_doing_anything(
        tmp_path, scenario, nodes, expected):
    lab = lab_with(tmp_path, nodes)
    with pytest.raises(LabError) as caught:
        getattr(member_scenarios, scenario)(lab, random.Random(1))
    assert str(caught.value) == expected
    assert lab.state.nodes == nodes and not lab.state.processes
