"""`haqueue ops gen-*` through the real CLI entry point: files, stdout, headers, one-line errors."""

from __future__ import annotations

import filecmp
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from haqueue.cli.main import main
from haqueue.config.cluster import load_cluster
from haqueue.ops import keepalived, render

REPO = Path(__file__).resolve().parents[2]
CONFIG = "examples/vagrant-cluster.toml"
GENERATORS = ("gen-keepalived", "gen-lvs", "gen-systemd")


@pytest.fixture(autouse=True)
def at_repo_root(monkeypatch):
    # Headers name the cluster file as typed; type it from the repository root.
    monkeypatch.chdir(REPO)


def run(capsys, *args: str) -> tuple[int, str, str]:
    status = main(list(args))
    out, err = capsys.readouterr()
    return status, out, err


def test_ops_help_lists_every_command_with_one_line_help(capsys):
    status, out, _ = run(capsys, "ops", "--help")
    assert status == 0
    commands = out.split("Commands:\n", 1)[1].splitlines()
    listed = {line.split()[0]: line.split(None, 1)[1] for line in commands if line.strip()}
    for name in GENERATORS:
        assert name in listed and listed[name].strip()
        assert not listed[name].endswith("..."), f"{name}: help cut short in the listing"
    # The other half of the group (cli/ops_host.py).
    for name in ("gen-sysctl", "gen-bonding", "check"):
        assert name in listed and listed[name].strip()


@pytest.mark.parametrize("generator", GENERATORS)
def test_stdout_and_directory_output_are_the_same_bytes(capsys, tmp_path, generator):
    status, printed, _ = run(capsys, "ops", generator, "--config", CONFIG, "-o", "-")
    assert status == 0
    status, _, err = run(capsys, "ops", generator, "--config", CONFIG, "-o", str(tmp_path))
    assert status == 0
    files = sorted(p for p in tmp_path.rglob("*") if p.is_file())
    assert err.splitlines() == [f"wrote {p}" for p in files]
    assert printed == "\n".join(p.read_text() for p in files)
    assert printed.count(render.HEADER_TITLE) == len(files)


@pytest.mark.parametrize("generator", GENERATORS)
def test_same_command_renders_identical_output_twice(capsys, generator):
    first = run(capsys, "ops", generator, "--config", CONFIG, "-o", "-")
    second = run(capsys, "ops", generator, "--config", CONFIG, "-o", "-")
    assert first == second


def test_header_records_content_options_in_declaration_order_but_not_output(capsys):
    status, out, _ = run(capsys, "ops", "gen-lvs", "--mode", "tun", "-o", "-", "--node", "d1", "--config", CONFIG)
    assert status == 0
    assert f"# made by: haqueue ops gen-lvs --config {CONFIG} --node d1 --mode tun\n" in out
    assert re.search(r"\d{4}-\d{2}-\d{2}|\d{2}:\d{2}:\d{2}", out) is None  # no timestamps


def test_default_output_is_the_current_directory_and_scripts_are_executable(capsys, tmp_path, monkeypatch):
    config = str(REPO / CONFIG)
    monkeypatch.chdir(tmp_path)
    status, _, _ = run(capsys, "ops", "gen-keepalived", "--config", config, "--node", "n1")
    assert status == 0
    assert sorted(os.listdir(tmp_path)) == [keepalived.SCRIPT_NAME, "keepalived-n1.conf"]
    assert (tmp_path / keepalived.SCRIPT_NAME).stat().st_mode & 0o777 == 0o755
    assert (tmp_path / "keepalived-n1.conf").stat().st_mode & 0o777 == 0o644


def test_cli_output_matches_the_renderer_called_directly(capsys):
    status, out, _ = run(capsys, "ops", "gen-keepalived", "--config", CONFIG, "--node", "n3", "-o", "-")
    cluster = load_cluster(CONFIG)
    files = keepalived.render(cluster, "n3", f"haqueue ops gen-keepalived --config {CONFIG} --node n3")
    assert status == 0 and out == "\n".join(f.text for f in sorted(files, key=lambda f: f.name))


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["gen-keepalived", "--config", "nope.toml"], "haqueue: nope.toml: no such file"),
        (["gen-systemd", "--config", CONFIG, "--node", "n9"],
         f"haqueue: {CONFIG}: no node 'n9' (nodes: n1, n2, n3)"),
        (["gen-lvs", "--config", CONFIG, "--mode", "nat"],
         f"haqueue: {CONFIG}: lvs.nat_gateway: missing: NAT mode needs the real servers' gateway address"),
        (["gen-lvs", "--config", CONFIG, "--mode", "fullnat"], "haqueue ops gen-lvs: Invalid value for '--mode'"),
        (["gen-keepalived"], "haqueue ops gen-keepalived: Missing option '--config'"),
    ],
)
def test_bad_input_is_one_line_and_non_zero(capsys, args, expected):
    status, out, err = run(capsys, "ops", *args)
    assert status != 0 and out == ""
    assert len(err.splitlines()) == 1 and err.startswith(expected), err
    assert "Traceback" not in err


def test_invalid_cluster_file_is_one_line_naming_the_key(capsys, tmp_path):
    bad = tmp_path / "c.toml"
    bad.write_text((REPO / CONFIG).read_text().replace('address = "192.168.56.12"', 'address = "10.0.0.12"'))
    status, _, err = run(capsys, "ops", "gen-keepalived", "--config", str(bad), "-o", "-")
    assert status == 1
    assert err == f"haqueue: {bad}: nodes[1].address: 10.0.0.12 is outside the VIP's subnet 192.168.56.0/24\n"


def test_unwritable_output_is_one_line(capsys, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    status, _, err = run(capsys, "ops", "gen-systemd", "--config", CONFIG, "-o", str(blocker / "sub"))
    assert status == 1 and len(err.splitlines()) == 1 and "cannot write" in err


def test_rendered_examples_in_keepalived_dir_are_what_the_generators_produce_now(tmp_path):
    env = dict(os.environ, PYTHON=sys.executable)
    subprocess.run(["bash", str(REPO / "ops" / "render-examples.sh"), str(tmp_path)], check=True, env=env,
                   capture_output=True)
    committed = REPO / "keepalived"
    for sub in ("collocated", "lvs-dr", "systemd"):
        cmp = filecmp.dircmp(committed / sub, tmp_path / sub)
        assert not (cmp.left_only or cmp.right_only), f"{sub}: {cmp.left_only} {cmp.right_only}"
        for name in cmp.common_files:
            assert (committed / sub / name).read_text() == (tmp_path / sub / name).read_text(), (
                f"keepalived/{sub}/{name} is stale: run ops/render-examples.sh"
            )
