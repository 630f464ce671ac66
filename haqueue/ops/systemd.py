"""systemd units: haqueue.service and a keepalived.service drop-in per queue node,
and a keepalived.service drop-in per LVS director.

Owns `gen-systemd`'s output, per node:
- `haqueue-ID.service` (install as /etc/systemd/system/haqueue.service): runs
  `haqueue serve --config FILE --node ID -b DATA_DIR` as an unprivileged user,
  restarts it always, and confines it (read-only system, its data dir the only
  writable path, no devices, no privilege gain).
- `keepalived-haqueue-ID.conf` (install as
  /etc/systemd/system/keepalived.service.d/haqueue.conf): orders keepalived
  after haqueue, delays its start until haqueue answers /health plus a settle
  time (the seed's advice: a rebooted node must not act on VRRP before the
  network and the service are up), and restarts keepalived always.

Per director (`[[directors]]`, if any): `keepalived-haqueue-director-ID.conf`
(install as /etc/systemd/system/keepalived.service.d/haqueue.conf): keepalived
after the network is online plus the same settle time, `lvs-director.sh start`
(from gen-lvs: ip_vs loaded, forwarding on) before every start, restarted
always. A director runs no haqueue; its keepalived holds the VIP and the IPVS
table with the config gen-lvs renders.

Per queue node of a cluster with directors (the nodes are LVS real servers):
`haqueue-lvs-realserver-ID.service` (install as
/etc/systemd/system/haqueue-lvs-realserver.service), a oneshot running gen-lvs's
`lvs-realserver.sh start` before haqueue and `stop` when stopped.

Why `Restart=always` for keepalived: SIGTERM makes keepalived release the VIP
and exit cleanly, and with leadership unchanged no other node takes it (they
are FAULT), so the VIP is gone until keepalived runs again on the leader;
`on-failure` would not restart after that clean exit. SIGKILL leaves the VIP
on the node unmanaged; a restart puts keepalived back in charge (it starts in
FAULT and removes the VIP unless the check says this node leads).

Rules: deterministic text; paths and users from the cluster file's [deploy]
and [keepalived] tables (validated there: no spaces or quotes to escape).
"""

from __future__ import annotations

from haqueue.config.cluster import Cluster, Node

REMOVED_EXIT = 78  # haqueue serve's status once removed from the cluster (replication/removal.py)
from haqueue.ops.lvs import DIRECTOR_SCRIPT_PATH, REALSERVER_SCRIPT_PATH
from haqueue.ops.render import RenderedFile, header, short_number

STATE_ROOT = "/var/lib/"
HEALTH_WAIT = 60  # seconds keepalived waits for haqueue's admin port at most
PRIVILEGED_PORTS = 1024


def unit_file(node: Node) -> str:
    return f"haqueue-{node.id}.service"


def dropin_file(node: Node) -> str:
    return f"keepalived-haqueue-{node.id}.conf"


def director_dropin_file(director: Node) -> str:
    return f"keepalived-haqueue-director-{director.id}.conf"


def realserver_unit_file(node: Node) -> str:
    return f"haqueue-lvs-realserver-{node.id}.service"


