"""The one cluster file: load, validate and describe a haqueue deployment.

A single TOML file describes the whole deployment so topology is written once
(docs/design.md, "One cluster file"). `haqueue serve --config FILE --node ID`
runs a node from it and every `haqueue ops gen-*` renders from it. The whole
file is validated when it is loaded, before anything is started or rendered,
and every problem is reported as one line that names the key:
`nodes[2].address: 10.0.0.5 is outside the VIP's subnet 192.0.2.0/24`.

This module owns the `Cluster` value and the rules of [cluster], [[nodes]],
[[directors]], [deploy], [limits] and [tls]; each rule that is not a plain
type or range check sits beside the dataclass it fills. The [keepalived] and
[lvs] blocks' rules live beside it (keepalived.py, lvs.py in this package;
their renderers are haqueue/ops/keepalived.py, lvs.py), the [limits] values in
limits.py, and every block is read with the one field reader in fields.py.

Shape (keys may be added; these are relied on by tooling and docs):

    [cluster]
    name = "orders"
    vip = "192.0.2.100/24"
    client_port = 11300          # beanstalkd protocol, leader only
    raft_port = 11400            # pysyncobj
    admin_port = 11500           # HTTP /health /leader /status
    secret = "change-me"         # encrypts Raft traffic
    virtual_router_id = 51       # VRRP router id, 1..255
    admin_token = "..."          # optional: /status and /gc need "Authorization: Bearer ..."
    id_port = 1200               # optional: the id service, JSON over UDP on the leader; 0 = off (default)
    id_rate_limit = 20000        # optional: id datagrams a second per source address; 0 = no limit
    gearman_port = 4730          # optional: the Gearman protocol, TCP, leader only; 0 = off (default)

    [[nodes]]
    id = "n1"
    address = "192.0.2.11"
    interface = "eth1"
    priority = 150
    # optional per node: client_port, raft_port, admin_port, id_port, gearman_port (to run
    # several nodes on one host), data_dir

    [[directors]]                # optional: the LVS director pair
    id = "d1"
    address = "192.0.2.2"
    interface = "eth1"
    priority = 150

    [deploy]                     # optional: where things live on the hosts
    config_path = "/etc/haqueue/cluster.toml"
    haqueue_bin = "/usr/local/bin/haqueue"
    user = "haqueue"             # runs haqueue serve
    data_dir = "/var/lib/haqueue"  # a node's data: DATA_DIR/ID unless nodes[].data_dir

    [keepalived]                 # optional: collocated VRRP (gen-keepalived, gen-systemd)
    advert_int = 0.1             # seconds; VRRPv3, a multiple of 0.01
    check = "http"               # "http": curl the node's /leader; "command": check_command
    check_command = "/usr/local/bin/haqueue node is-leader --config /etc/haqueue/cluster.toml --node {node}"
    garp_master_delay = 1
    garp_master_refresh = 60
    script_user = "keepalived_script"
    script_dir = "/etc/keepalived"
    start_delay = 2              # seconds keepalived waits after haqueue answers

    [lvs]                        # optional: the director pair (gen-lvs)
    mode = "dr"                  # dr | tun | nat
    advert_int = 0.2
    virtual_router_id = 52       # default: cluster.virtual_router_id
    delay_loop = 0.2             # seconds between leader checks of each real server
    conn_tab_bits = 15           # ip_vs connection hash table size, 2^bits buckets
    tcp_timeout = 3600           # ip_vs idle timeout of an established connection
    nat_gateway = "192.0.2.1"    # NAT mode only: the real servers' gateway, held by the directors

    [limits]                     # optional: what clients may hold (docs/reliability.md)
    max_connections = 10000      # beyond it a new connection is closed at once, counted
    max_tubes = 100000           # use/watch of a new tube beyond it: OUT_OF_MEMORY
    max_watched_tubes = 1000     # per connection; watch beyond it: OUT_OF_MEMORY
    max_memory = "0"             # resident bytes ("2GiB"); above it puts: OUT_OF_MEMORY; 0 = off
    output_timeout = 60          # seconds a client may leave its replies unread before it is closed
    max_input_buffers = "256MiB" # big requests (over 64 KiB) on their way, all clients together
    disk_reserve = "64MiB"       # floor of the disk reserve (docs/operations.md); "off"; default:
                                 # 1/16 of the data file system, at most 64 MiB

    [tls]                        # optional: TLS on the client port (same files on every node)
    cert = "/etc/haqueue/tls/cert.pem"
    key = "/etc/haqueue/tls/key.pem"

    [[id_rules]]                 # optional: id service rules beside the built-in o2o and counter
    name = "order_id"            # (a rule named o2o or counter replaces the built-in one)
    format = "O{yy:02}{month:02}{day:02}{counter:06}"
    min_counter = 0
    max_counter = 999999
    reset_seconds = 86400        # 0: never starts again
    timezone = "+08:00"          # a fixed UTC offset: cycles and dates are in it
    salt_max_len = 0             # > 0 when the format has {salt}
    mode = "segment"             # "exact" (default) or "segment"
    segment = 1000               # segment mode: values per block committed ahead

Id rules are validated here (core/idrules.py: a format that could render two
counters alike is refused) but take effect only as a committed entry: the
leader proposes the file's rules when they differ from the replicated ones,
on taking office and on SIGHUP (server/app.py), so every node uses the same
rules whatever its own file says.

The optional tables have defaults for every key; the defaults are the
documented, tested choice (docs/operations.md explains each).
"""

