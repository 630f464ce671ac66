"""gen-bonding: golden files, each format parsed back, validation, and /proc/net/bonding parsing.

This kernel has no bonding driver, so the rendered files are validated by
parsing them the way their consumers do (INI for networkd, shell for ifcfg,
stanzas for ifupdown) and by golden files.
"""

from __future__ import annotations

import configparser
import subprocess

import pytest

from haqueue.ops import bonding
from haqueue.ops.check import FAIL, OK, WARN
from tests.ops.ops_host_testlib import GOLDEN, assert_matches_golden, assert_one_line_error, run

BONDED = "tests/ops/golden_host/bonded-cluster.toml"
UNBONDED = "tests/ops/golden_host/cluster.toml"


def gen(tmp_path, *args: str) -> dict[str, str]:
    out = tmp_path / "out"
    result = run("gen-bonding", "--config", BONDED, "-o", str(out), *args)
    assert result.exit_code == 0, result.output
    return {str(p.relative_to(out)): p.read_text() for p in sorted(out.rglob("*")) if p.is_file()}


def test_active_backup_and_lacp_match_golden(tmp_path):
    out = tmp_path / "out"
    for node, extra in (("n1", ()), ("n2", ("--mode", "802.3ad", "--miimon", "50"))):
        result = run("gen-bonding", "--config", BONDED, "--node", node, "--slaves", "eth1,eth2",
                     *extra, "-o", str(out))
        assert result.exit_code == 0, result.output
    assert_matches_golden(out, GOLDEN / "bonding")


def test_without_node_every_member_gets_its_own_files_with_its_own_address(tmp_path):
    files = gen(tmp_path, "--slaves", "eth1,eth2", "--format", "ifcfg")
    assert sorted({name.split("/")[0] for name in files}) == ["d1", "d2", "n1", "n2", "n3"]
    assert "IPADDR=192.168.56.13\n" in files["n3/ifcfg/ifcfg-bond0"]
    assert "IPADDR=192.168.56.3\n" in files["d2/ifcfg/ifcfg-bond0"]


def ini(text: str) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=True, interpolation=None, comment_prefixes=("#",))
    parser.optionxform = str  # networkd keys are case-sensitive
    parser.read_string(text)
    return parser


@pytest.mark.parametrize("mode", bonding.MODES)
def test_networkd_files_parse_as_ini_and_describe_the_bond(tmp_path, mode):
    files = gen(tmp_path, "--node", "n1", "--slaves", "eth1,eth2", "--mode", mode, "--format", "networkd")
    prefix = "n1/networkd/10-haqueue-bond0"
    assert sorted(files) == [f"{prefix}-eth1.network", f"{prefix}-eth2.network",
                             f"{prefix}.netdev", f"{prefix}.network"]
    netdev = ini(files[f"{prefix}.netdev"])
    assert dict(netdev["NetDev"]) == {"Name": "bond0", "Kind": "bond"}
    bond = dict(netdev["Bond"])
    assert bond["Mode"] == mode
    assert bond["MIIMonitorSec"] == "100ms"
    assert bond["UpDelaySec"] == "200ms"
    if mode == "802.3ad":
        assert bond["LACPTransmitRate"] == "fast"
        assert bond["TransmitHashPolicy"] == "layer3+4"
    else:
        assert bond["PrimaryReselectPolicy"] == "failure"
    network = ini(files[f"{prefix}.network"])
    assert network["Match"]["Name"] == "bond0"
    assert network["Network"]["Address"] == "192.168.56.11/24"
    assert network["Network"]["KeepConfiguration"] == "yes"
    for slave in ("eth1", "eth2"):
        s = ini(files[f"{prefix}-{slave}.network"])
        assert s["Match"]["Name"] == slave
        assert s["Network"]["Bond"] == "bond0"
    primary = [slave for slave in ("eth1", "eth2")
               if ini(files[f"{prefix}-{slave}.network"])["Network"].get("PrimarySlave") == "true"]
    assert primary == (["eth1"] if mode == "active-backup" else [])


def source_ifcfg(path, *names: str) -> list[str]:
    """What the RHEL network scripts see: the file sourced by a shell, with `set -u`."""
    script = 'set -eu; . "$1"; shift; for n in "$@"; do printf "%s\\n" "${!n}"; done'
    out = subprocess.run(["bash", "-c", script, "bash", str(path), *names],
                         capture_output=True, text=True, check=True)
    return out.stdout.splitlines()


