"""ops check: the judgement on hand-built facts, and the real command inside network namespaces.

The namespace tests build a host from scratch (a veth interface with the node's
address, the VIP or not, a stand-in admin endpoint answering /leader, real
keepalived or not), run `python -m haqueue ops check` inside it and assert what
it reports. Addresses come from 198.18.0.0/15 (RFC 2544 benchmarking range).
"""

from __future__ import annotations

import ipaddress
import json
import re

import pytest

from haqueue.config.cluster import parse_cluster
from haqueue.ops import check
from haqueue.ops.check import FAIL, OK, WARN, HostFacts, Keepalived, LeaderProbe, Link
from tests.ops.ops_host_testlib import (
    NOT_ROOT,
    NOT_ROOT_REASON,
    add_address,
    add_veth,
    admin_endpoint,
    keepalived,
    netns,
    ops_in_netns,
    set_sysctls,
)

NODE = "198.18.0.11"
VIP = "198.18.0.100"


def cluster_text(admin_port: int = 11500, directors: bool = False, lvs_mode: str | None = None) -> str:
    text = f"""
[cluster]
name = "t"
vip = "{VIP}/24"
secret = "s"
admin_port = {admin_port}

[[nodes]]
id = "n1"
address = "{NODE}"
interface = "eth1"
priority = 150

[[nodes]]
id = "n2"
address = "198.18.0.12"
interface = "eth1"
priority = 140

[[nodes]]
id = "n3"
address = "198.18.0.13"
interface = "eth1"
priority = 130
"""
    if directors:
        text += """
[[directors]]
id = "d1"
address = "198.18.0.2"
interface = "eth1"
priority = 150
"""
    if lvs_mode:
        text += f'\n[lvs]\nmode = "{lvs_mode}"\n'
        if lvs_mode == "nat":
            text += 'nat_gateway = "198.18.0.1"\n'
    return text


def rows_by_check(rows) -> dict[str, tuple[str, str]]:
    return {r["check"] if isinstance(r, dict) else r.check:
            (r["status"], r["detail"]) if isinstance(r, dict) else (r.status, r.detail) for r in rows}


# -- evaluate(): pure judgement -------------------------------------------------

def facts(*, vip_on: dict[str, str] | None = None, leader: str = "leader", keepalived_pids=(1,),
          sysctls: dict[str, str | None] | None = None, ip_vs: str | None = None, eth1_up: bool = True) -> HostFacts:
    addrs: dict[str, list[ipaddress.IPv4Interface]] = {"lo": [ipaddress.IPv4Interface("127.0.0.1/8")],
                                                       "eth1": [ipaddress.IPv4Interface(f"{NODE}/24")]}
    for ifname, prefix in (vip_on or {}).items():
        addrs[ifname].append(ipaddress.IPv4Interface(f"{VIP}/{prefix}"))
    return HostFacts(
        links={
            "lo": Link("lo", True, "UNKNOWN", None, tuple(addrs["lo"])),
            "eth1": Link("eth1", eth1_up, "UP" if eth1_up else "DOWN", "veth", tuple(addrs["eth1"])),
        },
        sysctls=sysctls or {},
        keepalived=Keepalived(pids=tuple(keepalived_pids), elsewhere=0),
        leader=LeaderProbe(leader, "GET http://x/leader"),
        ip_vs=ip_vs,
    )


def evaluate(f: HostFacts, role: str = "node", **cluster_kw) -> dict[str, tuple[str, str]]:
    cluster = parse_cluster(cluster_text(**cluster_kw))
    member = cluster.nodes[0] if role != "director" else cluster.directors[0]
    return rows_by_check(check.evaluate(cluster, member, role, f))


VIP_ROW = f"vip {VIP}"


@pytest.mark.parametrize(
    "vip_on, leader, status",
    [
        ({"eth1": "24"}, "leader", OK),
        ({"eth1": "24"}, "follower", FAIL),
        ({}, "follower", OK),
        ({}, "leader", FAIL),
        ({"eth1": "24"}, "unreachable", WARN),
        ({}, "unreachable", WARN),
    ],
)
def test_collocated_vip_must_be_exactly_where_the_raft_leader_is(vip_on, leader, status):
    assert evaluate(facts(vip_on=vip_on, leader=leader))[VIP_ROW][0] == status


def test_collocated_node_with_the_vip_on_lo_fails():
    rows = check.evaluate(parse_cluster(cluster_text()), parse_cluster(cluster_text()).nodes[0], "node",
                          facts(vip_on={"lo": "32"}, leader="follower"))
    assert any(r.check == VIP_ROW and r.status == FAIL and "lo" in r.detail for r in rows)