from __future__ import annotations

import ipaddress
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from haqueue.config.fields import ClusterFileError, Fields
from haqueue.config.keepalived import KeepalivedSettings
from haqueue.config.limits import ClientLimits, parse_reserve, parse_size
from haqueue.config.lvs import LvsSettings
from haqueue.core.idrules import DEFAULT_SEGMENT, IdRule, RuleError, parse_offset

__all__ = ["Cluster", "ClusterFileError", "Deploy", "KeepalivedSettings", "LvsSettings", "Node", "TlsSettings",
           "load_cluster", "parse_cluster"]

DEFAULT_CLIENT_PORT = 11300  # beanstalkd's default port
DEFAULT_RAFT_PORT = 11400
DEFAULT_ADMIN_PORT = 11500
DEFAULT_VIRTUAL_ROUTER_ID = 51

# Node ids end up in file names, keepalived instance names and systemd unit
# names, so keep them to a safe, short alphabet.
_ID_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,31}$")
# Linux IFNAMSIZ is 16 including the NUL.
_IFNAME_RE = re.compile(r"^[A-Za-z0-9_.:-]{1,15}$")


@dataclass(frozen=True)
class Node:
    """One queue node (or LVS director) of the deployment."""

    id: str
    address: str
    interface: str
    priority: int
    client_port: int = DEFAULT_CLIENT_PORT
    raft_port: int = DEFAULT_RAFT_PORT
    admin_port: int = DEFAULT_ADMIN_PORT
    data_dir: str | None = None
    id_port: int = 0  # UDP, the id service (server/ids/udp.py); 0: off
    gearman_port: int = 0  # TCP, Gearman (server/gearman/service.py); 0: off

    @property
    def raft_endpoint(self) -> str:
        return f"{self.address}:{self.raft_port}"

    @property
    def client_endpoint(self) -> str:
        return f"{self.address}:{self.client_port}"

    @property
    def admin_url(self) -> str:
        return f"http://{self.address}:{self.admin_port}"


@dataclass(frozen=True)
class Deploy:
    """Where haqueue lives on every host ([deploy])."""

    config_path: str = "/etc/haqueue/cluster.toml"
    haqueue_bin: str = "/usr/local/bin/haqueue"
    user: str = "haqueue"
    data_dir: str = "/var/lib/haqueue"

    @classmethod
    def read(cls, top: Fields) -> Deploy:
        t = top.optional_table("deploy", ("config_path", "haqueue_bin", "user", "data_dir"))
        d = cls()
        return cls(
            config_path=t.path("config_path", d.config_path),
            haqueue_bin=t.path("haqueue_bin", d.haqueue_bin),
            user=t.user("user", d.user),
            data_dir=t.path("data_dir", d.data_dir),
        )


@dataclass(frozen=True)
class TlsSettings:
    """The client port's certificate chain and key ([tls]), PEM paths on every node."""

    cert: str
    key: str

    @classmethod
    def read(cls, top: Fields) -> TlsSettings | None:
        if "tls" not in top:
            return None
        t = top.optional_table("tls", ("cert", "key"))
        for key in ("cert", "key"):
            if key not in t:
                raise t.fail(key, "missing: TLS needs both cert and key")
        return cls(cert=t.string("cert"), key=t.string("key"))


