"""gen-keepalived: golden files, the real keepalived validator, and the leader-check script's behaviour."""

from __future__ import annotations

import http.server
import shutil
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

from haqueue.config.cluster import ClusterFileError, parse_cluster
from haqueue.ops import keepalived
from tests.ops.golden_tools import case_cluster, case_config_arg, check_golden
from tests.ops.keepalived_tools import config_test, netns, require_root_tools

CASES = ("vagrant", "tuned", "five")


def rendered(case: str, node_id: str | None = None):
    cluster = case_cluster(case)
    command = f"haqueue ops gen-keepalived --config {case_config_arg(case)}"
    return cluster, keepalived.render(cluster, node_id, command)


@pytest.mark.parametrize("case", CASES)
def test_rendered_files_match_golden(case):
    _, files = rendered(case)
    check_golden("keepalived", case, files)


@pytest.mark.root
@pytest.mark.parametrize("case", CASES)
def test_every_rendered_conf_passes_keepalived_config_test_without_a_warning(case, tmp_path):
    cluster, files = rendered(case)
    by_name = {f.name: f for f in files}
    script = by_name[keepalived.SCRIPT_NAME].text
    for node in cluster.nodes:
        conf = by_name[keepalived.file_name(node)].text
        lines = config_test(
            conf,
            tmp_path,
            interfaces={node.interface: [f"{node.address}/{cluster.vip_prefixlen}"]},
            installed={keepalived.script_path(cluster): script},
            users=(cluster.keepalived.script_user,),
        )
        assert lines == [], f"{node.id}: {lines}"


@pytest.mark.root
def test_config_test_tool_reports_a_bad_keyword(tmp_path):
    # The validator above is only worth something if it can fail.
    cluster, files = rendered("vagrant", "n1")
    conf = files[0].text.replace("nopreempt", "nopreemt")
    node = cluster.node("n1")
    lines = config_test(conf, tmp_path, interfaces={node.interface: [f"{node.address}/24"]})
    assert any("Unknown keyword 'nopreemt'" in line for line in lines)


@pytest.mark.parametrize("case", ["vagrant", "five"])
def test_every_node_is_backup_nopreempt_with_unicast_peers_and_no_strict_mode(case):
    cluster, files = rendered(case)
    assert sorted(f.name for f in files if f.name.endswith(".conf")) == sorted(
        f"keepalived-{n.id}.conf" for n in cluster.nodes)
    for node in cluster.nodes:
        conf = next(f.text for f in files if f.name == f"keepalived-{node.id}.conf")
        assert "    state BACKUP\n    nopreempt\n" in conf
        assert f"unicast_src_ip {node.address}\n" in conf
        peers = conf.split("unicast_peer {\n", 1)[1].split("    }", 1)[0].split()
        assert peers == [p.address for p in cluster.peers_of(node.id)]
        assert len(peers) == len(cluster.nodes) - 1 and node.address not in peers
        assert "vrrp_strict" not in conf.replace("No vrrp_strict", "")
        assert "auth_pass" not in conf and "authentication {" not in conf
        assert f"priority {node.priority}\n" in conf
        for event in ("notify_master", "notify_backup", "notify_fault", "notify_stop"):
            assert f'{event} "/usr/bin/logger -t haqueue-vrrp' in conf


def test_worst_case_timing_is_under_a_second_with_default_settings():
    cluster, _ = rendered("vagrant")
    for node in cluster.nodes:
        t = keepalived.timing(cluster, node)
        assert t.total < 1.0
        assert t.master_down == pytest.approx(3 * 0.1 + (256 - node.priority) * 0.1 / 256)


def test_one_node_renders_only_its_conf_and_the_script():
    _, files = rendered("vagrant", "n2")
    assert [f.name for f in files] == ["keepalived-n2.conf", keepalived.SCRIPT_NAME]
    assert files[1].mode == 0o755


def test_unknown_node_is_one_line_error():
    cluster, _ = rendered("vagrant")
    with pytest.raises(ClusterFileError, match=r"no node 'n9' \(nodes: n1, n2, n3\)"):
        keepalived.render(cluster, "n9", "x")


def test_a_single_node_cluster_is_refused():
    cluster = parse_cluster(
        '[cluster]\nname = "x"\nvip = "192.0.2.100/24"\nsecret = "s"\n'
        '[[nodes]]\nid = "n1"\naddress = "192.0.2.11"\ninterface = "eth1"\npriority = 100\n',
        source="c.toml",
    )
    with pytest.raises(ClusterFileError, match="c.toml: nodes: collocated VRRP needs at least two nodes"):
        keepalived.render(cluster, None, "x")


# -- the leader-check script ------------------------------------------------


