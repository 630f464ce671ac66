"""LVS director pair: keepalived.conf for two directors, and the real-server side, in DR, TUN or NAT mode.

Owns `gen-lvs`'s output:
- `keepalived-DIRECTOR.conf` per director: a VRRP instance (both BACKUP with
  nopreempt) holding the VIP, and a `virtual_server VIP CLIENT_PORT` whose
  real servers are the queue nodes, each checked with HTTP_GET on its admin
  port's `/leader` (200 only on the Raft leader). A TCP check would pass on
  followers too, and ip_vs would send clients to nodes that refuse them. The
  id service's UDP port and the Gearman port, when the cluster file opens
  them, get a virtual server each with the same checks (virtual_ports).
- `lvs-director.sh`: what a director needs besides keepalived (ip_vs loaded,
  forwarding, dropping connections to a removed real server).
- `modprobe-ip_vs.conf`: the ip_vs `conn_tab_bits` module parameter.
- `lvs-realserver-NODE.sh` per node: the real-server side of the chosen mode.

Rules: deterministic text in cluster-file order; every value from the
validated cluster file; a renderer error is one line naming the key.

Timing: the directors re-check every real server every `delay_loop` (0.2 s)
and drop a failing one after one quick retry, so ip_vs follows a leadership
change within about 0.3 s. The VIP itself moves only when a director fails,
after the master-down interval (3 x advert_int + skew); `lvs_sync_daemon`
copies the connection table to the other director so established client
connections survive that.
"""

from __future__ import annotations

from haqueue.config.cluster import Cluster, ClusterFileError, Node
from haqueue.config.lvs import LVS_MODES
from haqueue.ops.render import RenderedFile, header, short_number, with_header

LOGGER = "/usr/bin/logger"
GARP_MASTER_REPEAT = 3
CONNECT_TIMEOUT = 0.5
RETRY = 1
DELAY_BEFORE_RETRY = 0.1
TCPFIN_TIMEOUT = 120
UDP_TIMEOUT = 300
IPIP_OVERHEAD = 20  # the outer IPv4 header the director adds in TUN mode
TCP_IP_HEADERS = 40  # MSS = MTU - 20 (IP) - 20 (TCP)

DIRECTOR_SCRIPT = "lvs-director.sh"
DIRECTOR_SCRIPT_PATH = f"/usr/local/sbin/{DIRECTOR_SCRIPT}"
REALSERVER_SCRIPT_PATH = "/usr/local/sbin/lvs-realserver.sh"

# DR and TUN: ARP quiet for the VIP before it goes on lo (see the script's comment).
ARP_QUIET = """\
    sysctl -q -w net.ipv4.conf.all.arp_ignore=1 net.ipv4.conf.lo.arp_ignore=1
    sysctl -q -w net.ipv4.conf.all.arp_announce=2 net.ipv4.conf.lo.arp_announce=2"""
MODPROBE_FILE = "modprobe-ip_vs.conf"


def realserver_script(node: Node) -> str:
    return f"lvs-realserver-{node.id}.sh"


def instance_name(cluster: Cluster) -> str:
    return f"haqueue_{cluster.name}_lvs"


def vrid(cluster: Cluster) -> int:
    return cluster.lvs.virtual_router_id or cluster.virtual_router_id


def _method(mode: str) -> str:
    return {"dr": "DR", "tun": "TUN type ipip", "nat": "NAT"}[mode]


