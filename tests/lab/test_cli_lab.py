"""`haqueue lab`: refuses without root and without a lab, in one line, before touching anything."""

from __future__ import annotations

import os

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