def script_file(tmp_path: Path) -> Path:
    cluster, files = rendered("vagrant")
    path = tmp_path / keepalived.SCRIPT_NAME
    path.write_text(next(f.text for f in files if f.name == keepalived.SCRIPT_NAME))
    path.chmod(0o755)
    return path


def test_check_script_passes_bash_n_and_shellcheck(tmp_path):
    path = script_file(tmp_path)
    subprocess.run(["bash", "-n", str(path)], check=True)
    if shutil.which("shellcheck") is None:
        pytest.skip("shellcheck is not installed")
    proc = subprocess.run(["shellcheck", str(path)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout


def run_check(tmp_path: Path, *, leader: bool, holds_vip: bool, flip_after: float | None = None):
    """Run the rendered check script once, with `test -e FLAG` as the leader check, on a node
    that leads (or not) and holds the VIP (or not). With flip_after, leadership flips that
    many seconds in. Returns (status, seconds from the start, or from the flip)."""
    flag = tmp_path / "leader"
    if leader:
        flag.touch()
    script = script_file(tmp_path)
    if not holds_vip:
        return _run_script(script, "lo", flag, flip_after=flip_after)  # the VIP is not on lo
    require_root_tools()
    with netns({"eth1": ["198.18.2.11/24", "198.18.2.100/24"]}) as ns:
        return _run_script(script, "eth1", flag, ns, flip_after=flip_after)


def _run_script(path: Path, iface: str, flag: Path, netns_name: str | None = None, flip_after=None):
    argv = [str(path), iface, "198.18.2.100", "50", "test", "-e", str(flag)]
    if netns_name:
        argv = ["ip", "netns", "exec", netns_name] + argv
    start = time.monotonic()
    proc = subprocess.Popen(argv)
    if flip_after is not None:
        time.sleep(flip_after)  # the change the script must notice, at a known moment
        flipped = time.monotonic()
        if flag.exists():
            flag.unlink()
        else:
            flag.touch()
        status = proc.wait(timeout=5)
        return status, time.monotonic() - flipped
    status = proc.wait(timeout=5)
    return status, time.monotonic() - start


def test_check_script_makes_a_leader_without_the_vip_eligible_at_once(tmp_path):
    status, took = run_check(tmp_path, leader=True, holds_vip=False)
    assert status == 0 and took < 0.3


def test_check_script_reports_a_follower_at_the_end_of_its_window(tmp_path):
    status, took = run_check(tmp_path, leader=False, holds_vip=False)
    assert status == 1
    # It watched for most of the second, but ended before keepalived's next run.
    assert 0.5 < took < 1.0


def test_check_script_exits_the_moment_a_follower_becomes_leader(tmp_path):
    status, after_flip = run_check(tmp_path, leader=False, holds_vip=False, flip_after=0.3)
    assert status == 0
    assert after_flip < 0.25


@pytest.mark.root
def test_check_script_makes_the_vip_holder_give_up_soon_after_losing_leadership(tmp_path):
    status, after_flip = run_check(tmp_path, leader=True, holds_vip=True, flip_after=0.2)
    assert status == 1
    # Two failed checks in a row, one poll apart.
    assert after_flip < 0.35


@pytest.mark.root
def test_check_script_keeps_a_leader_holding_the_vip(tmp_path):
    status, took = run_check(tmp_path, leader=True, holds_vip=True)
    assert status == 0 and 0.5 < took < 1.0


@pytest.mark.root
def test_check_script_makes_a_follower_holding_the_vip_give_it_up(tmp_path):
    status, took = run_check(tmp_path, leader=False, holds_vip=True)
    assert status == 1 and took < 0.4


# -- the rendered HTTP check command ----------------------------------------


class _Leader(http.server.BaseHTTPRequestHandler):
    status = 200

    def do_GET(self):  # noqa: N802 (http.server's naming)
        self.send_response(self.status if self.path == "/leader" else 404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


def serve(status: int):
    handler = type("H", (_Leader,), {"status": status})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def http_check_words(port: int) -> list[str]:
    cluster = parse_cluster(
        '[cluster]\nname = "x"\nvip = "127.0.0.100/8"\nsecret = "s"\n'
        f'[[nodes]]\nid = "n1"\naddress = "127.0.0.1"\ninterface = "lo"\npriority = 100\nadmin_port = {port}\n'
    )
    return keepalived.check_words(cluster, cluster.nodes[0])


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
@pytest.mark.parametrize(("status", "leader"), [(200, True), (503, False)])
def test_http_check_command_exits_zero_only_on_200_from_leader_endpoint(status, leader):
    server = serve(status)
    try:
        returncode = subprocess.run(http_check_words(server.server_address[1])).returncode
        assert (returncode == 0) == leader
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_http_check_command_fails_fast_when_nothing_listens():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    start = time.monotonic()
    assert subprocess.run(http_check_words(port)).returncode != 0
    assert time.monotonic() - start < 0.5
