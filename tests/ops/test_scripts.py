"""The deployable scripts in ops/: lint, run for real in namespaces, and install into a DESTDIR.

Every script in ops/ and every shell-sourced file the host generators render
passes `bash -n` and shellcheck. install.sh runs end to end into a DESTDIR
(packages, users and services are the only steps it skips there), and
systemd-analyze verifies the units it placed. The LVS real-server side is
rendered by gen-lvs and gen-systemd (tests/ops/test_lvs.py runs it), not shipped.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.ops.ops_host_testlib import REPO, run

OPS = REPO / "ops"
SCRIPTS = sorted(p for p in OPS.iterdir() if p.suffix == ".sh")
VAGRANT_CLUSTER = REPO / "examples" / "vagrant-cluster.toml"

needs_shellcheck = pytest.mark.skipif(shutil.which("shellcheck") is None,
                                      reason="shellcheck is not installed (scripts/setup installs it)")


def test_ops_has_the_deploy_scripts():
    assert {p.name for p in SCRIPTS} >= {"install.sh", "render-examples.sh"}


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_script_is_strict_executable_bash_that_parses(script):
    text = script.read_text()
    assert text.startswith(("#!/usr/bin/env bash\n", "#!/bin/bash\n"))
    assert "\nset -euo pipefail\n" in text
    assert script.stat().st_mode & 0o111, f"{script.name} is not executable"
    subprocess.run(["bash", "-n", str(script)], check=True)


@needs_shellcheck
@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_script_passes_shellcheck(script):
    result = subprocess.run(["shellcheck", str(script)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout


@needs_shellcheck
def test_rendered_ifcfg_files_are_clean_shell(tmp_path):
    """RHEL's network scripts source ifcfg files: they must be valid, quiet shell."""
    out = tmp_path / "out"
    result = run("gen-bonding", "--config", "tests/ops/golden_host/bonded-cluster.toml", "--node", "n1",
                 "--slaves", "eth1,eth2", "--mode", "802.3ad", "--format", "ifcfg", "-o", str(out))
    assert result.exit_code == 0, result.output
    files = sorted(out.rglob("ifcfg-*"))
    assert len(files) == 3
    for f in files:
        subprocess.run(["bash", "-n", str(f)], check=True)
        # SC2034: the variables are read by the sourcing script, not here.
        lint = subprocess.run(["shellcheck", "--shell=bash", "--exclude=SC2034", str(f)],
                              capture_output=True, text=True)
        assert lint.returncode == 0, lint.stdout


def one_line_failure(result: subprocess.CompletedProcess, fragment: str) -> None:
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and fragment in lines[0], result.stderr


@pytest.mark.parametrize(
    "script, args, fragment",
    [
        ("install.sh", [], "--config FILE is required"),
        ("install.sh", ["--config", "/nonexistent.toml", "--id", "n1"], "no such file"),
        ("install.sh", ["--bogus"], "unknown argument '--bogus'"),
    ],
)
def test_bad_arguments_fail_with_one_line_before_changing_anything(script, args, fragment):
    result = subprocess.run([str(OPS / script), *args], capture_output=True, text=True, timeout=20)
    one_line_failure(result, fragment)


# -- install.sh into a DESTDIR ---------------------------------------------------

@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> Path:
    """What keepalived/ holds, rendered now by the repository's own regenerate script."""
    rendered = tmp_path_factory.mktemp("examples") / "rendered"
    subprocess.run([str(OPS / "render-examples.sh"), str(rendered)], check=True, capture_output=True,
                   env={**os.environ, "PYTHON": sys.executable}, timeout=60)
    return rendered


def install(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(OPS / "install.sh"), "--python", sys.executable, *args],
                          capture_output=True, text=True, timeout=60, cwd=REPO)


def files_under(root: Path) -> dict[str, int]:
    return {"/" + str(p.relative_to(root)): p.stat().st_mode & 0o777 for p in root.rglob("*") if p.is_file()}


@pytest.mark.parametrize(
    "member, role, expected",
    [
        ("n1", "node", {
            "/etc/keepalived/keepalived.conf": 0o644,
            "/etc/keepalived/haqueue-leader-check.sh": 0o755,
            "/etc/sysctl.d/60-haqueue-node.conf": 0o644,
            "/etc/systemd/system/haqueue.service": 0o644,
            "/etc/systemd/system/keepalived.service.d/haqueue.conf": 0o644,
        }),
        ("n2", "realserver", {
            "/etc/sysctl.d/60-haqueue-realserver.conf": 0o644,
            "/usr/local/sbin/lvs-realserver.sh": 0o755,
            "/etc/systemd/system/haqueue-lvs-realserver.service": 0o644,
            "/etc/systemd/system/haqueue.service": 0o644,
        }),
        ("d1", "director", {
            "/etc/keepalived/keepalived.conf": 0o644,
            "/usr/local/sbin/lvs-director.sh": 0o755,
            "/etc/modprobe.d/haqueue-ip_vs.conf": 0o644,
            "/etc/sysctl.d/60-haqueue-director.conf": 0o644,
            "/etc/modules-load.d/haqueue-ip_vs.conf": 0o644,
            "/etc/systemd/system/keepalived.service.d/haqueue.conf": 0o644,
        }),
    ],
)
def test_install_places_each_rendered_file_where_its_header_says(tmp_path, rendered, member, role, expected):
    root = tmp_path / "root"
    result = install("--config", str(VAGRANT_CLUSTER), "--id", member, "--role", role,
                     "--rendered", str(rendered), "--destdir", str(root))
    assert result.returncode == 0, result.stderr
    placed = files_under(root)
    for path, mode in expected.items():
        assert placed.get(path) == mode, (path, placed)
    # The cluster file holds the Raft secret.
    assert placed["/etc/haqueue/cluster.toml"] == 0o640
    if role == "realserver":
        # The directors hold the VIP: no keepalived and no keepalived drop-in here.
        assert not any("keepalived" in path for path in placed)
    if role == "director":
        # No haqueue here: only keepalived's drop-in (after the network, Restart=always).
        assert [p for p in placed if p.startswith("/etc/systemd/")] == [
            "/etc/systemd/system/keepalived.service.d/haqueue.conf"]
        dropin = (root / "etc/systemd/system/keepalived.service.d/haqueue.conf").read_text()
        assert f"on director {member} (" in dropin and "Restart=always" in dropin
    if role != "realserver":
        conf = (root / "etc/keepalived/keepalived.conf").read_text()
        assert f"on {member} (" in conf.splitlines()[2] or f"on director {member} (" in conf.splitlines()[2]
    else:
        # This node's rendered real-server script, and the unit that runs it before haqueue.
        script = (root / "usr/local/sbin/lvs-realserver.sh").read_text()
        assert f"on queue node {member}\n" in script and "VIP=192.168.56.100\n" in script
        unit = (root / "etc/systemd/system/haqueue-lvs-realserver.service").read_text()
        assert "ExecStart=/usr/local/sbin/lvs-realserver.sh start\n" in unit


