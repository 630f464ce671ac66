"""Collocated VRRP: one keepalived.conf per queue node so the VIP follows the Raft leader.

Owns `gen-keepalived`'s output: `keepalived-ID.conf` for every node and the one
leader-check script they share (`haqueue-leader-check.sh`).

Theory of operation (the generated files repeat the parts an operator needs):
- Every node runs keepalived with `state BACKUP` and `nopreempt`, unicast
  adverts to the other nodes, and tracks the leader check with weight 0. A
  node that is not the Raft leader is therefore in FAULT: it sends no adverts
  and can never become MASTER. Only the leader is eligible, so it is the only
  candidate for the VIP; priorities matter only in the brief window in which
  two nodes pass the check (a deposed leader not yet aware of it).
- Why FAULT and not a priority weight: with nopreempt a BACKUP never takes
  over from a live MASTER, whatever the priorities, so boosting the new
  leader's priority would leave the VIP on the old master for as long as it
  advertises. Going FAULT is what makes the old master let go, and it sends a
  priority-0 advert as it leaves MASTER so the new leader takes over after its
  skew time rather than after the full master-down interval.
- Timing: keepalived runs a vrrp_script at most once a second (`interval` is
  whole seconds) but acts on its exit status immediately. The check script
  therefore watches the leader endpoint for most of each second and exits as
  soon as the answer matters (see SCRIPT below). With VRRPv3 sub-second adverts
  the master-down interval (3 x advert_int + skew) stays well under half a
  second, so the VIP moves within about 0.85 s of a leadership change in the
  worst case (`timing()` computes the numbers written into each file).
- `init_fail`: a (re)started keepalived is FAULT until the check passes once,
  so a rebooted node cannot claim the VIP before haqueue says it leads.

Rules: deterministic text (nodes in cluster-file order, no clocks); every
value comes from the validated cluster file; no vrrp_strict, no VRRP
authentication (docs/operations.md, "Authentication", says why and what
protects the VIP instead).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from haqueue.config.cluster import Cluster, ClusterFileError, Node
from haqueue.ops.render import RenderedFile, header, short_number, with_header

SCRIPT_NAME = "haqueue-leader-check.sh"
CURL = "/usr/bin/curl"
LOGGER = "/usr/bin/logger"
TIMEOUT = "/usr/bin/timeout"

# keepalived's own limits for vrrp_script (whole seconds, at least 1).
SCRIPT_INTERVAL = 1
SCRIPT_TIMEOUT = 1
# The check script's pacing (substituted into SCRIPT below).
WINDOW = 0.9  # each run watches for at most this long, ending before the next run
POLL = 0.1  # between two checks inside a run
MISSES_TO_FAIL = 2  # consecutive failed checks before a VIP holder gives up
# Upper bound of one check, in milliseconds: curl's --max-time for the HTTP
# check; the `command` check is a Python start-up, so it gets longer.
HTTP_CHECK_MS = 150
COMMAND_CHECK_MS = 500
GARP_MASTER_REPEAT = 3


def file_name(node: Node) -> str:
    return f"keepalived-{node.id}.conf"


def instance_name(cluster: Cluster) -> str:
    return f"haqueue_{cluster.name}"


def script_name(cluster: Cluster) -> str:
    return f"haqueue_{cluster.name}_leader"


@dataclass(frozen=True)
class Timing:
    """Worst-case seconds from a leadership change to the VIP on the new leader."""

    gain: float  # until the new leader's check passes (it becomes eligible)
    loss: float  # until a live old master's check fails (it goes FAULT, sends priority 0)
    skew: float
    master_down: float  # 3 x advert_int + skew
    total: float
    # When leadership moves again within a second of the VIP arriving: the
    # holder's check exited at once to claim the VIP and watches again only
    # from its next run, so it may hold on for up to a run longer.
    again: float


def check_seconds(cluster: Cluster) -> float:
    return (HTTP_CHECK_MS if cluster.keepalived.check == "http" else COMMAND_CHECK_MS) / 1000


def timing(cluster: Cluster, node: Node) -> Timing:
    """The worst case for `node` as the new leader, from the script's pacing and advert_int."""
    adv = cluster.keepalived.advert_int
    c = check_seconds(cluster)
    # RFC 5798 6.1: Skew_Time = ((256 - Priority) * Master_Adver_Interval) / 256.
    skew = (256 - node.priority) * adv / 256
    master_down = 3 * adv + skew
    if 2 * c + POLL <= WINDOW:
        # Several checks per run. A change is seen by the check after the one
        # in flight (c + POLL + c), or, when it lands in the gap after a run
        # (which may end as early as WINDOW - POLL - c), by the next run's
        # first check. A VIP holder re-checks a miss at once before giving up.
        gap = SCRIPT_INTERVAL - (WINDOW - POLL - c)
        gain = max(2 * c + POLL, gap + c)
        loss = max(3 * c + POLL, gap + 2 * c)
    else:
        # One check per run: the next run sees it.
        gain = loss = SCRIPT_INTERVAL + c
    # The new leader takes over after the master-down interval once eligible,
    # or after its skew once a live old master sends priority 0 (a dead one
    # sends nothing, and master-down covers it).
    total = max(gain + master_down, loss + skew)
    again = max(total, SCRIPT_INTERVAL + 2 * c + skew)
    return Timing(gain=gain, loss=loss, skew=skew, master_down=master_down, total=total, again=again)