@pytest.mark.parametrize(
    "vip_on, status, fragment",
    [
        ({"lo": "32"}, OK, "on lo as 198.18.0.100/32"),
        ({"lo": "24"}, FAIL, "must be /32"),
        ({}, FAIL, "not on lo"),
        ({"lo": "32", "eth1": "24"}, FAIL, "answers ARP"),
    ],
)
def test_real_server_holds_the_vip_on_lo_as_a_host_route_only(vip_on, status, fragment):
    status_, detail = evaluate(facts(vip_on=vip_on, leader="follower"), role="realserver", directors=True)[VIP_ROW]
    assert (status_, fragment in detail) == (status, True), detail


def test_nat_real_server_needs_no_vip_at_all():
    rows = evaluate(facts(leader="follower"), role="realserver", directors=True, lvs_mode="nat")
    assert rows[VIP_ROW][0] == OK
    assert not any("arp_" in name for name in rows)


def test_required_sysctl_off_fails_and_tuning_drift_only_warns():
    rows = evaluate(facts(vip_on={"lo": "32"}, sysctls={"net.ipv4.conf.all.arp_ignore": "0",
                                                       "net.core.somaxconn": "4096"}),
                    role="realserver", directors=True)
    assert rows["sysctl net.ipv4.conf.all.arp_ignore"][0] == FAIL
    assert rows["sysctl net.core.somaxconn"] == (WARN, "is 4096, want 40960 (/etc/sysctl.d/60-haqueue-realserver.conf)")


def test_reserved_ports_are_satisfied_by_a_kernel_range_that_covers_them():
    rows = evaluate(facts(sysctls={"net.ipv4.ip_local_reserved_ports": "11300-11500"}))
    assert rows["sysctl net.ipv4.ip_local_reserved_ports"][0] == OK


def test_director_reports_vrrp_state_and_whether_ip_vs_has_the_virtual_server():
    cluster = parse_cluster(cluster_text(directors=True))
    director = cluster.directors[0]
    service = f"TCP  {int(ipaddress.IPv4Address(VIP)):08X}:{cluster.client_port:04X} wlc\n"
    f = facts(leader="follower", ip_vs="IP Virtual Server version 1.2.1 (size=32768)\n" + service)
    f.links["eth1"] = Link("eth1", True, "UP", None, (ipaddress.IPv4Interface("198.18.0.2/24"),
                                                      ipaddress.IPv4Interface(f"{VIP}/24")))
    f.leader = None
    rows = rows_by_check(check.evaluate(cluster, director, "director", f))
    assert rows[VIP_ROW] == (OK, "present on eth1: this director is the VRRP master")
    assert rows["ip_vs"][0] == OK
    assert "raft role" not in rows
    f.ip_vs = None
    assert rows_by_check(check.evaluate(cluster, director, "director", f))["ip_vs"][0] == FAIL
    # With the id service on, its UDP virtual server is expected too.
    cluster = parse_cluster(cluster_text(directors=True).replace("[cluster]\n", "[cluster]\nid_port = 1200\n", 1))
    f.ip_vs = "IP Virtual Server version 1.2.1 (size=32768)\n" + service
    rows = rows_by_check(check.evaluate(cluster, director, "director", f))
    assert rows["ip_vs"] == (WARN, f"no virtual server {VIP}:1200/udp yet (keepalived adds it at start)")
    f.ip_vs += f"UDP  {int(ipaddress.IPv4Address(VIP)):08X}:04B0 rr ops\n"
    rows = rows_by_check(check.evaluate(cluster, director, "director", f))
    assert rows["ip_vs"] == (OK, f"virtual server {VIP}:{cluster.client_port}/tcp, {VIP}:1200/udp configured")
    # And Gearman's TCP virtual server when the cluster serves it.
    cluster = parse_cluster(cluster_text(directors=True).replace("[cluster]\n", "[cluster]\ngearman_port = 4730\n", 1))
    rows = rows_by_check(check.evaluate(cluster, director, "director", f))
    assert rows["ip_vs"] == (WARN, f"no virtual server {VIP}:4730/tcp yet (keepalived adds it at start)")


