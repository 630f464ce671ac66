"""`haqueue ops check`: does this host look the way the cluster file says it should?

Two halves, so that the judgement is testable without a host:
- `gather(...)` reads the live host: links and addresses over netlink (pyroute2),
  sysctls from /proc/sys, keepalived from the process table (psutil), bonds from
  /proc/net/bonding, the ip_vs table from /proc/net/ip_vs, and the node's Raft role
  from its HTTP admin endpoint (`GET /leader`: 200 on the leader that serves
  clients, 503 elsewhere). Everything it reads is per network namespace except the process
  table, so keepalived counts only when it runs in this host's namespace.
- `evaluate(...)` turns those facts into rows (check, OK/WARN/FAIL, detail).
  Pure: no I/O, no clock.

Severity: FAIL when the host cannot do its job or would break the cluster (a
missing interface, the VIP on a follower, a real server answering ARP for the
VIP, a required sysctl off); WARN for tuning drift and for what cannot be decided
(the leader endpoint is unreachable, so nobody can say whether the VIP belongs
here). The command exits non-zero when any row FAILs.

Roles: `node` (collocated VRRP: keepalived on the node moves the VIP to the Raft
leader), `realserver` (a node behind LVS directors), `director`. The role
defaults from the cluster file: a member of [[directors]] is a director; a node
is a real server when the file has directors, else a collocated node.
"""

from __future__ import annotations

import ipaddress
import os
import socket
from dataclasses import dataclass, field
from pathlib import Path

from haqueue import admin_client
from haqueue.config.cluster import Cluster, Node
from haqueue.ops import lvs
from haqueue.ops import sysctl as sysctl_table
from haqueue.ops.bonding import BondState, parse_proc_bonding

OK, WARN, FAIL = "OK", "WARN", "FAIL"
IFF_UP = 0x1
DEFAULT_LEADER_TIMEOUT = 1.0


class CheckError(ValueError):
    """The check cannot start (which member is this host?); one line."""


@dataclass(frozen=True)
class Row:
    check: str
    status: str
    detail: str


@dataclass(frozen=True)
class Link:
    name: str
    admin_up: bool
    operstate: str  # "UP", "DOWN", "UNKNOWN" (loopback, dummy), "LOWERLAYERDOWN" ...
    kind: str | None  # "bond", "veth", None for physical NICs
    addresses: tuple[ipaddress.IPv4Interface, ...]


@dataclass(frozen=True)
class LeaderProbe:
    state: str  # "leader", "follower", "unreachable" or "unknown" (an unexpected answer)
    detail: str


@dataclass(frozen=True)
class Keepalived:
    pids: tuple[int, ...]  # top-level keepalived processes in this network namespace
    elsewhere: int  # top-level keepalived processes in other namespaces


@dataclass
class HostFacts:
    links: dict[str, Link]
    sysctls: dict[str, str | None]  # key -> value, None when /proc/sys has no such file
    keepalived: Keepalived
    leader: LeaderProbe | None  # None when not asked (directors)
    bonds: dict[str, str] = field(default_factory=dict)  # name -> /proc/net/bonding text
    ip_vs: str | None = None  # /proc/net/ip_vs, None when the module is not loaded

    def holders(self, ip: ipaddress.IPv4Address) -> list[tuple[str, ipaddress.IPv4Interface]]:
        return [(link.name, a) for link in self.links.values() for a in link.addresses if a.ip == ip]


# -- which member, which role ----------------------------------------------

def members(cluster: Cluster) -> tuple[Node, ...]:
    return cluster.nodes + cluster.directors


def find_member(cluster: Cluster, member_id: str) -> Node:
    for m in members(cluster):
        if m.id == member_id:
            return m
    known = ", ".join(m.id for m in members(cluster))
    raise CheckError(f"{cluster.source}: no node or director {member_id!r} (known: {known})")


def detect_member(cluster: Cluster, local_addresses: set[str]) -> Node:
    """The member whose address is configured on this host; exactly one must be."""
    found = [m for m in members(cluster) if m.address in local_addresses]
    if not found:
        listed = ", ".join(f"{m.id}={m.address}" for m in members(cluster))
        raise CheckError(f"none of the cluster's addresses is configured here ({listed}); pass --node")
    if len(found) > 1:
        ids = ", ".join(m.id for m in found)
        raise CheckError(f"several cluster addresses are configured here ({ids}); pass --node")
    return found[0]


def default_role(cluster: Cluster, member: Node) -> str:
    if member in cluster.directors:
        return "director"
    return "realserver" if cluster.directors else "node"


# -- gathering (I/O) ---------------------------------------------------------