@pytest.mark.parametrize("mode", bonding.MODES)
def test_ifcfg_files_are_key_value_lines_that_a_shell_sources(tmp_path, mode):
    files = gen(tmp_path, "--node", "n2", "--slaves", "eth3,eth4", "--mode", mode, "--format", "ifcfg")
    assert sorted(files) == ["n2/ifcfg/ifcfg-bond0", "n2/ifcfg/ifcfg-eth3", "n2/ifcfg/ifcfg-eth4"]
    for text in files.values():
        for line in text.splitlines():
            if line and not line.startswith("#"):
                key, sep, _ = line.partition("=")
                assert sep and key.isupper() and " " not in key, line
    out = tmp_path / "out"
    device, ip, prefix, opts = source_ifcfg(out / "n2/ifcfg/ifcfg-bond0", "DEVICE", "IPADDR", "PREFIX",
                                            "BONDING_OPTS")
    assert (device, ip, prefix) == ("bond0", "192.168.56.12", "24")
    options = dict(item.split("=", 1) for item in opts.split())
    assert options["mode"] == mode and options["miimon"] == "100"
    if mode == "active-backup":
        assert options["primary"] == "eth3"
    for slave in ("eth3", "eth4"):
        assert source_ifcfg(out / f"n2/ifcfg/ifcfg-{slave}", "DEVICE", "MASTER", "SLAVE") == [slave, "bond0", "yes"]


def stanzas(text: str) -> dict[str, dict[str, str]]:
    """interfaces(5): `iface NAME inet METHOD` opens a stanza; indented lines are its options."""
    out: dict[str, dict[str, str]] = {}
    auto: list[str] = []
    current = None
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        words = line.split()
        if words[0] == "auto":
            auto += words[1:]
        elif words[0] == "iface":
            assert len(words) == 4 and words[2] == "inet", line
            current = out.setdefault(words[1], {"method": words[3]})
        else:
            assert line.startswith("    ") and current is not None, line
            current[words[0]] = " ".join(words[1:])
    out["auto"] = {name: "" for name in auto}
    return out


def test_ifupdown_file_has_a_static_bond_and_manual_slaves(tmp_path):
    files = gen(tmp_path, "--node", "n1", "--slaves", "eth1,eth2", "--format", "ifupdown")
    assert list(files) == ["n1/ifupdown/bond0"]
    s = stanzas(files["n1/ifupdown/bond0"])
    assert list(s["auto"]) == ["bond0"]
    assert s["bond0"]["method"] == "static"
    assert s["bond0"]["address"] == "192.168.56.11/24"
    assert s["bond0"]["bond-slaves"] == "eth1 eth2"
    assert s["bond0"]["bond-mode"] == "active-backup"
    assert s["bond0"]["bond-miimon"] == "100"
    assert s["bond0"]["bond-primary"] == "eth1"
    for slave in ("eth1", "eth2"):
        assert s[slave] == {"method": "manual", "bond-master": "bond0"}


def test_every_file_starts_with_the_header_and_says_where_it_installs(tmp_path):
    files = gen(tmp_path, "--node", "n1", "--slaves", "eth1,eth2")
    assert len(files) == 8
    for name, text in files.items():
        lines = text.splitlines()
        assert lines[0] == "# generated by haqueue — do not edit"
        assert lines[2].startswith("# install as: /etc/"), name
        assert lines[2].endswith("/" + name.rsplit("/", 1)[1]), name


def test_updelay_is_two_miimon_intervals(tmp_path):
    files = gen(tmp_path, "--node", "n1", "--slaves", "eth1,eth2", "--miimon", "250", "--format", "ifupdown")
    s = stanzas(files["n1/ifupdown/bond0"])
    assert (s["bond0"]["bond-miimon"], s["bond0"]["bond-updelay"]) == ("250", "500")


@pytest.mark.parametrize(
    "args, fragments",
    [
        (("--slaves", "eth1"), ("--slaves needs at least two interfaces",)),
        (("--slaves", "eth1,eth1"), ("eth1 listed twice",)),
        (("--slaves", "eth1,bad name"), ("'bad name' is not a valid interface name",)),
        (("--slaves", "eth1,eth2", "--miimon", "0"), ("--miimon 0", "disable link monitoring")),
        (("--slaves", "eth1,bond0"), ("n1: its interface 'bond0' is one of the slaves",)),
        (("--slaves", "eth1,eth2", "--node", "n9"), ("no node or director 'n9'",)),
    ],
)
def test_bad_requests_are_one_line_errors_and_write_nothing(tmp_path, args, fragments):
    if "--node" not in args:
        args = args + ("--node", "n1")
    result = run("gen-bonding", "--config", BONDED, "-o", str(tmp_path / "out"), *args)
    assert_one_line_error(result, *fragments)
    assert not (tmp_path / "out").exists()