def render_director(cluster: Cluster, director: Node, mode: str, command: str) -> str:
    lvs = cluster.lvs
    peer = next(d for d in cluster.directors if d.id != director.id)
    tag = f"{LOGGER} -t haqueue-lvs -p daemon.notice {instance_name(cluster)} {director.id}"
    skew = (256 - director.priority) * lvs.advert_int / 256
    vips = [f"{cluster.vip} dev {director.interface}"]
    if mode == "nat":
        vips.append(f"{lvs.nat_gateway}/{cluster.vip_prefixlen} dev {director.interface}")
    lines = [
        f"# keepalived-{director.id}.conf: LVS director {director.id} ({director.address}) for cluster"
        f" {cluster.name!r}, {mode.upper()} mode.",
        f"# The directors share the VIP {cluster.vip} (VRRP, both BACKUP with nopreempt: a",
        "# recovered director does not take the VIP back) and forward client connections to",
        "# whichever queue node is the Raft leader.",
        "#",
        "# - Real servers are checked with HTTP_GET on the admin port's /leader, which answers",
        "#   200 only on the leader: a TCP check would pass on followers, which refuse clients.",
        f"# - Every {short_number(lvs.delay_loop)} s, one retry after {short_number(DELAY_BEFORE_RETRY)} s: ip_vs follows"
        f" a leadership change within about {short_number(lvs.delay_loop + DELAY_BEFORE_RETRY + 0.05)} s.",
        "# - alpha: after a (re)start every real server is down until its check passes, so",
        "#   no client is sent to a follower meanwhile.",
        "# - No persistence_timeout: an established connection stays on its real server",
        "#   anyway (ip_vs keeps one entry per connection); persistence would only pin a",
        "#   client's new connections to a node that may no longer lead. Long-lived",
        "#   beanstalk connections (a worker blocked in reserve) instead need the idle",
        f"#   timeout: lvs_timeouts tcp {lvs.tcp_timeout} s, longer than clients stay idle; use TCP",
        "#   keepalive below that on clients (and net.ipv4.vs.expire_nodest_conn=1, set by",
        f"#   {DIRECTOR_SCRIPT}, to drop connections of a removed real server at once).",
        f"# - Director failover: the backup takes the VIP after 3 x advert_int {short_number(lvs.advert_int)}"
        f" + skew {short_number(skew)} = {short_number(3 * lvs.advert_int + skew)} s;",
        "#   lvs_sync_daemon has copied the connection table to it, so established",
        "#   connections survive.",
        "# No vrrp_strict, no VRRP authentication: see docs/operations.md, \"Authentication\".",
        "",
        "global_defs {",
        f"    router_id haqueue-{cluster.name}-{director.id}",
        "    vrrp_version 3",
        "    enable_script_security",
        f"    script_user {cluster.keepalived.script_user}",
        f"    lvs_timeouts tcp {lvs.tcp_timeout} tcpfin {TCPFIN_TIMEOUT} udp {UDP_TIMEOUT}",
        "    # The MASTER director sends its connection table to the BACKUP.",
        f"    lvs_sync_daemon {director.interface} inst {instance_name(cluster)} id {vrid(cluster)}",
        "}",
        "",
        f"vrrp_instance {instance_name(cluster)} {{",
        "    state BACKUP",
        "    nopreempt",
        f"    interface {director.interface}",
        f"    virtual_router_id {vrid(cluster)}",
        f"    priority {director.priority}",
        f"    advert_int {short_number(lvs.advert_int)}",
        f"    unicast_src_ip {director.address}",
        "    unicast_peer {",
        f"        {peer.address}",
        "    }",
        "    check_unicast_src",
        "    virtual_ipaddress {",
        *[f"        {vip}" for vip in vips],
        "    }",
        f"    garp_master_repeat {GARP_MASTER_REPEAT}",
        f"    garp_master_delay {cluster.keepalived.garp_master_delay}",
        f"    garp_master_refresh {cluster.keepalived.garp_master_refresh}",
        f'    notify_master "{tag} MASTER: holds VIP {cluster.vip_address}, forwarding"',
        f'    notify_backup "{tag} BACKUP: standing by"',
        f'    notify_fault "{tag} FAULT: {director.interface} down, VIP released"',
        f'    notify_stop "{tag} STOP: keepalived stopping, VIP released"',
        "}",
        "",
    ]
    for n, (protocol, port) in enumerate(virtual_ports(cluster)):
        lines += ([""] if n else []) + _virtual_server(cluster, port, protocol, mode)
    head = header(command, install=f"/etc/keepalived/keepalived.conf on director {director.id} ({director.address})")
    return head + "\n".join(lines) + "\n"


def virtual_ports(cluster: Cluster) -> list[tuple[str, int]]:
    """(protocol, port) of each service the VIP carries: beanstalkd, and the id service
    (UDP) and Gearman (TCP) when the cluster file opens them."""
    ports = [("TCP", cluster.client_port)]
    if cluster.id_port:
        ports.append(("UDP", cluster.id_port))
    if cluster.gearman_port:
        ports.append(("TCP", cluster.gearman_port))
    return ports


def _virtual_server(cluster: Cluster, port: int, protocol: str, mode: str) -> list[str]:
    """One virtual_server: VIP:port to every node, each weighted by its /leader check, so
    ip_vs forwards only to the node that serves."""
    lines = [
        f"virtual_server {cluster.vip_address} {port} {{",
        f"    delay_loop {short_number(cluster.lvs.delay_loop)}",
        "    lb_algo rr",
        f"    lvs_method {_method(mode)}",
        f"    protocol {protocol}",
    ]
    if protocol == "UDP":
        # One-packet scheduling: each datagram is scheduled on its own, so the
        # first request after a leader change reaches the new leader instead of
        # following a UDP "connection" entry to the old one for udp_timeout.
        lines.append("    ops")
    lines.append("    alpha")
    for node in cluster.nodes:
        lines += [
            f"    # {node.id}",
            f"    real_server {node.address} {port} {{",
            "        weight 1",
            "        HTTP_GET {",
            "            url {",
            "                path /leader",
            "                status_code 200",
            "            }",
            f"            connect_port {node.admin_port}",
            f"            connect_timeout {short_number(CONNECT_TIMEOUT)}",
            f"            retry {RETRY}",
            f"            delay_before_retry {short_number(DELAY_BEFORE_RETRY)}",
            "        }",
            "    }",
        ]
    lines.append("}")
    return lines