def read_links() -> dict[str, Link]:
    from pyroute2 import IPRoute

    with IPRoute() as ipr:
        addrs: dict[int, list[ipaddress.IPv4Interface]] = {}
        for msg in ipr.get_addr(family=socket.AF_INET):
            addrs.setdefault(msg["index"], []).append(
                ipaddress.IPv4Interface(f"{msg.get('address')}/{msg['prefixlen']}")
            )
        links = {}
        for msg in ipr.get_links():
            info = msg.get("linkinfo")
            name = msg.get("ifname")
            links[name] = Link(
                name=name,
                admin_up=bool(msg["flags"] & IFF_UP),
                operstate=msg.get("operstate") or "UNKNOWN",
                kind=info.get("kind") if info else None,
                addresses=tuple(addrs.get(msg["index"], ())),
            )
    return links


def read_sysctls(keys: list[str]) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for key in keys:
        try:
            out[key] = Path(sysctl_table.proc_path(key)).read_text().strip()
        except (FileNotFoundError, NotADirectoryError):
            out[key] = None
    return out


_GONE = -1


def _netns_inode(pid: int | str) -> int | None:
    """Inode of the process's network namespace; None if not ours to read, _GONE if it exited."""
    try:
        return os.stat(f"/proc/{pid}/ns/net").st_ino
    except PermissionError:
        return None
    except OSError:
        return _GONE


def read_keepalived() -> Keepalived:
    import psutil

    mine = _netns_inode("self")
    here, elsewhere = [], 0
    procs = {p.pid: p for p in psutil.process_iter(["name", "ppid"]) if p.info["name"] == "keepalived"}
    for pid, proc in sorted(procs.items()):
        if proc.info["ppid"] in procs:  # keepalived's VRRP/checker children
            continue
        ns = _netns_inode(pid)
        if ns == _GONE:  # exited since the listing (e.g. a `keepalived --config-test`)
            continue
        # Unreadable namespace (not root): count it here rather than hide it.
        if ns is None or ns == mine:
            here.append(pid)
        else:
            elsewhere += 1
    return Keepalived(pids=tuple(here), elsewhere=elsewhere)


def probe_leader(member: Node, timeout: float) -> LeaderProbe:
    """Ask the node's admin endpoint whether it is the Raft leader that serves clients."""
    url = f"{member.admin_url}/leader"
    try:
        status, _ = admin_client.get(member.address, member.admin_port, "/leader", timeout)
    except OSError as exc:
        return LeaderProbe("unreachable", f"GET {url}: {exc.strerror or exc}")
    if status == 200:
        return LeaderProbe("leader", f"GET {url}: 200")
    if status == 503:
        return LeaderProbe("follower", f"GET {url}: 503")
    return LeaderProbe("unknown", f"GET {url}: unexpected status {status}")


def read_bonds(directory: Path = Path("/proc/net/bonding")) -> dict[str, str]:
    try:
        return {p.name: p.read_text() for p in sorted(directory.iterdir())}
    except (FileNotFoundError, NotADirectoryError):
        return {}


def read_ip_vs(path: Path = Path("/proc/net/ip_vs")) -> str | None:
    try:
        return path.read_text()
    except FileNotFoundError:
        return None


def gather(cluster: Cluster, member: Node, role: str, timeout: float = DEFAULT_LEADER_TIMEOUT,
           links: dict[str, Link] | None = None) -> HostFacts:
    links = links if links is not None else read_links()
    keys = [s.key for s in sysctl_table.settings(role, cluster)]
    if role == "director":
        leader = None
    elif member.address in local_addresses(links):
        leader = probe_leader(member, timeout)
    else:
        # The check inspects this host: never send the probe to another machine.
        leader = LeaderProbe("unknown", f"not asked: {member.address} is not configured on this host")
    return HostFacts(
        links=links,
        sysctls=read_sysctls(keys),
        keepalived=read_keepalived(),
        leader=leader,
        bonds=read_bonds(),
        ip_vs=read_ip_vs() if role == "director" else None,
    )


def local_addresses(links: dict[str, Link]) -> set[str]:
    return {str(a.ip) for link in links.values() for a in link.addresses}


# -- evaluation (pure) -------------------------------------------------------

def evaluate(cluster: Cluster, member: Node, role: str, facts: HostFacts) -> list[Row]:
    rows = [Row("member", OK, f"{member.id} ({role}) at {member.address}")]
    rows += _interface_rows(member, facts)
    rows += _address_rows(member, facts)
    if facts.leader is not None:
        rows.append(_leader_row(facts.leader))
    rows += _vip_rows(cluster, member, role, facts, cluster.lvs.mode)
    rows += _sysctl_rows(cluster, role, facts)
    if role in ("node", "director"):
        rows.append(_keepalived_row(facts.keepalived))
    if role == "director":
        rows.append(_ip_vs_row(cluster, facts))
    rows += _bond_rows(member, facts)
    return rows


