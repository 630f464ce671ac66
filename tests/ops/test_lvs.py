"""gen-lvs: golden files per mode, the real keepalived validator, shellcheck, and the DR real-server script run."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from haqueue.config.cluster import ClusterFileError, parse_cluster
from haqueue.ops import lvs
from tests.ops.golden_tools import VAGRANT, case_cluster, case_config_arg, check_golden
from tests.ops.keepalived_tools import config_test, netns, require_root_tools

# (golden case, cluster file case, --mode)
CASES = [("vagrant-dr", "vagrant", None), ("vagrant-tun", "vagrant", "tun"), ("tuned", "tuned", None), ("nat", "nat", None),
         ("five", "five", None)]


def rendered(case: str, mode: str | None, node_id: str | None = None):
    cluster = case_cluster(case)
    command = f"haqueue ops gen-lvs --config {case_config_arg(case)}" + (f" --mode {mode}" if mode else "")
    return cluster, lvs.render(cluster, node_id, mode, command)


@pytest.mark.parametrize(("golden", "case", "mode"), CASES)
def test_rendered_files_match_golden(golden, case, mode):
    _, files = rendered(case, mode)
    check_golden("lvs", golden, files)


@pytest.mark.root
@pytest.mark.parametrize(("golden", "case", "mode"), CASES)
def test_every_director_conf_passes_keepalived_config_test_without_a_warning(golden, case, mode, tmp_path):
    cluster, files = rendered(case, mode)
    for director in cluster.directors:
        conf = next(f.text for f in files if f.name == f"keepalived-{director.id}.conf")
        lines = config_test(
            conf,
            tmp_path,
            interfaces={director.interface: [f"{director.address}/{cluster.vip_prefixlen}"]},
            users=(cluster.keepalived.script_user,),
        )
        assert lines == [], f"{golden} {director.id}: {lines}"


@pytest.mark.parametrize(("golden", "case", "mode"), CASES)
def test_every_rendered_script_passes_bash_n_and_shellcheck(golden, case, mode, tmp_path):
    _, files = rendered(case, mode)
    scripts = [f for f in files if f.text.startswith("#!")]
    assert scripts and all(f.mode == 0o755 for f in scripts)
    for f in scripts:
        path = tmp_path / f.name
        path.write_text(f.text)
        subprocess.run(["bash", "-n", str(path)], check=True)
        if shutil.which("shellcheck"):
            proc = subprocess.run(["shellcheck", str(path)], capture_output=True, text=True)
            assert proc.returncode == 0, f"{f.name}:\n{proc.stdout}"


@pytest.mark.parametrize("case", ["vagrant", "five"])
def test_leader_only_health_check_on_every_real_server(case):
    cluster, files = rendered(case, None)
    conf = next(f.text for f in files if f.name == "keepalived-d1.conf")
    assert conf.count("    real_server ") == len(cluster.nodes)
    # One real-server script per node, each for its own address.
    assert sorted(f.name for f in files if f.name.startswith("lvs-realserver-")) == sorted(
        f"lvs-realserver-{n.id}.sh" for n in cluster.nodes)
    assert f"virtual_server {cluster.vip_address} {cluster.client_port} {{" in conf
    assert "lvs_method DR\n" in conf and "    alpha\n" in conf
    assert "persistence_timeout" not in conf.replace("No persistence_timeout", "")
    for node in cluster.nodes:
        block = conf.split(f"real_server {node.address} {cluster.client_port} {{", 1)[1].split("\n    }\n", 1)[0]
        assert "path /leader" in block and "status_code 200" in block
        assert f"connect_port {node.admin_port}" in block
    assert "TCP_CHECK" not in conf


def test_both_directors_are_backup_nopreempt_peering_each_other():
    cluster, files = rendered("vagrant", None)
    d1, d2 = cluster.directors
    for me, peer in ((d1, d2), (d2, d1)):
        conf = next(f.text for f in files if f.name == f"keepalived-{me.id}.conf")
        assert "    state BACKUP\n    nopreempt\n" in conf
        assert f"unicast_src_ip {me.address}\n    unicast_peer {{\n        {peer.address}\n    }}" in conf
        assert f"virtual_router_id {lvs.vrid(cluster)}\n" in conf and lvs.vrid(cluster) == 52


def test_tun_mode_lowers_mtu_and_mss_by_the_ipip_header():
    _, files = rendered("vagrant", "tun")
    script = next(f.text for f in files if f.name == "lvs-realserver-n1.sh")
    assert "ip link set tunl0 up mtu $(( mtu - 20 ))" in script
    assert "mss=$(( mtu - 20 - 40 ))" in script
    assert "rp_filter=2" in script and "arp_ignore=1" in script and "arp_announce=2" in script
    # The VIP on lo as in DR (where `haqueue ops check` looks for it), ARP-quiet first.
    assert script.index("net.ipv4.conf.lo.arp_ignore=1") < script.index('ip addr replace "$VIP/32" dev lo')
    assert "dev tunl0" not in script.split("ip link set tunl0")[0]


def test_nat_mode_routes_real_servers_through_the_gateway_the_directors_hold():
    cluster, files = rendered("nat", None)
    conf = next(f.text for f in files if f.name == "keepalived-lb-a.conf")
    assert "        172.16.5.1/24 dev eth0\n" in conf and "lvs_method NAT\n" in conf
    script = next(f.text for f in files if f.name == "lvs-realserver-q1.sh")
    assert "ip route replace default via 172.16.5.1 dev eth0" in script


def test_modprobe_snippet_sets_conn_tab_bits():
    _, files = rendered("tuned", None)
    text = next(f.text for f in files if f.name == lvs.MODPROBE_FILE)
    assert "options ip_vs conn_tab_bits=18\n" in text


def test_node_option_selects_a_director_or_a_real_server():
    _, files = rendered("vagrant", None, "d2")
    assert [f.name for f in files] == ["keepalived-d2.conf", lvs.DIRECTOR_SCRIPT, lvs.MODPROBE_FILE]
    _, files = rendered("vagrant", None, "n3")
    assert [f.name for f in files] == ["lvs-realserver-n3.sh"]


@pytest.mark.parametrize(
    ("change", "mode", "expected"),
    [
        (lambda t: t.split("[[directors]]")[0], None, "directors: gen-lvs needs exactly two [[directors]], found 0"),
        (lambda t: t, "nat", "lvs.nat_gateway: missing: NAT mode needs the real servers' gateway address"),
        (lambda t: t, "fullnat", "lvs.mode: 'fullnat' is not one of dr, tun, nat"),
    ],
)
def test_render_errors_are_one_line_naming_the_key(change, mode, expected):
    text = (case_cluster("vagrant").source and open(case_cluster("vagrant").source).read())
    cluster = parse_cluster(change(text), source="c.toml")
    with pytest.raises(ClusterFileError) as info:
        lvs.render(cluster, None, mode, "x")
    assert str(info.value) == f"c.toml: {expected}"


def test_unknown_member_is_one_line_error():
    cluster, _ = rendered("vagrant", None)
    with pytest.raises(ClusterFileError, match=r"no director or node 'x9' \(known: d1, d2, n1, n2, n3\)"):
        lvs.render(cluster, "x9", None, "x")


@pytest.mark.root
def test_dr_realserver_script_puts_vip_on_lo_and_sets_arp_sysctls(tmp_path):
    require_root_tools()
    # The example cluster moved into 198.18.0.0/15, the range this machine's tests may use.
    cluster = parse_cluster(VAGRANT.read_text().replace('"192.168.56.', '"198.18.56.'), source="lab.toml")
    path = tmp_path / "rs.sh"
    path.write_text(lvs.render(cluster, "n1", None, "x")[0].text)
    path.chmod(0o755)

    def in_ns(ns, *argv):
        return subprocess.run(["ip", "netns", "exec", ns, *argv], capture_output=True, text=True, check=True).stdout

    with netns({"eth1": ["198.18.56.11/24"]}) as ns:
        in_ns(ns, str(path), "start")
        in_ns(ns, str(path), "start")  # idempotent
        assert "inet 198.18.56.100/32" in in_ns(ns, "ip", "-4", "addr", "show", "dev", "lo")
        # all and lo, as gen-sysctl persists them and `haqueue ops check` expects them.
        for key, value in [("all.arp_ignore", "1"), ("lo.arp_ignore", "1"), ("all.arp_announce", "2"),
                           ("lo.arp_announce", "2")]:
            assert in_ns(ns, "sysctl", "-n", f"net.ipv4.conf.{key}").strip() == value
        in_ns(ns, str(path), "stop")
        assert "198.18.56.100" not in in_ns(ns, "ip", "-4", "addr", "show", "dev", "lo")