def render_modprobe(cluster: Cluster, command: str) -> str:
    bits = cluster.lvs.conn_tab_bits
    body = f"""\
# ip_vs keeps every forwarded connection in a hash table of 2^conn_tab_bits
# buckets (default 12: 4096). It is not a limit: more connections make the
# chains longer and each packet's lookup slower. Size it near the number of
# concurrent client connections: 2^{bits} = {2 ** bits} buckets, about
# {2 ** bits * 16 // 1024} KiB. The kernel accepts 8..20 (the seed's "max 20, 1M
# connections" is the largest table, not a connection cap). Takes effect when
# ip_vs is loaded: reboot, or unload ip_vs with no virtual servers defined.
options ip_vs conn_tab_bits={bits}
"""
    return header(command, install="/etc/modprobe.d/haqueue-ip_vs.conf on both directors") + body


def render_director_script(cluster: Cluster, mode: str, command: str) -> str:
    forward_why = (
        "NAT: replies from the real servers are routed back through the director"
        if mode == "nat"
        else f"{mode.upper()}: not strictly needed (ip_vs forwards from LOCAL_IN), but the\n#   director is a router for the VIP's traffic; NAT needs it"
    )
    body = f"""#!/bin/bash
#
# {DIRECTOR_SCRIPT} start: prepare an LVS director of cluster {cluster.name!r} ({mode.upper()} mode)
# for keepalived. Idempotent; the director's keepalived drop-in from
# `haqueue ops gen-systemd` runs it before every keepalived start.
# The persistent sysctl.d file for this role comes from `haqueue ops gen-sysctl`.
set -euo pipefail

case "${{1:-start}}" in
start)
    # ip_vs itself; its conn_tab_bits come from /etc/modprobe.d/haqueue-ip_vs.conf.
    modprobe ip_vs
    modprobe ip_vs_rr
    # ip_forward=1 - {forward_why}.
    sysctl -q -w net.ipv4.ip_forward=1
    # Drop a connection at once when its real server is removed (the old leader
    # stopped passing /leader) instead of forwarding into the void until it
    # times out: clients see the failure and reconnect to the VIP.
    sysctl -q -w net.ipv4.vs.expire_nodest_conn=1
    ;;
*)
    echo "usage: ${{0##*/}} start" >&2
    exit 2
    ;;
esac
"""
    return with_header(body, header(command, install=f"{DIRECTOR_SCRIPT_PATH} on both directors"))