def render_unit(cluster: Cluster, node: Node, command: str) -> str:
    d = cluster.deploy
    data_dir = cluster.data_dir_of(node)
    if data_dir.startswith(STATE_ROOT):
        # systemd creates it owned by User= and makes it writable under ProtectSystem=strict.
        storage = [
            f"StateDirectory={data_dir[len(STATE_ROOT):]}",
            "StateDirectoryMode=0750",
        ]
    else:
        storage = [
            f"# {data_dir} is outside /var/lib: create it, owned by {d.user}, before the first start.",
            f"ReadWritePaths={data_dir}",
        ]
    low_ports = sorted(
        {p for p in (node.client_port, node.raft_port, node.admin_port, node.id_port, node.gearman_port) if 0 < p < PRIVILEGED_PORTS}
    )
    if low_ports:
        caps = [
            f"# Port(s) {', '.join(map(str, low_ports))} below 1024: only this capability, nothing else.",
            "CapabilityBoundingSet=CAP_NET_BIND_SERVICE",
            "AmbientCapabilities=CAP_NET_BIND_SERVICE",
        ]
    else:
        caps = ["CapabilityBoundingSet="]
    lines = [
        "[Unit]",
        f"Description=haqueue node {node.id} of cluster {cluster.name} (beanstalkd protocol, Raft-replicated)",
        "After=network-online.target",
        "Wants=network-online.target",
        "# Keep restarting for as long as it takes: a node that gives up is one vote less.",
        "StartLimitIntervalSec=0",
        "",
        "[Service]",
        "Type=exec",
        f"User={d.user}",
        f"Group={d.user}",
        f"ExecStart={d.haqueue_bin} serve --config {d.config_path} --node {node.id} -b {data_dir}",
        "# systemctl reload: re-read the cluster file's [[id_rules]]; the leader commits them.",
        "ExecReload=/bin/kill -HUP $MAINPID",
        "Restart=always",
        "RestartSec=1",
        "# 78: removed from the cluster (cluster remove-node); a restart would only stop again.",
        f"RestartPreventExitStatus={REMOVED_EXIT}",
        "# SIGTERM: haqueue closes its client listener and connections, then exits.",
        "TimeoutStopSec=15",
        "# One descriptor per client connection.",
        "LimitNOFILE=65536",
        *storage,
        "UMask=0027",
        "# Hardening: haqueue needs its data directory and the network, nothing else.",
        "NoNewPrivileges=yes",
        "ProtectSystem=strict",
        "ProtectHome=yes",
        "PrivateTmp=yes",
        "PrivateDevices=yes",
        "ProtectKernelTunables=yes",
        "ProtectKernelModules=yes",
        "ProtectKernelLogs=yes",
        "ProtectControlGroups=yes",
        "ProtectClock=yes",
        "ProtectHostname=yes",
        "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6",
        "RestrictNamespaces=yes",
        "RestrictRealtime=yes",
        "RestrictSUIDSGID=yes",
        "LockPersonality=yes",
        "SystemCallArchitectures=native",
        *caps,
        "",
        "[Install]",
        "WantedBy=multi-user.target",
    ]
    head = header(command, install=f"/etc/systemd/system/haqueue.service on {node.id} ({node.address})")
    return head + "\n".join(lines) + "\n"


def render_dropin(cluster: Cluster, node: Node, command: str) -> str:
    k = cluster.keepalived
    health = f"http://{node.address}:{node.admin_port}/health"
    tries = round(HEALTH_WAIT / 0.2)
    # `$$` is systemd's escape for a literal `$` handed to the shell.
    wait = (
        f"ExecStartPre=/bin/sh -c 'i=0; while [ $$i -lt {tries} ]; do"
        f" /usr/bin/curl -fs --max-time 1 -o /dev/null {health} && exit 0;"
        " i=$$((i + 1)); sleep 0.2; done;"
        " echo \"haqueue does not answer on its admin port; starting keepalived anyway (it stays FAULT)\" >&2'"
    )
    lines = [
        "[Unit]",
        "# After haqueue, and wanting it; not Requires=/BindsTo=: keepalived must keep",
        "# running when haqueue stops, so that the leader check fails and the VIP is released.",
        "After=haqueue.service",
        "Wants=haqueue.service",
        "StartLimitIntervalSec=0",
        "",
        "[Service]",
        "# Start-up delay: wait (at most "
        f"{HEALTH_WAIT} s) until haqueue answers /health, then settle for",
        f"# {short_number(k.start_delay)} s ([keepalived] start_delay), so a rebooted node's interfaces,",
        "# routes and haqueue are up before VRRP runs. The leader check (init_fail) already",
        "# keeps this node FAULT until haqueue says it leads; the delay is a second fence.",
        wait,
        *([f"ExecStartPre=/bin/sleep {short_number(k.start_delay)}"] if k.start_delay > 0 else []),
        f"TimeoutStartSec={HEALTH_WAIT + int(k.start_delay) + 30}",
        "# Always restart, also after a clean exit: SIGTERM makes keepalived release the VIP",
        "# and exit 0, and no other node takes the VIP while leadership is unchanged.",
        "# SIGKILL leaves the VIP here unmanaged until keepalived is back.",
        "Restart=always",
        "RestartSec=1",
    ]
    install = f"/etc/systemd/system/keepalived.service.d/haqueue.conf on {node.id} ({node.address})"
    return header(command, install=install) + "\n".join(lines) + "\n"


