"""gen-systemd: golden units, `systemd-analyze verify` on them, and the start-up wait actually waiting."""

from __future__ import annotations

import http.server
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from haqueue.config.cluster import parse_cluster
from haqueue.ops import lvs, systemd
from tests.ops.golden_tools import case_cluster, case_config_arg, check_golden

CASES = ("vagrant", "tuned")
KEEPALIVED_UNIT = Path("/lib/systemd/system/keepalived.service")


def rendered(case: str, node_id: str | None = None):
    cluster = case_cluster(case)
    return cluster, systemd.render(cluster, node_id, f"haqueue ops gen-systemd --config {case_config_arg(case)}")


def text_of(files, name: str) -> str:
    return next(f.text for f in files if f.name == name)


@pytest.mark.parametrize("case", CASES)
def test_rendered_units_match_golden(case):
    _, files = rendered(case)
    check_golden("systemd", case, files)


def verify(unit: Path, unit_path: Path | None = None) -> list[str]:
    env = None
    if unit_path is not None:
        env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "SYSTEMD_UNIT_PATH": f"{unit_path}:"}
    proc = subprocess.run(
        ["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, env=env, timeout=60
    )
    lines = [line for line in (proc.stdout + proc.stderr).splitlines() if line.strip()]
    assert proc.returncode == 0 or lines
    return lines


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
@pytest.mark.parametrize("case", CASES)
def test_every_unit_and_dropin_passes_systemd_analyze_verify(case, tmp_path):
    cluster, files = rendered(case)
    # verify insists that ExecStart's program exists: point it at the haqueue
    # this test runs with (the rest of each file is the golden text).
    real = shutil.which("haqueue") or sys.executable
    for node in cluster.nodes:
        root = tmp_path / node.id
        (root / "keepalived.service.d").mkdir(parents=True)
        unit = root / "haqueue.service"
        unit.write_text(text_of(files, systemd.unit_file(node)).replace(cluster.deploy.haqueue_bin, real))
        assert verify(unit) == [], node.id
        if not KEEPALIVED_UNIT.exists():
            pytest.skip("keepalived.service is not installed to verify the drop-in against")
        shutil.copy(KEEPALIVED_UNIT, root / "keepalived.service")
        (root / "keepalived.service.d" / "haqueue.conf").write_text(text_of(files, systemd.dropin_file(node)))
        assert verify(root / "keepalived.service", unit_path=root) == [], node.id


@pytest.mark.skipif(shutil.which("systemd-analyze") is None or not KEEPALIVED_UNIT.exists(),
                    reason="systemd-analyze or keepalived.service is not installed")
def test_every_director_dropin_passes_systemd_analyze_verify(tmp_path):
    cluster, files = rendered("vagrant")
    assert cluster.directors
    for director in cluster.directors:
        root = tmp_path / director.id
        (root / "keepalived.service.d").mkdir(parents=True)
        shutil.copy(KEEPALIVED_UNIT, root / "keepalived.service")
        dropin = text_of(files, systemd.director_dropin_file(director))
        assert "Restart=always" in dropin and "After=network-online.target" in dropin
        assert "haqueue.service" not in dropin  # a director runs no haqueue
        # verify insists that ExecStartPre's program exists (the rest is the golden text).
        dropin = dropin.replace(lvs.DIRECTOR_SCRIPT_PATH, shutil.which("true"))
        (root / "keepalived.service.d" / "haqueue.conf").write_text(dropin)
        assert verify(root / "keepalived.service", unit_path=root) == [], director.id


def test_a_director_gets_keepalived_with_the_lvs_config_and_the_director_script_first():
    """gen-systemd covers the directors: keepalived (which reads the gen-lvs config at
    /etc/keepalived/keepalived.conf) restarted always, lvs-director.sh before it starts."""
    cluster, files = rendered("vagrant")
    lvs_files = {f.name: f.text for f in lvs.render(cluster, None, None, "x")}
    for director in cluster.directors:
        dropin = text_of(files, systemd.director_dropin_file(director))
        assert "install as: /etc/systemd/system/keepalived.service.d/haqueue.conf on director" in dropin
        assert f"ExecStartPre={lvs.DIRECTOR_SCRIPT_PATH} start\n" in dropin
        assert "Restart=always\n" in dropin
        # The script the drop-in runs and the config keepalived reads are what gen-lvs installs there.
        assert f"install as: {lvs.DIRECTOR_SCRIPT_PATH} on both directors" in lvs_files[lvs.DIRECTOR_SCRIPT]
        conf = lvs_files[f"keepalived-{director.id}.conf"]
        assert "install as: /etc/keepalived/keepalived.conf on director " + director.id in conf


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
def test_every_real_server_unit_runs_the_lvs_script_before_haqueue_and_passes_verify(tmp_path):
    cluster, files = rendered("vagrant")
    lvs_files = {f.name: f.text for f in lvs.render(cluster, None, None, "x")}
    for node in cluster.nodes:
        text = text_of(files, systemd.realserver_unit_file(node))
        assert f"ExecStart={lvs.REALSERVER_SCRIPT_PATH} start\n" in text
        assert f"ExecStop={lvs.REALSERVER_SCRIPT_PATH} stop\n" in text
        assert "Before=haqueue.service\n" in text and "RemainAfterExit=yes\n" in text
        assert "install as: /etc/systemd/system/haqueue-lvs-realserver.service on " + node.id in text
        assert (f"install as: {lvs.REALSERVER_SCRIPT_PATH} on {node.id}"
                in lvs_files[lvs.realserver_script(node)])
        unit = tmp_path / f"{node.id}-haqueue-lvs-realserver.service"
        unit.write_text(text.replace(lvs.REALSERVER_SCRIPT_PATH, shutil.which("true")))
        assert verify(unit) == [], node.id


def test_without_directors_no_real_server_unit_is_rendered():
    text = open(case_cluster("vagrant").source).read().split("[[directors]]")[0]
    cluster = parse_cluster(text, source="c.toml")
    assert not cluster.directors
    names = [f.name for f in systemd.render(cluster, None, "x")]
    assert "haqueue-n1.service" in names
    assert not any(name.startswith("haqueue-lvs-realserver-") for name in names)


def test_a_director_id_renders_only_that_directors_dropin():
    _, files = rendered("vagrant", "d2")
    assert [f.name for f in files] == ["keepalived-haqueue-director-d2.conf"]


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
def test_verify_reports_a_bad_setting(tmp_path):
    # The check above is only worth something if it can fail.
    cluster, files = rendered("vagrant", "n1")
    unit = tmp_path / "haqueue.service"
    text = text_of(files, "haqueue-n1.service").replace(cluster.deploy.haqueue_bin, sys.executable)
    unit.write_text(text.replace("Restart=always", "Restart=sometimes"))
    assert any("restart specifier" in line for line in verify(unit))


def test_both_services_restart_always():
    cluster, files = rendered("vagrant")
    for node in cluster.nodes:
        assert "\nRestart=always\n" in text_of(files, systemd.unit_file(node))
        assert "\nRestart=always\n" in text_of(files, systemd.dropin_file(node))


def test_haqueue_unit_runs_the_node_hardened_with_only_its_data_dir_writable():
    cluster, files = rendered("vagrant", "n2")
    unit = text_of(files, "haqueue-n2.service")
    assert (
        "ExecStart=/usr/local/bin/haqueue serve --config /etc/haqueue/cluster.toml --node n2 -b /var/lib/haqueue/n2\n"
        in unit
    )
    assert "StateDirectory=haqueue/n2\n" in unit and "ReadWritePaths" not in unit
    for setting in ("NoNewPrivileges=yes", "ProtectSystem=strict", "PrivateTmp=yes", "User=haqueue",
                    "CapabilityBoundingSet=\n"):
        assert setting in unit


def test_data_dir_outside_var_lib_becomes_read_write_path():
    _, files = rendered("tuned", "beta")
    unit = text_of(files, "haqueue-beta.service")
    assert "ReadWritePaths=/srv/haqueue/beta\n" in unit and "StateDirectory" not in unit
    assert "ExecStart=/opt/haqueue/bin/haqueue serve --config /etc/haqueue/jobs-eu.toml --node beta" in unit


@pytest.mark.parametrize(("key", "port"), [("client_port", 300), ("id_port", 200), ("gearman_port", 730)])
def test_a_port_below_1024_gets_only_net_bind_service(key, port):
    cluster = parse_cluster(
        f'[cluster]\nname = "x"\nvip = "192.0.2.100/24"\nsecret = "s"\n{key} = {port}\n'
        '[[nodes]]\nid = "n1"\naddress = "192.0.2.11"\ninterface = "eth1"\npriority = 100\n'
    )
    unit = systemd.render(cluster, None, "x")[0].text
    assert f"Port(s) {port} below 1024" in unit
    assert "CapabilityBoundingSet=CAP_NET_BIND_SERVICE\nAmbientCapabilities=CAP_NET_BIND_SERVICE\n" in unit


def test_keepalived_dropin_orders_after_haqueue_and_delays_start():
    _, files = rendered("tuned", "alpha")
    dropin = text_of(files, "keepalived-haqueue-alpha.conf")
    assert "After=haqueue.service\nWants=haqueue.service\n" in dropin
    assert "http://10.20.1.1:8081/health" in dropin
    assert "ExecStartPre=/bin/sleep 5\n" in dropin


class _Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802
        self.send_response(200 if self.path == "/health" else 404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_start_up_wait_returns_as_soon_as_haqueue_answers_health():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Health)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        cluster = parse_cluster(
            '[cluster]\nname = "x"\nvip = "127.0.0.100/8"\nsecret = "s"\n'
            '[[nodes]]\nid = "n1"\naddress = "127.0.0.1"\ninterface = "lo"\npriority = 100\n'
            f"admin_port = {server.server_address[1]}\n"
        )
        dropin = systemd.render(cluster, None, "x")[1].text
        line = next(x for x in dropin.splitlines() if x.startswith("ExecStartPre=/bin/sh -c"))
        script = re.fullmatch(r"ExecStartPre=/bin/sh -c '(.*)'", line).group(1).replace("$$", "$")
        start = time.monotonic()
        proc = subprocess.run(["/bin/sh", "-c", script], capture_output=True, text=True, timeout=10)
        assert proc.returncode == 0 and proc.stderr == ""
        assert time.monotonic() - start < 2
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("case", CASES)
def test_reload_sends_the_signal_that_rereads_the_id_rules(case):
    # `systemctl reload haqueue` must reach the node as SIGHUP, the signal the server
    # re-reads its [[id_rules]] on (server/ids/rules.py; proved end to end by
    # tests/server/test_ids_udp.py::test_sighup_rereads_the_rules_and_the_leader_commits_them).
    cluster, files = rendered(case)
    for node in cluster.nodes:
        unit = text_of(files, f"haqueue-{node.id}.service")
        assert "ExecReload=/bin/kill -HUP $MAINPID" in unit.splitlines()


def test_the_unit_does_not_restart_a_node_removed_from_the_cluster():
    from haqueue.replication.removal import REMOVED_EXIT

    assert systemd.REMOVED_EXIT == REMOVED_EXIT  # ops/ cannot import replication/: one number, twice
    cluster, files = rendered("vagrant")
    unit = text_of(files, systemd.unit_file(cluster.nodes[0]))
    assert f"\nRestartPreventExitStatus={REMOVED_EXIT}\n" in unit and "\nRestart=always\n" in unit