def check_words(cluster: Cluster, node: Node) -> list[str]:
    """The command that answers "is this node the Raft leader?" once (exit 0 = yes)."""
    if cluster.keepalived.check == "http":
        max_time = f"{HTTP_CHECK_MS / 1000:g}"
        return [CURL, "-fs", "--max-time", max_time, "-o", "/dev/null", f"{node.admin_url}/leader"]
    return [TIMEOUT, f"{COMMAND_CHECK_MS / 1000:g}"] + shlex.split(cluster.leader_check_command(node))


def script_path(cluster: Cluster) -> str:
    return f"{cluster.keepalived.script_dir.rstrip('/')}/{SCRIPT_NAME}"


def render_node(cluster: Cluster, node: Node, command: str) -> str:
    k = cluster.keepalived
    t = timing(cluster, node)
    check_ms = round(check_seconds(cluster) * 1000)
    script_line = " ".join(
        [script_path(cluster), node.interface, cluster.vip_address, str(check_ms)] + check_words(cluster, node)
    )
    peers = cluster.peers_of(node.id)
    tag = f"{LOGGER} -t haqueue-vrrp -p daemon.notice {instance_name(cluster)} {node.id}"
    if k.check == "http":
        check_what = f"GET {node.admin_url}/leader answers 200 only on the leader"
    else:
        check_what = f"{cluster.leader_check_command(node)} exits 0 only on the leader"
    lines = [
        f"# {file_name(node)}: collocated VRRP for cluster {cluster.name!r}, node {node.id} ({node.address}).",
        f"# The VIP {cluster.vip} follows the Raft leader among "
        + ", ".join(n.id for n in cluster.nodes)
        + ".",
        "#",
        "# How the VIP follows the leader",
        "# - All nodes start BACKUP with nopreempt. The leader check is tracked with",
        "#   weight 0, so every node that is not the Raft leader is in FAULT: it sends",
        "#   no adverts and cannot become MASTER. Only the leader is eligible.",
        "# - Not a priority weight: with nopreempt a BACKUP never takes over from a live",
        "#   MASTER whatever the priorities, so a boost for the new leader would leave the",
        "#   VIP on the old master while it keeps advertising. Going FAULT is what makes",
        "#   the old master let go; leaving MASTER it sends a priority-0 advert, and the",
        "#   new leader takes over after its skew time.",
        "# - nopreempt matters only when two nodes pass the check at once (a deposed",
        "#   leader not yet aware of it): the VIP then stays where it is instead of",
        "#   bouncing to the higher priority.",
        "# - init_fail: after a (re)start this node is FAULT until the check passes once.",
        "#",
        "# Timing, worst case from a leadership change to the VIP on the new leader",
        f"# (the check script re-checks every {short_number(POLL)} s within each 1 s run, see {SCRIPT_NAME}):",
        f"#   new leader's check passes  {short_number(t.gain)} s",
        f"#   old master's check fails   {short_number(t.loss)} s  (then it sends priority 0; a dead one sends nothing)",
        f"#   master-down interval       {short_number(t.master_down)} s  3 x advert_int {short_number(k.advert_int)}"
        f" + skew {short_number(t.skew)} (VRRPv3)",
        f"#   total                      {short_number(t.total)} s  the later of passes + master-down and"
        " fails + skew,",
        "#                                     then gratuitous ARP from the new master",
        f"#   moved again within 1 s     {short_number(t.again)} s  the new holder's check exited at once to"
        " claim the VIP",
        "#                                     and watches again from its next run",
        "# advert_int, not the check, bounds the takeover from a dead leader. Tune in",
        "# the cluster file's [keepalived] table (docs/operations.md, \"Tuning\").",
        "#",
        "# No vrrp_strict: it rejects unicast peers and adds firewall rules that drop",
        "# traffic to the VIP. No VRRP authentication (truncated to 8 characters,",
        "# removed in VRRPv3): unicast peers, check_unicast_src, a dedicated VLAN and a",
        "# firewall allowing IP protocol 112 only between the nodes protect the VIP.",
        "",
        "global_defs {",
        f"    router_id haqueue-{cluster.name}-{node.id}",
        "    # VRRPv3 carries advert_int in centiseconds; v2 only whole seconds.",
        "    vrrp_version 3",
        "    # Scripts run unprivileged; keepalived refuses scripts a non-root user could change.",
        "    enable_script_security",
        f"    script_user {k.script_user}",
        "}",
        "",
        "# Exit 0 only on the Raft leader:",
        f"#   {check_what}",
        f"# {SCRIPT_NAME} repeats that check every {short_number(POLL)} s within each run (see its comments).",
        f"vrrp_script {script_name(cluster)} {{",
        f'    script "{script_line}"',
        f"    interval {SCRIPT_INTERVAL}",
        f"    timeout {SCRIPT_TIMEOUT}",
        f"    # The script already debounces ({MISSES_TO_FAIL} failed checks in a row).",
        "    fall 1",
        "    rise 1",
        "    weight 0",
        "    init_fail",
        "}",
        "",
        f"vrrp_instance {instance_name(cluster)} {{",
        "    state BACKUP",
        "    nopreempt",
        f"    interface {node.interface}",
        f"    virtual_router_id {cluster.virtual_router_id}",
        f"    priority {node.priority}",
        f"    advert_int {short_number(k.advert_int)}",
        f"    unicast_src_ip {node.address}",
        "    unicast_peer {",
        *[f"        {peer.address}" for peer in peers],
        "    }",
        "    # Ignore adverts from any address that is not a listed peer.",
        "    check_unicast_src",
        "    virtual_ipaddress {",
        f"        {cluster.vip} dev {node.interface}",
        "    }",
        "    track_script {",
        f"        {script_name(cluster)}",
        "    }",
        "    # Gratuitous ARP at once on takeover, again after garp_master_delay, and",
        "    # every garp_master_refresh seconds while MASTER (switches and hosts that",
        "    # missed the first burst, or aged the entry out, learn the new MAC).",
        f"    garp_master_repeat {GARP_MASTER_REPEAT}",
        f"    garp_master_delay {k.garp_master_delay}",
        f"    garp_master_refresh {k.garp_master_refresh}",
        f'    notify_master "{tag} MASTER: holds VIP {cluster.vip_address}"',
        f'    notify_backup "{tag} BACKUP: eligible (leader check passes), VIP not held yet"',
        f'    notify_fault "{tag} FAULT: not the Raft leader or {node.interface} down, VIP released"',
        f'    notify_stop "{tag} STOP: keepalived stopping, VIP released"',
        "}",
    ]
    head = header(command, install=f"/etc/keepalived/keepalived.conf on {node.id} ({node.address})")
    return head + "\n".join(lines) + "\n"


