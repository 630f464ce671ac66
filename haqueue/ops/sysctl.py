"""Kernel settings per host role, rendered as sysctl.d files and read back by `ops check`.

Owns the one table of what each role needs from the kernel: a queue node in the
collocated-VRRP topology (`node`), a queue node behind an LVS director pair
(`realserver`), and an LVS director (`director`). The same table drives the
rendered `/etc/sysctl.d/60-haqueue-ROLE.conf` and the sysctl rows of `ops check`,
so what we deploy and what we verify cannot drift apart.

Rules:
- Every setting carries its reason; the reason is rendered as a comment above it.
- A setting is `required` when the role is wrong without it (LVS ARP handling,
  forwarding on a director): `ops check` FAILs on it. Tuning values only WARN.
- Values from the seed's tuning list that are removed, harmful or pointless on a
  current kernel are not rendered; each appears in an "intentionally left out"
  comment block that says why, so nobody adds it back from an old blog post.
- A key that exists only once a kernel module is loaded (ip_vs) or an interface
  exists names that dependency; everything else must exist under /proc/sys on
  any kernel haqueue supports (tests check this against the running kernel).
- Output is deterministic: no clocks, no host facts; only the cluster file.

File name: 60- sorts after the distribution's defaults (10-, 50-default.conf from
systemd, which sets rp_filter and friends) and before 99-sysctl.conf
(/etc/sysctl.conf), so a local override by the operator still wins.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass

from haqueue.config.cluster import Cluster
from haqueue.ops import render
from haqueue.ops.render import RenderedFile

ROLES = ("node", "director", "realserver")

ROLE_TITLES = {
    "node": "queue node, collocated VRRP (keepalived on the node moves the VIP)",
    "director": "LVS director (keepalived holds the VIP, ip_vs forwards to the leader)",
    "realserver": "queue node behind LVS directors (in DR and TUN modes the VIP sits on its lo)",
}

SYSCTL_DIR = "/etc/sysctl.d"


def file_name(role: str) -> str:
    return f"60-haqueue-{role}.conf"


@dataclass(frozen=True)
class Setting:
    """One sysctl key this role sets, with the reason rendered above it."""

    key: str
    value: str
    why: str
    required: bool = False
    # The key exists only once this module is loaded (e.g. "ip_vs").
    module: str | None = None
    # The key is per interface and exists only once this interface does.
    interface: str | None = None

    @property
    def proc_path(self) -> str:
        return proc_path(self.key)


@dataclass(frozen=True)
class Omitted:
    """A seed value deliberately not rendered, and why."""

    key: str
    seed_value: str
    why: str


@dataclass(frozen=True)
class Section:
    title: str
    settings: tuple[Setting, ...]


def proc_path(key: str) -> str:
    """`net.ipv4.conf.lo.arp_ignore` -> `/proc/sys/net/ipv4/conf/lo/arp_ignore`.

    Interface names containing dots (VLANs, eth0.100) are written with '/' in
    dotted sysctl keys, as sysctl(8) does; such a '/' becomes a '.' in the path.
    """
    return "/proc/sys/" + "/".join(part.replace("/", ".") for part in key.split("."))


def normalize(value: str) -> str:
    """/proc/sys separates multi-value settings with tabs; sysctl.d with spaces."""
    return " ".join(value.split())


# -- the tables ------------------------------------------------------------

def _reserved_ports(cluster: Cluster) -> str:
    # The id service's UDP port too (0: off): reserved ports hold for UDP as for TCP.
    ports = sorted({p for n in cluster.nodes for p in (n.client_port, n.raft_port, n.admin_port, n.id_port, n.gearman_port) if p})
    return ",".join(str(p) for p in ports)


def _connection_bursts() -> Section:
    # A failover closes every client connection on the old leader and all
    # workers reconnect to the new one within about a second.
    return Section(
        "Connection bursts: after a failover every worker reconnects to the new leader at once",
        (
            Setting(
                "net.core.somaxconn", "40960",
                "Upper bound on any listen() backlog (kernel default 4096). The new leader's "
                "accept queue takes the whole reconnect burst; the kernel silently clips the "
                "server's backlog to this value.",
            ),
            Setting(
                "net.ipv4.tcp_max_syn_backlog", "40960",
                "Half-open connections queued per listener during the same burst (the "
                "kernel sizes the default from RAM, e.g. 2048).",
            ),
            Setting(
                "net.ipv4.tcp_syncookies", "1",
                "If the SYN queue still overflows, answer with cookies instead of dropping. "
                "Already the default; stated so that nobody turns it off.",
            ),
            Setting(
                "net.ipv4.tcp_synack_retries", "1",
                "A half-open connection whose client went away is dropped after ~3s instead of "
                "~63s, freeing the SYN queue; a client whose SYN-ACK was lost retries its SYN.",
            ),
        ),
    )


def _packet_path() -> Section:
    return Section(
        "Packet path: softirq and receive queues (see docs/operations-host.md, softirq/RSS)",
        (
            Setting(
                "net.core.netdev_max_backlog", "40960",
                "Per-CPU queue of received packets waiting for softirq processing (default "
                "1000). Packets beyond it are dropped before TCP sees them; raise it when one "
                "CPU takes the NIC's interrupts (no RSS). Global: not visible in a network "
                "namespace.",
            ),
        ),
    )


def _connection_lifetime(cluster: Cluster) -> Section:
    return Section(
        "Connection lifetime and ports",
        (
            Setting(
                "net.ipv4.tcp_fin_timeout", "30",
                "Orphaned connections in FIN-WAIT-2 are reclaimed after 30s instead of 60s: "
                "workers that vanish mid-close stop holding memory.",
            ),
            Setting(
                "net.ipv4.tcp_keepalive_time", "1800",
                "For sockets with SO_KEEPALIVE: a worker host that died silently (power, cable) "
                "is noticed after 30 min instead of 2 h, its connection closes and the jobs it "
                "reserved go back to ready.",
            ),
            Setting(
                "net.ipv4.tcp_syn_retries", "1",
                "Outgoing connects (Raft peers, the leader check) give up after ~3s instead of "
                "~127s: an unreachable peer fails fast and pysyncobj retries on its own schedule.",
            ),
            Setting(
                "net.ipv4.tcp_tw_reuse", "1",
                "Outgoing connections may reuse a TIME-WAIT port when TCP timestamps prove it "
                "safe. Affects only connect(), never the listener; needs tcp_timestamps=1.",
            ),
            Setting(
                "net.ipv4.ip_local_reserved_ports", _reserved_ports(cluster),
                "haqueue's client, Raft and admin ports from the cluster file: an outgoing "
                "connection can never take one of them as its ephemeral port, so a node that "
                "becomes leader can always bind its listener.",
            ),
        ),
    )


def _buffers() -> Section:
    return Section(
        "Socket buffers",
        (
            Setting(
                "net.ipv4.tcp_wmem", "4096 16384 16777216",
                "Send-buffer autotuning may grow to 16 MiB (default ceiling 4 MiB) for large "
                "jobs to distant workers. Minimum and initial size stay at the kernel's "
                "defaults: they apply to every socket, and a queue has thousands of idle ones.",
            ),
            Setting(
                "net.core.rmem_max", "16777216",
                "Ceiling for an explicit SO_RCVBUF (default 4 MiB); matches the TCP ceiling.",
            ),
            Setting(
                "net.core.wmem_max", "16777216",
                "Ceiling for an explicit SO_SNDBUF (default 4 MiB); matches the TCP ceiling.",
            ),
            Setting(
                "net.core.rmem_default", "1048576",
                "Initial receive buffer of non-TCP sockets, notably the netlink sockets of "
                "keepalived and `haqueue ops check`: a burst of address events while the VIP "
                "moves does not overflow them (ENOBUFS).",
            ),
            Setting(
                "net.core.wmem_default", "1048576",
                "Initial send buffer of non-TCP sockets; pairs with rmem_default.",
            ),
        ),
    )


def _node_vip() -> Section:
    return Section(
        "The VIP on a collocated-VRRP node",
        (
            Setting(
                "net.ipv4.ip_nonlocal_bind", "1",
                "A new leader may bind the VIP before keepalived has moved it here (up to about "
                "a second later), so the listener does not have to wait for the address.",
            ),
        ),
    )


def _realserver_arp() -> Section:
    why_ignore = (
        "The VIP sits on lo of every real server. Answer ARP only for addresses configured on "
        "the interface the request came in on, so only the director answers for the VIP; "
        "otherwise a real server would steal the VIP's traffic. The kernel uses the larger of "
        "'all' and the interface's value, so 'all' covers every interface."
    )
    why_announce = (
        "In ARP requests this host sends, use the outgoing interface's own address as sender, "
        "never the VIP from lo: neighbours must not learn the VIP at a real server's MAC."
    )
    return Section(
        "LVS DR/TUN real server: keep the VIP on lo invisible to ARP",
        (
            Setting("net.ipv4.conf.all.arp_ignore", "1", why_ignore, required=True),
            Setting("net.ipv4.conf.lo.arp_ignore", "1", "Same, stated on lo itself as the LVS recipe does.", required=True),
            Setting("net.ipv4.conf.all.arp_announce", "2", why_announce, required=True),
            Setting("net.ipv4.conf.lo.arp_announce", "2", "Same, stated on lo itself.", required=True),
        ),
    )


def _director(cluster: Cluster) -> Section:
    interfaces = sorted({d.interface for d in cluster.directors})
    redirect_why = (
        "NAT mode on one segment: replies from real servers come in and go out of the same "
        "interface, and the kernel would answer with ICMP redirects telling them to bypass the "
        "director (which must de-NAT them). The kernel sends redirects if 'all' OR the "
        "interface allows it, so all three are needed. Harmless in DR/TUN."
    )
    settings = [
        Setting(
            "net.ipv4.ip_forward", "1",
            "Required in NAT mode (real servers route their replies through the director); the "
            "LVS recipe sets it for DR and TUN too, where it is harmless.",
            required=True,
        ),
        Setting(
            "net.core.netdev_max_backlog", "40960",
            "A director's work is softirq: every client packet passes through it. Per-CPU queue "
            "of received packets before the stack drops them (default 1000).",
        ),
        Setting("net.ipv4.conf.all.send_redirects", "0", redirect_why),
        Setting("net.ipv4.conf.default.send_redirects", "0", "Same, for interfaces created later."),
    ]
    for ifname in interfaces:
        settings.append(
            Setting(
                f"net.ipv4.conf.{ifname}.send_redirects", "0",
                f"Same, for {ifname} (it usually exists before sysctl.d is applied, so the "
                "'default' value never reaches it).",
                interface=ifname,
            )
        )
    settings += [
        Setting(
            "net.ipv4.vs.expire_nodest_conn", "1",
            "When the leader check removes a real server (it lost Raft leadership), drop its "
            "connections at their next packet instead of black-holing them: clients see a "
            "reset, reconnect and reach the new leader. Needs the ip_vs module.",
            module="ip_vs",
        ),
        Setting(
            "net.ipv4.vs.sloppy_tcp", "1",
            "After a director failover the new master has no connection table; let it create "
            "entries for mid-stream packets. Only the leader passes the health check, so the "
            "entry points at the same real server and established connections survive. Needs "
            "the ip_vs module.",
            module="ip_vs",
        ),
    ]
    return Section("LVS director: forwarding and the ip_vs connection table", tuple(settings))


def _conn_tab_note(cluster: Cluster) -> str:
    bits = cluster.lvs.conn_tab_bits
    return (
        "ip_vs connection table: its size is the ip_vs module parameter conn_tab_bits, not a "
        f"sysctl. This cluster uses lvs.conn_tab_bits = {bits} ({2 ** bits} buckets; the module's "
        "default is 12, its maximum 20). Buckets chain their entries, so the table never fills, "
        "but lookups slow down past a few connections per bucket: allow about one bucket per "
        f"concurrent connection. Set it with `options ip_vs conn_tab_bits={bits}` under "
        "/etc/modprobe.d/ before ip_vs loads (keepalived loads it at start)."
    )


_NAT_NOTE = (
    "NAT mode (lvs.mode = \"nat\"): the director rewrites the VIP to this host's address, so "
    "the VIP never sits on this host and no ARP settings are needed; the default route must "
    "point at lvs.nat_gateway, which the directors hold."
)

_TUN_NOTE = (
    "TUN mode: decapsulated packets arrive on tunl0 with the client's source address, which "
    "strict reverse-path filtering drops. The lvs-realserver.sh gen-lvs renders sets loose "
    "rp_filter (2) on tunl0 and lowers its MTU and the advertised MSS by the 20-byte IPIP "
    "header; tunl0 exists only after the ipip module loads, which is why it is not set here."
)


# The seed's list, entries not rendered, with the reason.
_OMITTED_TCP = (
    Omitted(
        "net.ipv4.tcp_tw_recycle", "1",
        "Removed in Linux 4.12 (sysctl fails on the unknown key). Before that it dropped SYNs "
        "from clients behind NAT, whose timestamps are not monotonic across hosts.",
    ),
    Omitted(
        "net.ipv4.tcp_timestamps", "0",
        "Keep timestamps on (the default): tcp_tw_reuse and PAWS protection depend on them.",
    ),
    Omitted(
        "net.ipv4.tcp_max_tw_buckets", "8192",
        "Lowering it destroys TIME-WAIT sockets early (the kernel logs 'time wait bucket table "
        "overflow') and removes the protection TIME-WAIT exists for; TIME-WAIT sockets cost a "
        "few hundred bytes each. The kernel sizes it from RAM.",
    ),
    Omitted(
        "net.ipv4.tcp_max_orphans", "40960",
        "The kernel sizes it from RAM (131072 with a few GiB); a fixed 40960 lowers it on "
        "most current hosts.",
    ),
    Omitted(
        "net.ipv4.ip_local_port_range", "1024 65000",
        "A node makes few outgoing connections (its Raft peers), so the default 32768-60999 is "
        "plenty; starting at 1024 lets an ephemeral port take the port of a service that has "
        "not started yet. haqueue's own ports are reserved above instead.",
    ),
    Omitted(
        "net.ipv4.tcp_rmem", "4194304 8388608 16777216",
        "Receive autotuning already grows to 6-32 MiB by RAM on current kernels; the seed's "
        "4 MiB minimum and 8 MiB initial size apply to every socket, thousands of them.",
    ),
    Omitted(
        "net.ipv4.udp_mem", "4194304 8388608 16777216",
        "In pages, not bytes: the seed's value is 64 GiB, which disables UDP memory pressure. "
        "The kernel sizes it from RAM, and haqueue uses no UDP (VRRP is IP protocol 112).",
    ),
    Omitted(
        "net.ipv4.udp_rmem_min", "1048576",
        "haqueue, its Raft traffic and VRRP use no UDP sockets.",
    ),
    Omitted(
        "net.ipv4.udp_wmem_min", "1048576",
        "haqueue, its Raft traffic and VRRP use no UDP sockets.",
    ),
)

_OMITTED_DIRECTOR = (
    Omitted(
        "net.ipv4.tcp_*", "(the seed's TCP list)",
        "A director forwards client connections inside ip_vs and terminates none of them "
        "(only its own health checks), so socket tuning does nothing here.",
    ),
)


def sections(role: str, cluster: Cluster) -> tuple[Section, ...]:
    """The settings a role needs, grouped as rendered."""
    if role == "node":
        return (_connection_bursts(), _packet_path(), _connection_lifetime(cluster), _buffers(), _node_vip())
    if role == "realserver":
        common = (_connection_bursts(), _packet_path(), _connection_lifetime(cluster), _buffers())
        return common if cluster.lvs.mode == "nat" else common + (_realserver_arp(),)
    if role == "director":
        return (_director(cluster),)
    raise ValueError(f"unknown role {role!r} (roles: {', '.join(ROLES)})")


def settings(role: str, cluster: Cluster) -> tuple[Setting, ...]:
    return tuple(s for section in sections(role, cluster) for s in section.settings)


def omitted(role: str) -> tuple[Omitted, ...]:
    return _OMITTED_DIRECTOR if role == "director" else _OMITTED_TCP


_MODULES_LOAD_NOTE = (
    "The net.ipv4.vs.* keys below exist only while ip_vs is loaded. At boot "
    "systemd-modules-load runs before systemd-sysctl, so list ip_vs in "
    "/etc/modules-load.d/ (ops/install.sh writes haqueue-ip_vs.conf) and they apply."
)


def _notes(role: str, cluster: Cluster) -> tuple[str, ...]:
    if role == "director":
        return (_conn_tab_note(cluster), _MODULES_LOAD_NOTE)
    if role == "realserver" and cluster.lvs.mode == "tun":
        return (_TUN_NOTE,)
    if role == "realserver" and cluster.lvs.mode == "nat":
        return (_NAT_NOTE,)
    return ()


# -- rendering -------------------------------------------------------------

_WIDTH = 88


def _comment(text: str, indent: str = "") -> list[str]:
    return textwrap.wrap(text, _WIDTH - 2 - len(indent), initial_indent="# " + indent,
                         subsequent_indent="# " + indent, break_on_hyphens=False)


def render_sysctl(cluster: Cluster, role: str, command: str) -> RenderedFile:
    """The sysctl.d file for one role; `command` is what regenerates it (for the header)."""
    lines = [render.header(command, install=f"{SYSCTL_DIR}/{file_name(role)}").rstrip("\n")]
    lines += [
        f"# role: {ROLE_TITLES[role]}",
        f"# apply: sysctl --system    verify: haqueue ops check --config {cluster.deploy.config_path}",
    ]
    for note in _notes(role, cluster):
        lines.append("#")
        lines += _comment(note)
    for section in sections(role, cluster):
        lines += ["", f"# == {section.title} =="]
        for setting in section.settings:
            lines.append("")
            why = setting.why
            if setting.required:
                why += " [required for this role: ops check fails without it]"
            lines += _comment(why)
            lines.append(f"{setting.key} = {setting.value}")
    lines += ["", "# == Intentionally left out (from the classic LVS tuning list) =="]
    for item in omitted(role):
        lines.append("#")
        lines.append(f"# {item.key} = {item.seed_value}")
        lines += _comment(item.why, indent="  ")
    return RenderedFile(file_name(role), "\n".join(lines) + "\n")


def render_all(cluster: Cluster, roles: tuple[str, ...], command: str) -> list[RenderedFile]:
    return [render_sysctl(cluster, role, command) for role in roles]


class SysctlParseError(ValueError):
    pass


def parse_sysctl_conf(text: str) -> list[tuple[str, str]]:
    """Parse sysctl.d syntax as systemd-sysctl does: `key = value`, '#'/';' comments.

    Used by the tests to read back what was rendered; raises on a malformed line.
    """
    out = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        key, sep, value = line.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key or not value or " " in key:
            raise SysctlParseError(f"line {number}: not 'key = value': {raw!r}")
        out.append((key.lstrip("-"), value))
    return out
