"""The deployable scripts in ops/: lint, run for real in namespaces, and install into a DESTDIR.

Every script in ops/ and every shell-sourced file the host generators render
passes `bash -n` and shellcheck. realserver-arp.sh and tunnel.sh run inside a
network namespace; install.sh runs end to end into a DESTDIR (packages, users
and services are the only steps it skips there), and systemd-analyze verifies
the units it placed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.ops.ops_host_testlib import (
    NO_SYSCTL,
    NO_SYSCTL_REASON,
    NOT_ROOT,
    NOT_ROOT_REASON,
    REPO,
    add_veth,
    in_netns,
    ipr,
    netns,
    ops_in_netns,
    run,
)

OPS = REPO / "ops"
SCRIPTS = sorted(p for p in OPS.iterdir() if p.suffix == ".sh")
UNITS = sorted(p for p in OPS.iterdir() if p.suffix == ".service")
VAGRANT_CLUSTER = REPO / "examples" / "vagrant-cluster.toml"
VIP = "198.18.0.100"

needs_root = pytest.mark.skipif(NOT_ROOT, reason=NOT_ROOT_REASON)
needs_shellcheck = pytest.mark.skipif(shutil.which("shellcheck") is None,
                                      reason="shellcheck is not installed (scripts/setup installs it)")


def test_ops_has_the_deploy_scripts():
    assert {p.name for p in SCRIPTS} >= {"install.sh", "realserver-arp.sh", "tunnel.sh"}


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
        ("realserver-arp.sh", [], "usage: realserver-arp.sh up|down|status VIP"),
        ("realserver-arp.sh", ["up", "192.168.56.100/24"], "is not an IPv4 address"),
        ("realserver-arp.sh", ["sideways", "192.168.56.100"], "usage:"),
        ("tunnel.sh", ["up", "192.168.56.100"], "usage: tunnel.sh up|down VIP DEV [BASE_MTU]"),
        ("tunnel.sh", ["up", "192.168.56.100", "lo", "70000"], "BASE_MTU '70000' must be"),
        ("tunnel.sh", ["up", "192.168.56.100", "nosuchdev0"], "no interface 'nosuchdev0'"),
        ("install.sh", [], "--config FILE is required"),
        ("install.sh", ["--config", "/nonexistent.toml", "--id", "n1"], "no such file"),
        ("install.sh", ["--bogus"], "unknown argument '--bogus'"),
    ],
)
def test_bad_arguments_fail_with_one_line_before_changing_anything(script, args, fragment):
    result = subprocess.run([str(OPS / script), *args], capture_output=True, text=True, timeout=20)
    one_line_failure(result, fragment)


# -- realserver-arp.sh and tunnel.sh, for real, in a namespace ---------------------

def lo_addresses(ns: str) -> set[str]:
    with ipr(ns) as ip:
        idx = ip.link_lookup(ifname="lo")[0]
        return {f"{a.get('address')}/{a['prefixlen']}" for a in ip.get_addr(index=idx, family=2)}


@needs_root
@pytest.mark.skipif(NO_SYSCTL, reason=NO_SYSCTL_REASON)
def test_realserver_arp_puts_the_vip_on_lo_arp_quiet_and_ops_check_agrees(tmp_path):
    cluster = tmp_path / "cluster.toml"
    cluster.write_text(
        f'[cluster]\nname = "t"\nvip = "{VIP}/24"\nsecret = "s"\n'
        '[[nodes]]\nid = "n1"\naddress = "198.18.0.11"\ninterface = "eth1"\npriority = 2\n'
        '[[nodes]]\nid = "n2"\naddress = "198.18.0.12"\ninterface = "eth1"\npriority = 1\n'
        '[[directors]]\nid = "d1"\naddress = "198.18.0.2"\ninterface = "eth1"\npriority = 2\n'
    )
    script = str(OPS / "realserver-arp.sh")
    with netns() as ns:
        add_veth(ns, "eth1", "198.18.0.11/24")
        assert in_netns(ns, [script, "status", VIP]).returncode == 1
        for _ in range(2):  # idempotent
            up = in_netns(ns, [script, "up", VIP])
            assert up.returncode == 0, up.stderr
        assert f"{VIP}/32" in lo_addresses(ns)
        status = in_netns(ns, [script, "status", VIP])
        assert status.returncode == 0, status.stdout
        report = ops_in_netns(ns, "check", "--config", str(cluster), "--json")
        rows = {r["check"]: r for r in json.loads(report.stdout)["rows"]}
        assert rows[f"vip {VIP}"]["status"] == "OK"
        for key in ("all.arp_ignore", "lo.arp_ignore", "all.arp_announce", "lo.arp_announce"):
            assert rows[f"sysctl net.ipv4.conf.{key}"]["status"] == "OK", rows
        down = in_netns(ns, [script, "down", VIP])
        assert down.returncode == 0, down.stderr
        assert f"{VIP}/32" not in lo_addresses(ns)
        assert in_netns(ns, [script, "status", VIP]).returncode == 1


def mtu(ns: str, ifname: str) -> int:
    with ipr(ns) as ip:
        return ip.get_links(ifname=ifname)[0].get("mtu")


@needs_root
@pytest.mark.skipif(NO_SYSCTL, reason=NO_SYSCTL_REASON)
def test_tunnel_lowers_the_mtu_by_the_ipip_header_or_refuses_without_ipip():
    script = str(OPS / "tunnel.sh")
    with netns() as ns:
        add_veth(ns, "eth1", "198.18.0.11/24")
        assert mtu(ns, "eth1") == 1500
        up = in_netns(ns, [script, "up", VIP, "eth1"])
        with ipr(ns) as ip:
            has_tunl0 = bool(ip.link_lookup(ifname="tunl0"))
        if up.returncode == 0:
            assert has_tunl0
            assert mtu(ns, "eth1") == 1480
            assert "advertised MSS 1440" in up.stdout
            assert in_netns(ns, ["cat", "/proc/sys/net/ipv4/conf/tunl0/rp_filter"]).stdout.strip() == "0"
            assert in_netns(ns, [script, "up", VIP, "eth1"]).returncode == 0
            assert mtu(ns, "eth1") == 1480  # computed from the base, not lowered twice
        else:
            # This kernel has no ipip: the script says so and changes nothing.
            one_line_failure(up, "no tunl0: this kernel has no ipip module")
            assert not has_tunl0 and mtu(ns, "eth1") == 1500
        down = in_netns(ns, [script, "down", VIP, "eth1"])
        assert down.returncode == 0, down.stderr
        assert mtu(ns, "eth1") == 1500


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
            "/usr/local/lib/haqueue/realserver-arp.sh": 0o755,
            "/etc/systemd/system/haqueue-realserver.service": 0o644,
            "/etc/haqueue/realserver.env": 0o644,
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
        env = (root / "etc/haqueue/realserver.env").read_text()
        assert "HAQUEUE_VIP=192.168.56.100\n" in env and "HAQUEUE_TUNNEL_DEV=eth1\n" in env


SYSTEM_UNITS = Path("/usr/lib/systemd/system")


@pytest.mark.skipif(shutil.which("systemd-analyze") is None or not SYSTEM_UNITS.is_dir(),
                    reason="systemd is not installed")
def test_installed_realserver_units_pass_systemd_analyze_verify(tmp_path):
    cluster = tmp_path / "tun.toml"
    cluster.write_text(VAGRANT_CLUSTER.read_text().replace('mode = "dr"', 'mode = "tun"'))
    root = tmp_path / "root"
    result = install("--config", str(cluster), "--id", "n1", "--role", "realserver", "--destdir", str(root))
    assert result.returncode == 0, result.stderr
    units = sorted((root / "etc/systemd/system").glob("haqueue-*.service"))
    assert [u.name for u in units] == ["haqueue-realserver.service", "haqueue-tunnel.service"]
    assert (root / "usr/local/lib/haqueue/tunnel.sh").stat().st_mode & 0o111
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