def test_one_host_lab_on_lo_holds_the_vip_on_its_own_interface():
    text = cluster_text().replace(f'vip = "{VIP}/24"', 'vip = "127.0.0.100/8"')
    text = text.replace('interface = "eth1"', 'interface = "lo"')
    for i in (11, 12, 13):
        text = text.replace(f'"198.18.0.{i}"', f'"127.0.0.{i}"')
    cluster = parse_cluster(text)
    lo = Link("lo", True, "UNKNOWN", None, tuple(ipaddress.IPv4Interface(a) for a in
                                                 ("127.0.0.1/8", "127.0.0.11/8", "127.0.0.100/8")))
    f = HostFacts(links={"lo": lo}, sysctls={}, keepalived=Keepalived((1,), 0),
                  leader=LeaderProbe("leader", "GET"))
    rows = check.evaluate(cluster, cluster.nodes[0], "node", f)
    vip_rows = [r for r in rows if r.check == "vip 127.0.0.100"]
    assert [(r.status, r.detail) for r in vip_rows] == [(OK, "present on lo; this node is the leader")]


def test_members_role_defaults_from_the_cluster_file():
    plain, lvs = parse_cluster(cluster_text()), parse_cluster(cluster_text(directors=True))
    assert check.default_role(plain, plain.nodes[0]) == "node"
    assert check.default_role(lvs, lvs.nodes[0]) == "realserver"
    assert check.default_role(lvs, lvs.directors[0]) == "director"


def test_detect_member_needs_exactly_one_cluster_address_here():
    cluster = parse_cluster(cluster_text())
    assert check.detect_member(cluster, {"127.0.0.1", NODE}).id == "n1"
    with pytest.raises(check.CheckError, match="none of the cluster's addresses"):
        check.detect_member(cluster, {"127.0.0.1"})
    with pytest.raises(check.CheckError, match=r"several cluster addresses .*n1, n2"):
        check.detect_member(cluster, {NODE, "198.18.0.12"})


def test_table_has_a_header_and_one_line_per_row():
    table = check.format_table([check.Row("a", OK, "x"), check.Row("longer name", FAIL, "y")])
    assert table.splitlines() == ["CHECK        STATUS  DETAIL", "a            OK      x",
                                  "longer name  FAIL    y"]


# -- the real command in a network namespace --------------------------------------

def needs_root(test):
    """Marked `root` (it creates namespaces: `-m "not root"` leaves it out even when run as
    root) and skipped with a reason when not root."""
    return pytest.mark.root(pytest.mark.skipif(NOT_ROOT, reason=NOT_ROOT_REASON)(test))


def run_check(ns: str, config, *args: str) -> tuple[int, dict[str, tuple[str, str]], dict]:
    """`haqueue ops check --json` inside the namespace: (exit status, rows by check, whole report)."""
    result = ops_in_netns(ns, "check", "--config", str(config), "--json", *args)
    assert "Traceback" not in result.stderr, result.stderr
    report = json.loads(result.stdout)
    return result.returncode, rows_by_check(report["rows"]), report


@pytest.fixture
def host():
    """A namespace holding node n1: eth1 (a veth with its peer up) with 198.18.0.11/24."""
    with netns() as ns:
        add_veth(ns, "eth1", f"{NODE}/24")
        yield ns


def write_cluster(tmp_path, **kw):
    path = tmp_path / "cluster.toml"
    path.write_text(cluster_text(**kw))
    return path


@needs_root
def test_namespace_leader_holding_the_vip_with_keepalived_passes(host, tmp_path):
    add_address(host, "eth1", f"{VIP}/24")
    with admin_endpoint(host, NODE, 200) as port, keepalived(host, tmp_path) as ka_pid:
        code, rows, report = run_check(host, write_cluster(tmp_path, admin_port=port))
    assert (report["member"], report["role"], report["ok"]) == ("n1", "node", True)
    assert code == 0
    assert rows["interface eth1"][0] == OK
    assert rows[f"address {NODE}"] == (OK, f"on eth1 as {NODE}/24")
    assert rows["raft role"][0] == OK and rows["raft role"][1].startswith("leader")
    assert rows[VIP_ROW] == (OK, "present on eth1; this node is the leader")
    assert rows["keepalived"] == (OK, f"running (pid {ka_pid})")


@needs_root
def test_namespace_follower_holding_the_vip_fails(host, tmp_path):
    add_address(host, "eth1", f"{VIP}/24")
    with admin_endpoint(host, NODE, 503) as port:
        code, rows, report = run_check(host, write_cluster(tmp_path, admin_port=port), "--node", "n1")
    assert code == 1 and report["ok"] is False
    assert rows["raft role"][1].startswith("follower")
    assert rows[VIP_ROW][0] == FAIL and "follower" in rows[VIP_ROW][1]