def render_realserver(cluster: Cluster, node: Node, mode: str, command: str) -> str:
    vip = cluster.vip_address
    iface = node.interface
    port = cluster.client_port
    if mode == "dr":
        what = """# DR: the directors forward each client packet unchanged to this node's MAC,
# so the VIP must be a local address here - on lo, as a /32, so it is never
# announced. arp_ignore=1 answers ARP only for addresses on the interface
# asked; arp_announce=2 never uses the VIP as the source of our own ARP
# requests. Without them this node would answer ARP for the VIP and steal it
# from the directors. The kernel uses the larger of all.* and IFACE.*, so `all`
# covers every interface (and needs none of them to exist yet at boot); `lo` is
# set too, as the LVS recipe, gen-sysctl and `haqueue ops check` have it.
# The sysctls come first: the moment the VIP is on lo without them, this node
# would answer ARP for it."""
        start = f"""{ARP_QUIET}
    ip addr replace "$VIP/32" dev lo"""
        stop = """    ip addr del "$VIP/32" dev lo 2>/dev/null || true"""
    elif mode == "tun":
        what = f"""# TUN: the directors wrap each client packet in IPIP (a {IPIP_OVERHEAD}-byte outer header)
# and send it to this node's address; tunl0 unwraps it and the VIP must be a
# local address (on lo, /32, as in DR and as `haqueue ops check` expects).
# Replies go straight to the client from the VIP.
# - arp_ignore=1 / arp_announce=2 on all and lo as in DR: never answer ARP for the VIP.
# - rp_filter=2 (loose) on tunl0: unwrapped packets come from client addresses
#   that are routed via {iface}, which strict mode (1) would drop.
# - MTU/MSS lowered by {IPIP_OVERHEAD} bytes: a full-size client segment plus the outer
#   header would not fit the director-to-node link. tunl0 gets MTU-{IPIP_OVERHEAD}, and SYN-ACKs
#   from the VIP (every TCP port it serves) announce MSS = MTU - {IPIP_OVERHEAD} - {TCP_IP_HEADERS},
#   so clients never send more."""
        start = f"""    modprobe ipip
{ARP_QUIET}
    ip addr replace "$VIP/32" dev lo
    mtu=$(cat "/sys/class/net/{iface}/mtu")
    ip link set tunl0 up mtu $(( mtu - {IPIP_OVERHEAD} ))
    sysctl -q -w net.ipv4.conf.tunl0.rp_filter=2
    mss=$(( mtu - {IPIP_OVERHEAD} - {TCP_IP_HEADERS} ))
    rule=(OUTPUT -s "$VIP" -p tcp --tcp-flags "SYN,RST" SYN -j TCPMSS --set-mss "$mss")
    iptables -t mangle -C "${{rule[@]}}" 2>/dev/null || iptables -t mangle -A "${{rule[@]}}\""""
        stop = f"""    ip addr del "$VIP/32" dev lo 2>/dev/null || true
    mtu=$(cat "/sys/class/net/{iface}/mtu")
    mss=$(( mtu - {IPIP_OVERHEAD} - {TCP_IP_HEADERS} ))
    iptables -t mangle -D OUTPUT -s "$VIP" -p tcp --tcp-flags "SYN,RST" SYN -j TCPMSS --set-mss "$mss" \\
        2>/dev/null || true"""
    else:
        gw = cluster.lvs.nat_gateway
        what = f"""# NAT: the directors rewrite the destination VIP:{port} to this node and must see
# the replies to rewrite them back, so this node's route to clients must go
# through the directors: the default route via {gw}, an address the MASTER
# director holds next to the VIP. Clients must not be on {cluster.vip.network}
# (replies to them would bypass the director). No VIP here, no ARP settings."""
        start = f"""    ip route replace default via {gw} dev {iface}"""
        stop = """    : # the default route is left in place: removing it would cut this node off"""
    body = f"""#!/bin/bash
#
# {realserver_script(node)} start|stop: the LVS real-server side on queue node {node.id}
# ({node.address}) of cluster {cluster.name!r}, {mode.upper()} mode. Idempotent.
# haqueue accepts clients on {vip}:{port}: the leader listens on the VIP (IP_FREEBIND).
#
{what}
set -euo pipefail
{"" if mode == "nat" else "VIP=" + vip + chr(10)}
case "${{1:-start}}" in
start)
{start}
    ;;
stop)
{stop}
    ;;
*)
    echo "usage: ${{0##*/}} start|stop" >&2
    exit 2
    ;;
esac
"""
    return with_header(body, header(command, install=f"{REALSERVER_SCRIPT_PATH} on {node.id} ({node.address})"))


def render(cluster: Cluster, node_id: str | None, mode: str | None, command: str) -> list[RenderedFile]:
    """Director configs and scripts, and the real-server script per node (or for one member)."""
    mode = mode or cluster.lvs.mode
    if mode not in LVS_MODES:
        raise ClusterFileError(f"{cluster.source}: lvs.mode: {mode!r} is not one of {', '.join(LVS_MODES)}")
    if len(cluster.directors) != 2:
        raise ClusterFileError(
            f"{cluster.source}: directors: gen-lvs needs exactly two [[directors]], found {len(cluster.directors)}"
        )
    if mode == "nat" and not cluster.lvs.nat_gateway:
        raise ClusterFileError(f"{cluster.source}: lvs.nat_gateway: missing: NAT mode needs the real servers' gateway address")
    directors = cluster.directors
    nodes = cluster.nodes
    if node_id:
        directors = tuple(d for d in directors if d.id == node_id)
        nodes = tuple(n for n in nodes if n.id == node_id)
        if not directors and not nodes:
            known = ", ".join(m.id for m in cluster.directors + cluster.nodes)
            raise ClusterFileError(f"{cluster.source}: no director or node {node_id!r} (known: {known})")
    files = [RenderedFile(f"keepalived-{d.id}.conf", render_director(cluster, d, mode, command)) for d in directors]
    if directors:
        files.append(RenderedFile(DIRECTOR_SCRIPT, render_director_script(cluster, mode, command), mode=0o755))
        files.append(RenderedFile(MODPROBE_FILE, render_modprobe(cluster, command)))
    files += [
        RenderedFile(realserver_script(n), render_realserver(cluster, n, mode, command), mode=0o755) for n in nodes
    ]
    return files
