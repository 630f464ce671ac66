"""`haqueue lab`: refuses without root and without a lab, in one line, before touching anything."""

from __future__ import annotations

import os
import re
import shutil

import pytest

from haqueue.cli.main import main


def run(capsys, *args: str) -> tuple[int, str]:
    code = main(list(args))
    return code, capsys.readouterr().err


@pytest.mark.parametrize("args", [["up"], ["down"], ["status"], ["chaos", "--scenario", "kill-leader"]])
def test_every_lab_command_needs_root(monkeypatch, capsys, tmp_path, args):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    code, err = run(capsys, "lab", *args, "--dir", str(tmp_path / "lab"))
    assert code == 1
    assert err == "haqueue: haqueue lab needs root (it creates network namespaces and runs keepalived)\n"
    assert not (tmp_path / "lab").exists()


def test_status_without_a_lab_says_so(capsys, tmp_path):
    if os.geteuid() != 0:
        pytest.skip("needs root to get past the root check")
    code, err = run(capsys, "lab", "status", "--dir", str(tmp_path))
    assert code == 1
    assert err == f"haqueue: no lab is up (no state in {tmp_path})\n"


def test_unknown_scenario_is_one_line(capsys, tmp_path):
    code, err = run(capsys, "lab", "chaos", "--scenario", "meteor", "--dir", str(tmp_path))
    assert code == 1
    assert err.startswith("haqueue: --scenario: unknown 'meteor' (one of: kill-leader,")
    assert err.count("\n") == 1


def test_a_scenario_list_names_its_unknown_member_in_one_line(capsys, tmp_path):
    code, err = run(capsys, "lab", "chaos", "--scenario", "eio-leader,meteor", "--dir", str(tmp_path))
    assert code == 1
    assert err.startswith("haqueue: --scenario: unknown 'meteor' (one of: kill-leader,")
    assert "disk-full-leader" in err and "cut-leader-to-follower" in err
    assert err.count("\n") == 1


def test_help_names_every_scenario(capsys):
    from haqueue.lab.scenarios import CHOICES

    assert main(["lab", "chaos", "--help"]) == 0
    text = re.sub(r"-\s+", "-", capsys.readouterr().out)  # click wraps lines at hyphens
    assert all(name in text for name in CHOICES), text


@pytest.mark.lab
@pytest.mark.root
@pytest.mark.parametrize("nodes", [3, 5])
def test_up_status_down_show_the_leader_holding_the_vip_and_leave_nothing(capsys, nodes):
    from tests.lab.labtools import lab_dir, namespaces_with, require_root_tools

    require_root_tools()
    directory, prefix = lab_dir()
    try:
        code, err = run(capsys, "lab", "up", "--dir", str(directory), "--prefix", prefix, "--nodes", str(nodes))
        assert code == 0, err
        code = main(["lab", "status", "--dir", str(directory)])
        out = capsys.readouterr().out
        assert code == 0
        ids = [f"n{k}" for k in range(1, nodes + 1)]
        rows = [line.split() for line in out.splitlines() if line.split()[:1] and line.split()[0] in ids]
        assert [r[0] for r in rows] == ids
        assert [r[2] for r in rows] == [f"198.18.0.{10 + k}" for k in range(1, nodes + 1)]
        holders = [r for r in rows if r[-1] == "yes"]
        assert len(holders) == 1 and holders[0][4] == "leader", out
        assert sorted(r[4] for r in rows) == ["follower"] * (nodes - 1) + ["leader"], out
        code = main(["lab", "up", "--dir", str(directory), "--prefix", prefix])
        assert code == 1
        assert capsys.readouterr().err == (
            f"haqueue: a lab is already up in {directory}; run `haqueue lab down` first\n")
    finally:
        code = main(["lab", "down", "--dir", str(directory)])
        out = capsys.readouterr().out
        shutil.rmtree(directory, ignore_errors=True)
    assert code == 0
    assert out == (f"stopped {2 * nodes} processes, removed {nodes + 2} namespaces, "
                   f"unmounted {nodes} data disks and their shared mount\n")
    assert namespaces_with(prefix) == []


def test_scenario_counts_plan_that_many_per_round_and_a_bad_count_is_one_line(capsys, tmp_path):
    import random

    from haqueue.lab.runner import plan

    faults = plan("kill-leader*5,pause-leader*2", 2, random.Random(3))
    assert sorted(faults) == ["kill-leader"] * 10 + ["pause-leader"] * 4
    assert faults != sorted(faults)  # shuffled within its rounds
    code, err = run(capsys, "lab", "chaos", "--scenario", "kill-leader*0", "--dir", str(tmp_path))
    assert code == 1
    assert err == "haqueue: --scenario: 'kill-leader*0': the count after * must be a whole number above 0\n"