def _interface_rows(member: Node, facts: HostFacts) -> list[Row]:
    name = f"interface {member.interface}"
    link = facts.links.get(member.interface)
    if link is None:
        present = ", ".join(sorted(facts.links)) or "none"
        return [Row(name, FAIL, f"missing (links here: {present})")]
    if not link.admin_up:
        return [Row(name, FAIL, f"administratively down (ip link set {member.interface} up)")]
    if link.operstate in ("DOWN", "LOWERLAYERDOWN", "NOTPRESENT"):
        return [Row(name, FAIL, f"up but no carrier (operstate {link.operstate})")]
    kind = f", {link.kind}" if link.kind else ""
    return [Row(name, OK, f"up (operstate {link.operstate}{kind})")]


def _address_rows(member: Node, facts: HostFacts) -> list[Row]:
    name = f"address {member.address}"
    holders = facts.holders(ipaddress.IPv4Address(member.address))
    on_iface = [a for ifname, a in holders if ifname == member.interface]
    if on_iface:
        return [Row(name, OK, f"on {member.interface} as {on_iface[0].with_prefixlen}")]
    if holders:
        where = ", ".join(sorted({ifname for ifname, _ in holders}))
        return [Row(name, FAIL, f"on {where}, not on {member.interface} as the cluster file says")]
    return [Row(name, FAIL, f"not configured on this host (expected on {member.interface})")]


def _leader_row(probe: LeaderProbe) -> Row:
    if probe.state == "unreachable":
        return Row("raft role", FAIL, f"unknown: admin endpoint unreachable ({probe.detail})")
    if probe.state == "unknown":
        return Row("raft role", FAIL, f"unknown: {probe.detail}")
    return Row("raft role", OK, f"{probe.state} ({probe.detail})")


def _vip_rows(cluster: Cluster, member: Node, role: str, facts: HostFacts, lvs_mode: str) -> list[Row]:
    vip = cluster.vip
    name = f"vip {vip.ip}"
    holders = facts.holders(vip.ip)
    on_iface = [a for ifname, a in holders if ifname == member.interface]
    # A one-host lab puts its nodes on lo: there lo *is* the member's interface.
    on_lo = [a for ifname, a in holders if ifname == "lo" and member.interface != "lo"]
    others = sorted({ifname for ifname, _ in holders if ifname not in (member.interface, "lo")})
    rows: list[Row] = []
    if others:
        rows.append(Row(name, FAIL, f"present on {', '.join(others)}: expected only on "
                                    f"{'lo' if role == 'realserver' else member.interface}"))

    if role == "realserver":
        if on_iface:
            rows.append(Row(name, FAIL, f"present on {member.interface}: a real server must hold the VIP "
                                        "only on lo, or it answers ARP for it and steals its traffic"))
        if lvs_mode == "nat":
            if on_lo:
                rows.append(Row(name, WARN, "present on lo: not needed in NAT mode (the director rewrites "
                                            "the destination to the real server's address)"))
            elif not on_iface:
                rows.append(Row(name, OK, "absent (NAT mode: the director holds it)"))
        elif not on_lo:
            rows.append(Row(name, FAIL, f"not on lo: in {lvs_mode.upper()} mode packets for the VIP arrive "
                                        "unchanged and are dropped (run lvs-realserver.sh start from gen-lvs)"))
        elif on_lo[0].network.prefixlen != 32:
            rows.append(Row(name, FAIL, f"on lo as {on_lo[0].with_prefixlen}: must be /32, a wider prefix "
                                        "on lo makes the whole subnet local to this host"))
        elif not on_iface:
            rows.append(Row(name, OK, f"on lo as {on_lo[0].with_prefixlen}, not on {member.interface}"))
        return rows

    if on_lo:
        rows.append(Row(name, FAIL, "present on lo: only LVS real servers hold the VIP on lo"))
    if role == "director":
        if on_iface:
            rows.append(Row(name, OK, f"present on {member.interface}: this director is the VRRP master"))
        elif not holders:
            rows.append(Row(name, OK, "absent: this director is the VRRP backup"))
        return rows

    # Collocated VRRP: the VIP belongs on the Raft leader's interface, nowhere else.
    here = bool(on_iface)
    where = f"present on {member.interface}" if here else f"absent from {member.interface}"
    leader = facts.leader.state if facts.leader else "unknown"
    if leader not in ("leader", "follower"):
        rows.append(Row(name, WARN, f"{where}; cannot tell whether it belongs here (raft role unknown)"))
    elif here and leader == "follower":
        rows.append(Row(name, FAIL, f"{where} but this node is a follower: clients reach a node that "
                                    "does not serve (is keepalived's leader check working?)"))
    elif not here and leader == "leader":
        rows.append(Row(name, FAIL, f"{where} but this node is the Raft leader: clients cannot reach it "
                                    "(keepalived not running, or not moved yet: it should within ~1 s)"))
    else:
        rows.append(Row(name, OK, f"{where}; this node is the {leader}"))
    return rows