@dataclass(frozen=True)
class Cluster:
    """A validated cluster file."""

    name: str
    vip: ipaddress.IPv4Interface
    client_port: int
    raft_port: int
    admin_port: int
    secret: str
    virtual_router_id: int
    nodes: tuple[Node, ...]
    directors: tuple[Node, ...] = ()
    deploy: Deploy = Deploy()
    keepalived: KeepalivedSettings = KeepalivedSettings()
    lvs: LvsSettings = LvsSettings()
    limits: ClientLimits = field(default_factory=ClientLimits)
    tls: TlsSettings | None = None
    admin_token: str | None = None
    id_port: int = 0
    id_rules: tuple[IdRule, ...] = ()
    id_rate_limit: int = 20_000
    gearman_port: int = 0
    source: str = "<memory>"

    @property
    def vip_address(self) -> str:
        return str(self.vip.ip)

    @property
    def vip_prefixlen(self) -> int:
        return self.vip.network.prefixlen

    def node(self, node_id: str) -> Node:
        for node in self.nodes:
            if node.id == node_id:
                return node
        known = ", ".join(n.id for n in self.nodes)
        raise ClusterFileError(f"{self.source}: no node {node_id!r} (nodes: {known})")

    def peers_of(self, node_id: str) -> tuple[Node, ...]:
        return tuple(n for n in self.nodes if n.id != node_id)

    def data_dir_of(self, node: Node) -> str:
        """The node's data directory on its host: its own, or DEPLOY.DATA_DIR/ID."""
        return node.data_dir or f"{self.deploy.data_dir.rstrip('/')}/{node.id}"

    def leader_check_command(self, node: Node) -> str:
        """The `command` leader check for this node (exit 0 only on the Raft leader)."""
        template = self.keepalived.check_command or (
            f"{self.deploy.haqueue_bin} node is-leader --config {self.deploy.config_path} --node {{node}}"
        )
        return template.replace("{node}", node.id)


def load_cluster(path: str | Path) -> Cluster:
    """Read and validate a cluster file; raise ClusterFileError with one line."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ClusterFileError(f"{path}: no such file") from None
    except OSError as exc:
        raise ClusterFileError(f"{path}: cannot read: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise ClusterFileError(f"{path}: not UTF-8 text") from None
    return parse_cluster(text, source=str(path))


def parse_cluster(text: str, source: str = "<memory>") -> Cluster:
    """Validate TOML text as a cluster file."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ClusterFileError(f"{source}: not valid TOML: {exc}") from None
    return _read_cluster(Fields(source, data))


TABLES = ("cluster", "nodes", "directors", "deploy", "keepalived", "lvs", "limits", "tls", "id_rules")
ID_RULE_KEYS = ("name", "format", "min_counter", "max_counter", "reset_seconds", "timezone", "salt_max_len",
                "mode", "segment")
NODE_KEYS = ("id", "address", "interface", "priority", "client_port", "raft_port", "admin_port", "data_dir",
             "id_port", "gearman_port")


def _read_cluster(top: Fields) -> Cluster:
    """The whole file: [cluster] here, every other block by its own reader."""
    top.only(TABLES, "unknown table")
    c = top.table("cluster").only(
        ("name", "vip", "client_port", "raft_port", "admin_port", "secret", "virtual_router_id", "admin_token",
         "id_port", "id_rate_limit", "gearman_port"))
    name = c.string("name")
    if not _ID_RE.match(name):
        raise c.fail("name", f"{name!r} must be letters, digits, '-' or '_' (max 32)")
    vip = _read_vip(c)
    client_port = c.integer("client_port", DEFAULT_CLIENT_PORT, 1, 65535)
    raft_port = c.integer("raft_port", DEFAULT_RAFT_PORT, 1, 65535)
    admin_port = c.integer("admin_port", DEFAULT_ADMIN_PORT, 1, 65535)
    secret = c.string("secret")
    vrid = c.integer("virtual_router_id", DEFAULT_VIRTUAL_ROUTER_ID, 1, 255)
    admin_token = c.string("admin_token") if "admin_token" in c else None
    ports = {"client_port": client_port, "raft_port": raft_port, "admin_port": admin_port}
    id_port = c.integer("id_port", 0, 0, 65535)
    gearman_port = c.integer("gearman_port", 0, 0, 65535)
    ids: dict[str, str] = {}  # every member's id, nodes and directors alike: where it was first seen
    nodes = _read_members(top, "nodes", vip, ports, ids, required=True, id_port=id_port,
                          gearman_port=gearman_port)
    directors = _read_members(top, "directors", vip, ports, ids, required=False)
    # Each address named by its first member (several nodes may share a host).
    addresses = {m.address: m.id for m in reversed(nodes + directors)}
    return Cluster(
        name=name,
        vip=vip,
        client_port=client_port,
        raft_port=raft_port,
        admin_port=admin_port,
        secret=secret,
        virtual_router_id=vrid,
        nodes=nodes,
        directors=directors,
        deploy=Deploy.read(top),
        keepalived=KeepalivedSettings.read(top),
        lvs=LvsSettings.read(top, vip, addresses),
        limits=_read_limits(top),
        tls=TlsSettings.read(top),
        admin_token=admin_token,
        id_port=id_port,
        id_rules=read_id_rules(top),
        id_rate_limit=c.integer("id_rate_limit", 20_000, 0, 10**9),
        gearman_port=gearman_port,
        source=top.source,
    )