SYSTEM_UNITS = Path("/usr/lib/systemd/system")


@pytest.mark.skipif(shutil.which("systemd-analyze") is None or not SYSTEM_UNITS.is_dir(),
                    reason="systemd is not installed")
def test_installed_realserver_units_pass_systemd_analyze_verify(tmp_path):
    cluster = tmp_path / "tun.toml"
    cluster.write_text(VAGRANT_CLUSTER.read_text().replace('mode = "dr"', 'mode = "tun"'))
    root = tmp_path / "root"
    result = install("--config", str(cluster), "--id", "n1", "--role", "realserver", "--destdir", str(root))
    assert result.returncode == 0, result.stderr
    units = sorted((root / "etc/systemd/system").glob("haqueue*.service"))
    assert [u.name for u in units] == ["haqueue-lvs-realserver.service", "haqueue.service"]
    script = root / "usr/local/sbin/lvs-realserver.sh"
    assert script.stat().st_mode & 0o111 and "TUN mode" in script.read_text()
    # verify wants every Exec program under the root; with --destdir install.sh
    # installs no venv, so stand in for the haqueue entry point, and for the
    # system's kill that ExecReload runs.
    for program in ("usr/local/bin/haqueue", "bin/kill"):
        stand_in = root / program
        stand_in.parent.mkdir(parents=True, exist_ok=True)
        stand_in.write_text("#!/bin/sh\n")
        stand_in.chmod(0o755)
    # The targets and slices the units depend on, from this machine's systemd.
    shutil.copytree(SYSTEM_UNITS, root / SYSTEM_UNITS.relative_to("/"), symlinks=True)
    for unit in units:
        verify = subprocess.run(["systemd-analyze", "verify", f"--root={root}", str(unit)],
                                capture_output=True, text=True, timeout=30)
        assert verify.returncode == 0, verify.stderr
        assert verify.stderr.strip() == "", verify.stderr


def test_install_renders_here_when_no_rendered_directory_is_given(tmp_path):
    root = tmp_path / "root"
    result = install("--config", str(VAGRANT_CLUSTER), "--id", "n3", "--role", "node", "--destdir", str(root))
    assert result.returncode == 0, result.stderr
    conf = (root / "etc/keepalived/keepalived.conf").read_text()
    assert "192.168.56.13" in conf


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["--id", "zz"], "--id zz: not in"),
        (["--id", "d1", "--role", "node"], "--role node does not fit d1"),
        (["--id", "n1", "--role", "router"], "--role 'router': choose node, realserver or director"),
        (["--id", "n1", "--rendered", "/nonexistent"], "--rendered /nonexistent: not a directory"),
    ],
)
def test_install_refuses_a_wrong_member_or_role_in_one_line(tmp_path, args, fragment):
    result = install("--config", str(VAGRANT_CLUSTER), "--destdir", str(tmp_path / "root"), *args)
    one_line_failure(result, fragment)
    assert not (tmp_path / "root").exists()


def test_install_dry_run_lists_packages_and_services_without_doing_them(tmp_path):
    result = install("--config", str(VAGRANT_CLUSTER), "--id", "d2", "--dry-run")
    assert result.returncode == 0, result.stderr
    planned = [line for line in result.stdout.splitlines() if line.startswith("+ ")]
    assert any("apt-get install" in line and "keepalived" in line and "curl" in line for line in planned)
    assert any("apt-get install" in line and "ipvsadm" in line for line in planned)  # a director
    assert any(line.startswith("+ install -D -m 0640") and "/etc/haqueue/cluster.toml" in line for line in planned)

    def at(fragment: str) -> int:
        return next(i for i, line in enumerate(planned) if fragment in line)

    # ip_vs is loaded after its modprobe.d options are in place, and sysctl after that.
    assert at("/etc/modprobe.d/haqueue-ip_vs.conf") < at("lvs-director.sh start") < at("sysctl -q -e -p")
    assert planned[-1] == "+ systemctl restart keepalived.service"