def test_a_cluster_file_that_puts_the_vip_on_a_slave_is_refused(tmp_path):
    result = run("gen-bonding", "--config", UNBONDED, "--slaves", "eth1,eth2", "-o", str(tmp_path / "o"))
    assert_one_line_error(result, "its interface 'eth1' is one of the slaves", 'set interface = "bond0"')


def test_unknown_mode_is_a_usage_error():
    result = run("gen-bonding", "--config", BONDED, "--slaves", "eth1,eth2", "--mode", "balance-rr")
    assert result.exit_code == 2
    assert "balance-rr" in result.stderr


# -- /proc/net/bonding ----------------------------------------------------------
# Shapes as printed by drivers/net/bonding/bond_procfs.c (Linux 6.x).

ACTIVE_BACKUP = """\
Ethernet Channel Bonding Driver: v6.1.0

Bonding Mode: fault-tolerance (active-backup)
Primary Slave: eth1 (primary_reselect failure)
Currently Active Slave: eth2
MII Status: up
MII Polling Interval (ms): 100
Up Delay (ms): 200
Down Delay (ms): 0
Peer Notification Delay (ms): 0

Slave Interface: eth1
MII Status: down
Speed: Unknown
Duplex: Unknown
Link Failure Count: 1
Permanent HW addr: 52:54:00:aa:00:01
Slave queue ID: 0

Slave Interface: eth2
MII Status: up
Speed: 1000 Mbps
Duplex: full
Link Failure Count: 0
Permanent HW addr: 52:54:00:aa:00:02
Slave queue ID: 0
"""

LACP = """\
Ethernet Channel Bonding Driver: v6.1.0

Bonding Mode: IEEE 802.3ad Dynamic link aggregation
Transmit Hash Policy: layer3+4 (1)
MII Status: up
MII Polling Interval (ms): 100
Up Delay (ms): 200
Down Delay (ms): 0
Peer Notification Delay (ms): 0

802.3ad info
LACP active: on
LACP rate: fast
Min links: 0
Aggregator selection policy (ad_select): stable

Slave Interface: eth1
MII Status: up
Speed: 10000 Mbps
Duplex: full
Link Failure Count: 0
Permanent HW addr: 52:54:00:bb:00:01
Slave queue ID: 0
Aggregator ID: 1
Actor Churn State: none
details actor lacp pdu:
    system priority: 65535
    port state: 63

Slave Interface: eth2
MII Status: up
Speed: 10000 Mbps
Duplex: full
Link Failure Count: 0
Permanent HW addr: 52:54:00:bb:00:02
Slave queue ID: 0
Aggregator ID: 1
Actor Churn State: none
"""


def test_proc_bonding_parser_reads_mode_active_slave_and_each_slave_link():
    state = bonding.parse_proc_bonding("bond0", ACTIVE_BACKUP)
    assert state.mode == "fault-tolerance (active-backup)"
    assert state.mii_up and state.active_slave == "eth2"
    assert state.slaves == (bonding.SlaveState("eth1", False), bonding.SlaveState("eth2", True))


def test_bond_with_a_dead_slave_warns_that_redundancy_is_gone():
    from haqueue.ops.check import bond_row

    row = bond_row(bonding.parse_proc_bonding("bond0", ACTIVE_BACKUP))
    assert row.status == WARN
    assert "down: eth1" in row.detail and "1/2 slaves up" in row.detail


def test_healthy_lacp_bond_is_ok_and_a_dead_bond_fails():
    from haqueue.ops.check import bond_row

    assert bond_row(bonding.parse_proc_bonding("bond0", LACP)).status == OK
    dead = LACP.replace("MII Status: up", "MII Status: down")
    assert bond_row(bonding.parse_proc_bonding("bond0", dead)).status == FAIL


def test_proc_bonding_without_mii_status_is_reported_not_crashed():
    with pytest.raises(ValueError, match="no 'MII Status' line"):
        bonding.parse_proc_bonding("bond0", "Bonding Mode: x\n")