def _read_vip(c: Fields) -> ipaddress.IPv4Interface:
    vip_text = c.string("vip")
    if "/" not in vip_text:
        raise c.fail("vip", f"{vip_text!r} needs a prefix length, e.g. 192.0.2.100/24")
    try:
        vip = ipaddress.IPv4Interface(vip_text)
    except ValueError:
        raise c.fail("vip", f"{vip_text!r} is not an IPv4 address with prefix") from None
    network = vip.network
    if network.prefixlen != 32 and vip.ip in (network.network_address, network.broadcast_address):
        raise c.fail("vip", f"{vip_text} is the network or broadcast address")
    return vip


def _read_members(top: Fields, key: str, vip: ipaddress.IPv4Interface, ports: dict[str, int],
                  ids: dict[str, str], required: bool, id_port: int = 0,
                  gearman_port: int = 0) -> tuple[Node, ...]:
    """[[nodes]] or [[directors]]: ids unique across both (`ids`), priorities and
    address:port endpoints unique within the array (the id service's UDP
    ports among themselves: UDP and TCP ports are separate spaces)."""
    raw = top.get(key)
    if raw is None:
        if required:
            raise top.fail(key, "missing: add one [[nodes]] table per node")
        return ()
    if not isinstance(raw, list) or not all(isinstance(n, dict) for n in raw):
        raise top.fail(key, f"must be an array of tables ([[{key}]])")
    if required and not raw:
        raise top.fail(key, "at least one node is needed")
    members: list[Node] = []
    seen_priorities: dict[int, str] = {}
    seen_endpoints: dict[tuple[str, int], str] = {}
    seen_id_endpoints: dict[tuple[str, int], str] = {}
    for i, entry in enumerate(raw):
        where = f"{key}[{i}]"
        m = top.at(where, entry).only(NODE_KEYS)
        node_id = m.string("id")
        if not _ID_RE.match(node_id):
            raise m.fail("id", f"{node_id!r} must be letters, digits, '-' or '_' (max 32)")
        if node_id in ids:
            raise m.fail("id", f"duplicate id {node_id!r} (also {ids[node_id]})")
        ids[node_id] = where
        address = m.address_beside("address", vip)
        interface = m.string("interface")
        if not _IFNAME_RE.match(interface):
            raise m.fail("interface", f"{interface!r} is not a valid interface name")
        priority = m.integer("priority", None, 1, 254)
        if priority in seen_priorities:
            raise m.fail("priority", f"duplicate priority {priority} (also {seen_priorities[priority]})")
        seen_priorities[priority] = node_id
        own_ports = {name: m.integer(name, default, 1, 65535) for name, default in ports.items()}
        for name, port in own_ports.items():
            endpoint = (str(address), port)
            if endpoint in seen_endpoints:
                raise m.fail(name, f"{address}:{port} is already used by {seen_endpoints[endpoint]}")
            seen_endpoints[endpoint] = f"{node_id} {name}"
        own_gearman_port = m.integer("gearman_port", gearman_port, 0, 65535) if key == "nodes" else 0
        if own_gearman_port:  # TCP, like the client, Raft and admin ports
            endpoint = (str(address), own_gearman_port)
            if endpoint in seen_endpoints:
                raise m.fail("gearman_port",
                             f"{address}:{own_gearman_port} is already used by {seen_endpoints[endpoint]}")
            seen_endpoints[endpoint] = f"{node_id} gearman_port"
        own_id_port = m.integer("id_port", id_port, 0, 65535)
        if own_id_port:
            endpoint = (str(address), own_id_port)
            if endpoint in seen_id_endpoints:
                raise m.fail("id_port", f"{address}:{own_id_port} is already used by {seen_id_endpoints[endpoint]}")
            seen_id_endpoints[endpoint] = node_id
        data_dir = m.get("data_dir")
        if data_dir is not None and (not isinstance(data_dir, str) or not data_dir):
            raise m.fail("data_dir", "must be a non-empty string")
        members.append(Node(id=node_id, address=str(address), interface=interface, priority=priority,
                            data_dir=data_dir, id_port=own_id_port, gearman_port=own_gearman_port,
                            **own_ports))
    return tuple(members)