SCRIPT = r"""#!/bin/bash
#
# haqueue-leader-check.sh IFACE VIP CHECK_MS CHECK_COMMAND...
#
# keepalived's vrrp_script for the collocated VRRP topology: exit 0 when this
# node is the Raft leader, 1 when it is not. CHECK_COMMAND answers that once
# (exit 0 only on the leader) within CHECK_MS milliseconds.
#
# Why a loop: keepalived runs a vrrp_script at most once a second (its
# interval is whole seconds) but acts on the exit status the moment the script
# exits. So each run re-checks every POLL seconds for up to WINDOW_US and exits
# as soon as the answer matters:
#   leader,     VIP not here -> exit 0 at once: become eligible for the VIP
#   not leader, VIP here     -> exit 1 after MISSES_TO_FAIL failed checks in a
#                               row, the retry at once (one slow answer is not
#                               a lost leadership)
#   leader,     VIP here     -> keep watching; exit 1 as above when it stops
#   not leader, VIP not here -> keep watching; exit 0 the moment it leads
# When the window is over it reports the last answer.
# Whether the VIP is on IFACE stands in for what keepalived last concluded, so
# the script keeps no state between runs. Each run ends before the next one is
# due (keepalived skips a run while the previous one is still going).
# Needs bash >= 5 for EPOCHREALTIME; with an older bash it checks once per run.
set -u
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
readonly WINDOW_US=@WINDOW_US@ POLL=@POLL@ POLL_US=@POLL_US@ MISSES_TO_FAIL=@MISSES@

if (( $# < 4 )); then
    echo "usage: ${0##*/} IFACE VIP CHECK_MS CHECK_COMMAND..." >&2
    exit 2
fi
iface=$1
vip=$2
check_us=$(( $3 * 1000 ))
shift 3

now=0
tick() { now=${EPOCHREALTIME:-}; now=${now//[!0-9]/}; }

holds_vip() { ip -4 -o addr show dev "$iface" 2>/dev/null | grep -qF " $vip/"; }

tick
start=$now
held=0
if holds_vip; then held=1; fi
misses=0
while :; do
    if "$@" >/dev/null 2>&1; then
        if (( ! held )); then exit 0; fi
        misses=0
    else
        misses=$(( misses + 1 ))
        if (( held && misses >= MISSES_TO_FAIL )); then exit 1; fi
    fi
    tick
    [[ -n $now && -n $start ]] || break
    pause_us=$POLL_US
    if (( held && misses )); then pause_us=0; fi
    (( now - start + pause_us + check_us <= WINDOW_US )) || break
    if (( pause_us )); then sleep "$POLL"; fi
done
if (( held && ! misses )); then exit 0; fi
exit 1
"""


def render_script(cluster: Cluster, command: str) -> str:
    head = header(command, install=f"{script_path(cluster)} on every node (root:root, mode 0755)")
    body = (
        SCRIPT.replace("@WINDOW_US@", str(round(WINDOW * 1e6)))
        .replace("@POLL@", f"{POLL:g}")
        .replace("@POLL_US@", str(round(POLL * 1e6)))
        .replace("@MISSES@", str(MISSES_TO_FAIL))
    )
    return with_header(body, head)


def render(cluster: Cluster, node_id: str | None, command: str) -> list[RenderedFile]:
    """keepalived-ID.conf for each node (or one), plus the shared check script."""
    nodes = (cluster.node(node_id),) if node_id else cluster.nodes
    if len(cluster.nodes) < 2:
        raise ClusterFileError(f"{cluster.source}: nodes: collocated VRRP needs at least two nodes")
    files = [RenderedFile(file_name(n), render_node(cluster, n, command)) for n in nodes]
    files.append(RenderedFile(SCRIPT_NAME, render_script(cluster, command), mode=0o755))
    return files