def render_director_dropin(cluster: Cluster, director: Node, command: str) -> str:
    k = cluster.keepalived
    lines = [
        "[Unit]",
        "# A director runs no haqueue: its keepalived needs the network, nothing else.",
        "After=network-online.target",
        "Wants=network-online.target",
        "StartLimitIntervalSec=0",
        "",
        "[Service]",
        f"# Settle for {short_number(k.start_delay)} s ([keepalived] start_delay) once the network is online,",
        "# so a rebooted director's interfaces and routes are up before VRRP runs.",
        *([f"ExecStartPre=/bin/sleep {short_number(k.start_delay)}"] if k.start_delay > 0 else []),
        "# ip_vs and its scheduler loaded, forwarding on: what the director needs besides",
        "# keepalived (gen-lvs renders the script). Idempotent, so on every (re)start.",
        f"ExecStartPre={DIRECTOR_SCRIPT_PATH} start",
        f"TimeoutStartSec={int(k.start_delay) + 30}",
        "# Always restart, also after a clean exit: after SIGTERM the other director takes the",
        "# VIP, and this one stays out of the pair (no spare) until keepalived runs again;",
        "# after SIGKILL the VIP and the IPVS table stay here unmanaged until it is back.",
        "Restart=always",
        "RestartSec=1",
    ]
    install = (f"/etc/systemd/system/keepalived.service.d/haqueue.conf on director {director.id} "
               f"({director.address})")
    return header(command, install=install) + "\n".join(lines) + "\n"


def render_realserver_unit(cluster: Cluster, node: Node, command: str) -> str:
    lines = [
        "[Unit]",
        f"Description=haqueue LVS real server {node.id} of cluster {cluster.name}: the VIP's real-server side",
        "# After the network is online (the script's TUN mode reads the interface's MTU);",
        "# before haqueue, so the VIP is local by the time the leader serves it. The script",
        "# makes the host ARP-quiet before the VIP goes on lo, so no window answers ARP for it.",
        "After=network-online.target",
        "Wants=network-online.target",
        "Before=haqueue.service",
        "",
        "[Service]",
        "Type=oneshot",
        "RemainAfterExit=yes",
        f"ExecStart={REALSERVER_SCRIPT_PATH} start",
        f"ExecStop={REALSERVER_SCRIPT_PATH} stop",
        "",
        "[Install]",
        "WantedBy=multi-user.target",
    ]
    install = f"/etc/systemd/system/haqueue-lvs-realserver.service on {node.id} ({node.address})"
    return header(command, install=install) + "\n".join(lines) + "\n"


def render(cluster: Cluster, node_id: str | None, command: str) -> list[RenderedFile]:
    """Every queue node's and director's files, or one member's (`node_id`); with
    directors, each node also gets its LVS real-server unit."""
    directors = {d.id: d for d in cluster.directors}
    if node_id in directors:
        director = directors[node_id]
        return [RenderedFile(director_dropin_file(director), render_director_dropin(cluster, director, command))]
    nodes = (cluster.node(node_id),) if node_id else cluster.nodes
    files = []
    for node in nodes:
        files.append(RenderedFile(unit_file(node), render_unit(cluster, node, command)))
        files.append(RenderedFile(dropin_file(node), render_dropin(cluster, node, command)))
        if cluster.directors:
            files.append(RenderedFile(realserver_unit_file(node), render_realserver_unit(cluster, node, command)))
    if node_id is None:
        for director in cluster.directors:
            files.append(RenderedFile(director_dropin_file(director),
                                      render_director_dropin(cluster, director, command)))
    return files