def read_id_rules(top: Fields) -> tuple[IdRule, ...]:
    """[[id_rules]]: each rule validated as the state machine will (core/idrules.py)."""
    raw = top.get("id_rules")
    if raw is None:
        return ()
    if not isinstance(raw, list) or not all(isinstance(r, dict) for r in raw):
        raise top.fail("id_rules", "must be an array of tables ([[id_rules]])")
    rules: list[IdRule] = []
    names: dict[str, str] = {}
    for i, entry in enumerate(raw):
        where = f"id_rules[{i}]"
        r = top.at(where, entry).only(ID_RULE_KEYS)
        name = r.string("name")
        if name in names:
            raise r.fail("name", f"duplicate rule {name!r} (also {names[name]})")
        names[name] = where
        try:
            offset = parse_offset(r.string("timezone", "+00:00"))
        except ValueError as exc:
            raise r.fail("timezone", str(exc)) from None
        mode = r.choice("mode", "exact", ("exact", "segment"))
        try:
            rules.append(IdRule(
                name=name,
                format=r.string("format"),
                min_counter=r.integer("min_counter", 0, 0, 2**63 - 1),
                max_counter=r.integer("max_counter", 2**63 - 1, 0, 2**63 - 1),
                reset_seconds=r.integer("reset_seconds", 0, 0, 100 * 366 * 86400),
                utc_offset=offset,
                salt_max_len=r.integer("salt_max_len", 0, 0, 64),
                mode=mode,
                segment=r.integer("segment", DEFAULT_SEGMENT if mode == "segment" else 0, 0, 10**9),
            ))
        except RuleError as exc:
            raise ClusterFileError(f"{top.source}: {where}: {exc}") from None
    return tuple(rules)


def _read_limits(top: Fields) -> ClientLimits:
    """[limits]: what clients may hold (server/limits.py owns the numbers' meaning)."""
    t = top.optional_table(
        "limits", ("max_connections", "max_tubes", "max_watched_tubes", "max_memory", "output_timeout",
                   "disk_reserve", "max_input_buffers"))
    d = ClientLimits()

    def size(key: str, default: int) -> int:
        value = t.get(key, default)
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            raise t.fail(key, f"must be bytes or a size like \"2GiB\", not {value!r}")
        try:
            return parse_size(str(value))
        except ValueError as exc:
            raise t.fail(key, str(exc)) from None

    reserve = t.get("disk_reserve", None)
    if reserve is not None:
        if isinstance(reserve, bool) or not isinstance(reserve, (int, str)):
            raise t.fail("disk_reserve", f"must be bytes, a size like \"64MiB\" or \"off\", not {reserve!r}")
        try:
            reserve = parse_reserve(str(reserve))
        except ValueError as exc:
            raise t.fail("disk_reserve", str(exc)) from None
    return ClientLimits(
        max_connections=t.integer("max_connections", d.max_connections, 1, 10**7),
        max_tubes=t.integer("max_tubes", d.max_tubes, 1, 10**9),
        max_watched_tubes=t.integer("max_watched_tubes", d.max_watched_tubes, 1, 10**9),
        max_memory=size("max_memory", d.max_memory),
        max_input_buffers=size("max_input_buffers", d.max_input_buffers),
        output_timeout=t.number("output_timeout", d.output_timeout, 0, 86400),
        disk_reserve=reserve,
    )