@needs_root
def test_namespace_follower_without_the_vip_is_fine_and_leader_without_it_fails(host, tmp_path):
    with admin_endpoint(host, NODE, 503) as port:
        _, rows, _ = run_check(host, write_cluster(tmp_path, admin_port=port))
    assert rows[VIP_ROW] == (OK, "absent from eth1; this node is the follower")
    with admin_endpoint(host, NODE, 200) as port:
        code, rows, _ = run_check(host, write_cluster(tmp_path, admin_port=port))
    assert code == 1
    assert rows[VIP_ROW][0] == FAIL and "Raft leader" in rows[VIP_ROW][1]


@needs_root
def test_namespace_unreachable_admin_endpoint_is_reported_not_a_crash(host, tmp_path):
    add_address(host, "eth1", f"{VIP}/24")
    # Nothing listens on the admin port inside this fresh namespace.
    code, rows, _ = run_check(host, write_cluster(tmp_path, admin_port=11500))
    assert code == 1
    assert rows["raft role"][0] == FAIL and "unreachable" in rows["raft role"][1]
    assert rows[VIP_ROW][0] == WARN and "cannot tell" in rows[VIP_ROW][1]


@needs_root
def test_namespace_keepalived_in_another_namespace_does_not_count(host, tmp_path):
    with netns() as other, keepalived(other, tmp_path):
        _, rows, _ = run_check(host, write_cluster(tmp_path))
    status, detail = rows["keepalived"]
    assert status == FAIL
    # Other keepalived processes on this machine may add to the count, never to "here".
    assert re.fullmatch(r"not running in this network namespace; \d+ running in other network namespaces",
                        detail), detail


@needs_root
def test_namespace_interface_down_or_missing_fails(tmp_path):
    config = write_cluster(tmp_path)
    with netns() as ns:
        add_veth(ns, "eth1", f"{NODE}/24", up=False)
        _, rows, _ = run_check(ns, config)
        assert rows["interface eth1"][0] == FAIL and "down" in rows["interface eth1"][1]
    with netns() as ns:
        add_veth(ns, "eth9", f"{NODE}/24")
        code, rows, _ = run_check(ns, config)
        assert code == 1
        assert rows["interface eth1"][0] == FAIL and "missing" in rows["interface eth1"][1]
        assert rows[f"address {NODE}"] == (FAIL, "on eth9, not on eth1 as the cluster file says")


@needs_root
def test_namespace_without_any_cluster_address_asks_for_node_in_one_line(tmp_path):
    with netns() as ns:
        add_veth(ns, "eth1", "198.18.1.50/24")
        result = ops_in_netns(ns, "check", "--config", str(write_cluster(tmp_path)))
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        "haqueue: none of the cluster's addresses is configured here (n1=198.18.0.11, n2=198.18.0.12, "
        "n3=198.18.0.13); pass --node"]


@needs_root
def test_namespace_real_server_with_vip_on_lo_and_arp_sysctls_passes(host, tmp_path):
    config = write_cluster(tmp_path, directors=True)
    with admin_endpoint(host, NODE, 503) as port:
        config = write_cluster(tmp_path, directors=True, admin_port=port)
        _, rows, report = run_check(host, config)
        assert report["role"] == "realserver"
        assert rows[VIP_ROW][0] == FAIL  # not on lo yet
        assert rows["sysctl net.ipv4.conf.all.arp_ignore"] == (
            FAIL, "is 0, want 1 (/etc/sysctl.d/60-haqueue-realserver.conf)")

        add_address(host, "lo", f"{VIP}/32")
        set_sysctls(host, {"net.ipv4.conf.all.arp_ignore": "1", "net.ipv4.conf.lo.arp_ignore": "1",
                           "net.ipv4.conf.all.arp_announce": "2", "net.ipv4.conf.lo.arp_announce": "2"})
        code, rows, report = run_check(host, config)
    assert rows[VIP_ROW] == (OK, f"on lo as {VIP}/32, not on eth1")
    for key in ("all.arp_ignore", "lo.arp_ignore", "all.arp_announce", "lo.arp_announce"):
        assert rows[f"sysctl net.ipv4.conf.{key}"][0] == OK
    assert "keepalived" not in rows  # real servers do not run it
    assert code == 0, report


@needs_root
def test_namespace_check_prints_a_table_without_json(host, tmp_path):
    result = ops_in_netns(host, "check", "--config", str(write_cluster(tmp_path)), "--node", "n1")
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["CHECK", "STATUS", "DETAIL"]
    assert any(line.startswith("interface eth1") and " OK " in line for line in lines)


def test_a_node_id_not_in_the_cluster_file_is_one_line(tmp_path):
    from tests.ops.ops_host_testlib import assert_one_line_error, run

    result = run("check", "--config", str(write_cluster(tmp_path)), "--node", "zz")
    assert_one_line_error(result, "no node or director 'zz'")