def _port_set(text: str) -> set[int]:
    ports: set[int] = set()
    for part in text.replace(" ", "").split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        ports.update(range(int(lo), int(hi or lo) + 1))
    return ports


def _sysctl_rows(cluster: Cluster, role: str, facts: HostFacts) -> list[Row]:
    rows = []
    source = f"{sysctl_table.SYSCTL_DIR}/{sysctl_table.file_name(role)}"
    for setting in sysctl_table.settings(role, cluster):
        name = f"sysctl {setting.key}"
        actual = facts.sysctls.get(setting.key)
        want = sysctl_table.normalize(setting.value)
        if actual is None:
            if setting.module:
                detail = f"absent: module {setting.module} not loaded (want {want})"
            elif setting.interface:
                detail = f"absent: no interface {setting.interface} (want {want})"
            else:
                detail = f"absent on this kernel or not visible in this network namespace (want {want})"
            rows.append(Row(name, FAIL if setting.required else WARN, detail))
            continue
        have = sysctl_table.normalize(actual)
        if setting.key == "net.ipv4.ip_local_reserved_ports":
            missing = _port_set(want) - _port_set(have)
            good = not missing
        else:
            good = have == want
        if good:
            rows.append(Row(name, OK, have))
        else:
            rows.append(Row(name, FAIL if setting.required else WARN,
                            f"is {have or '(empty)'}, want {want} ({source})"))
    return rows


def _keepalived_row(k: Keepalived) -> Row:
    if k.pids:
        pids = ", ".join(str(p) for p in k.pids)
        return Row("keepalived", OK, f"running (pid {pids})")
    extra = f"; {k.elsewhere} running in other network namespaces" if k.elsewhere else ""
    return Row("keepalived", FAIL, f"not running in this network namespace{extra}")


def _ip_vs_row(cluster: Cluster, facts: HostFacts) -> Row:
    if facts.ip_vs is None:
        return Row("ip_vs", FAIL, "module not loaded (/proc/net/ip_vs missing): keepalived cannot "
                                  "configure the virtual server")
    # gen-lvs renders a TCP virtual server for the queue, and one for each other port served.
    wanted = lvs.virtual_ports(cluster)
    services = {tuple(line.split()[:2]) for line in facts.ip_vs.splitlines() if line[:3] in ("TCP", "UDP")}
    missing = [(proto, port) for proto, port in wanted
               if (proto, f"{int(cluster.vip.ip):08X}:{port:04X}") not in services]
    named = ", ".join(f"{cluster.vip.ip}:{port}/{proto.lower()}" for proto, port in (missing or wanted))
    if not missing:
        return Row("ip_vs", OK, f"virtual server {named} configured")
    return Row("ip_vs", WARN, f"no virtual server {named} yet (keepalived adds it at start)")


def _bond_rows(member: Node, facts: HostFacts) -> list[Row]:
    rows = []
    link = facts.links.get(member.interface)
    if link is not None and link.kind == "bond" and member.interface not in facts.bonds:
        rows.append(Row(f"bond {member.interface}", WARN, "is a bond but /proc/net/bonding has no entry"))
    for name, text in sorted(facts.bonds.items()):
        try:
            state = parse_proc_bonding(name, text)
        except ValueError as exc:
            rows.append(Row(f"bond {name}", WARN, str(exc)))
            continue
        rows.append(bond_row(state))
    return rows


def bond_row(state: BondState) -> Row:
    name = f"bond {state.name}"
    up = [s.name for s in state.slaves if s.mii_up]
    down = [s.name for s in state.slaves if not s.mii_up]
    summary = f"{state.mode or 'unknown mode'}, {len(up)}/{len(state.slaves)} slaves up"
    if state.active_slave:
        summary += f", active {state.active_slave}"
    if not state.mii_up or not up:
        return Row(name, FAIL, f"link down ({summary})")
    if down:
        return Row(name, WARN, f"{summary}; down: {', '.join(down)} (no redundancy left)")
    if len(state.slaves) < 2:
        return Row(name, WARN, f"{summary}: a single slave has nothing to fail over to")
    return Row(name, OK, summary)


def failed(rows: list[Row]) -> bool:
    return any(r.status == FAIL for r in rows)


def format_table(rows: list[Row]) -> str:
    width = max(len(r.check) for r in rows)
    lines = [f"{'CHECK'.ljust(width)}  STATUS  DETAIL"]
    lines += [f"{r.check.ljust(width)}  {r.status.ljust(6)}  {r.detail}" for r in rows]
    return "\n".join(lines) + "\n"
