"""The one cluster file: load, validate and describe a haqueue deployment.

A single TOML file describes the whole deployment so topology is written once
(design.md, "One cluster file"). `haqueue serve --config FILE --node ID` runs a
node from it and every `haqueue ops gen-*` renders from it. Validation happens
here, before anything is started or rendered, and every problem is reported as
one line that names the key: `nodes[2].address: 10.0.0.5 is outside the VIP's
subnet 192.0.2.0/24`.

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

    [[nodes]]
    id = "n1"
    address = "192.0.2.11"
    interface = "eth1"
    priority = 150
    # optional per node: client_port, raft_port, admin_port (to run several
    # nodes on one host), data_dir

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

    [tls]                        # optional: TLS on the client port (same files on every node)
    cert = "/etc/haqueue/tls/cert.pem"
    key = "/etc/haqueue/tls/key.pem"

The optional tables have defaults for every key; the defaults are the
documented, tested choice (docs/operations.md explains each).
"""

from __future__ import annotations

import ipaddress
import re
import shlex
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from haqueue.server.limits import ClientLimits, parse_size

DEFAULT_CLIENT_PORT = 11300  # beanstalkd's default port
DEFAULT_RAFT_PORT = 11400
DEFAULT_ADMIN_PORT = 11500
DEFAULT_VIRTUAL_ROUTER_ID = 51

LVS_MODES = ("dr", "tun", "nat")
LEADER_CHECKS = ("http", "command")

# Node ids end up in file names, keepalived instance names and systemd unit
# names, so keep them to a safe, short alphabet.
_ID_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,31}$")
# Linux IFNAMSIZ is 16 including the NUL.
_IFNAME_RE = re.compile(r"^[A-Za-z0-9_.:-]{1,15}$")
# Paths and user names are written unquoted into keepalived.conf and systemd
# units, so keep them free of spaces, quotes and other syntax.
_PATH_RE = re.compile(r"^/[A-Za-z0-9_./+-]*$")
_USER_RE = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")


class ClusterFileError(ValueError):
    """The cluster file is unusable; the message is one line naming the key."""


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


@dataclass(frozen=True)
class KeepalivedSettings:
    """Collocated VRRP knobs ([keepalived]); see haqueue/ops/keepalived.py for why."""

    advert_int: float = 0.1
    check: str = "http"
    check_command: str | None = None  # None: `haqueue node is-leader` from [deploy]
    garp_master_delay: int = 1
    garp_master_refresh: int = 60
    script_user: str = "keepalived_script"
    script_dir: str = "/etc/keepalived"
    start_delay: float = 2.0


@dataclass(frozen=True)
class LvsSettings:
    """LVS director pair knobs ([lvs]); see haqueue/ops/lvs.py for why."""

    mode: str = "dr"
    advert_int: float = 0.2
    virtual_router_id: int | None = None  # None: cluster.virtual_router_id
    delay_loop: float = 0.2
    conn_tab_bits: int = 15
    tcp_timeout: int = 3600
    nat_gateway: str | None = None


@dataclass(frozen=True)
class TlsSettings:
    """The client port's certificate chain and key ([tls]), PEM paths on every node."""

    cert: str
    key: str


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
    return _Validator(source).cluster(data)


class _Validator:
    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, key: str, problem: str) -> ClusterFileError:
        return ClusterFileError(f"{self.source}: {key}: {problem}")

    def table(self, data: dict, key: str) -> dict:
        value = data.get(key)
        if value is None:
            raise self.fail(key, "missing table")
        if not isinstance(value, dict):
            raise self.fail(key, "must be a table")
        return value

    def string(self, data: dict, key: str, where: str, default: str | None = None) -> str:
        value = data.get(key, default)
        if value is None:
            raise self.fail(f"{where}.{key}" if where else key, "missing")
        if not isinstance(value, str) or not value:
            raise self.fail(f"{where}.{key}" if where else key, "must be a non-empty string")
        return value

    def integer(self, data: dict, key: str, where: str, default: int | None, lo: int, hi: int) -> int:
        value = data.get(key, default)
        name = f"{where}.{key}"
        if value is None:
            raise self.fail(name, "missing")
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(name, f"must be an integer, not {value!r}")
        if not lo <= value <= hi:
            raise self.fail(name, f"{value} is out of range {lo}..{hi}")
        return value

    def number(self, data: dict, key: str, where: str, default: float, lo: float, hi: float) -> float:
        value = data.get(key, default)
        name = f"{where}.{key}"
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.fail(name, f"must be a number of seconds, not {value!r}")
        if not lo <= value <= hi:
            raise self.fail(name, f"{value} is out of range {lo:g}..{hi:g}")
        return float(value)

    def choice(self, data: dict, key: str, where: str, default: str, choices: tuple[str, ...]) -> str:
        value = self.string(data, key, where, default)
        if value not in choices:
            raise self.fail(f"{where}.{key}", f"{value!r} is not one of {', '.join(choices)}")
        return value

    def path(self, data: dict, key: str, where: str, default: str) -> str:
        value = self.string(data, key, where, default)
        if not _PATH_RE.match(value):
            raise self.fail(
                f"{where}.{key}", f"{value!r} must be an absolute path of letters, digits and _ . / + -"
            )
        return value

    def user(self, data: dict, key: str, where: str, default: str) -> str:
        value = self.string(data, key, where, default)
        if not _USER_RE.match(value):
            raise self.fail(f"{where}.{key}", f"{value!r} is not a valid user name")
        return value

    def optional_table(self, data: dict, key: str, known: set[str]) -> dict:
        value = data.get(key, {})
        if not isinstance(value, dict):
            raise self.fail(key, "must be a table")
        self.unknown_keys(value, known, key)
        return value

    def unknown_keys(self, data: dict, known: set[str], where: str) -> None:
        for key in data:
            if key not in known:
                raise self.fail(f"{where}.{key}", "unknown key")

    def cluster(self, data: dict) -> Cluster:
        for key in data:
            if key not in ("cluster", "nodes", "directors", "deploy", "keepalived", "lvs", "limits", "tls"):
                raise self.fail(key, "unknown table")
        c = self.table(data, "cluster")
        self.unknown_keys(
            c,
            {"name", "vip", "client_port", "raft_port", "admin_port", "secret", "virtual_router_id",
             "admin_token"},
            "cluster",
        )
        name = self.string(c, "name", "cluster")
        if not _ID_RE.match(name):
            raise self.fail("cluster.name", f"{name!r} must be letters, digits, '-' or '_' (max 32)")
        vip_text = self.string(c, "vip", "cluster")
        if "/" not in vip_text:
            raise self.fail("cluster.vip", f"{vip_text!r} needs a prefix length, e.g. 192.0.2.100/24")
        try:
            vip = ipaddress.IPv4Interface(vip_text)
        except ValueError:
            raise self.fail("cluster.vip", f"{vip_text!r} is not an IPv4 address with prefix") from None
        if vip.network.prefixlen == 32 or vip.ip in (vip.network.network_address, vip.network.broadcast_address):
            if vip.network.prefixlen != 32:
                raise self.fail("cluster.vip", f"{vip_text} is the network or broadcast address")
        client_port = self.integer(c, "client_port", "cluster", DEFAULT_CLIENT_PORT, 1, 65535)
        raft_port = self.integer(c, "raft_port", "cluster", DEFAULT_RAFT_PORT, 1, 65535)
        admin_port = self.integer(c, "admin_port", "cluster", DEFAULT_ADMIN_PORT, 1, 65535)
        secret = self.string(c, "secret", "cluster")
        vrid = self.integer(c, "virtual_router_id", "cluster", DEFAULT_VIRTUAL_ROUTER_ID, 1, 255)
        admin_token = self.string(c, "admin_token", "cluster") if "admin_token" in c else None
        defaults = {"client_port": client_port, "raft_port": raft_port, "admin_port": admin_port}
        nodes = self.members(data, "nodes", vip, defaults, required=True)
        directors = self.members(data, "directors", vip, defaults, required=False)
        ids: dict[str, str] = {}
        for key, members in (("nodes", nodes), ("directors", directors)):
            for i, member in enumerate(members):
                if member.id in ids:
                    raise self.fail(f"{key}[{i}].id", f"duplicate id {member.id!r} (also {ids[member.id]})")
                ids[member.id] = f"{key}[{i}]"
        deploy = self.deploy(data)
        keepalived = self.keepalived(data)
        lvs = self.lvs(data, vip, nodes + directors)
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
            deploy=deploy,
            keepalived=keepalived,
            lvs=lvs,
            limits=self.limits(data),
            tls=self.tls(data),
            admin_token=admin_token,
            source=self.source,
        )

    def limits(self, data: dict) -> ClientLimits:
        t = self.optional_table(
            data, "limits",
            {"max_connections", "max_tubes", "max_watched_tubes", "max_memory", "output_timeout"})
        d = ClientLimits()
        memory = t.get("max_memory", d.max_memory)
        if isinstance(memory, bool) or not isinstance(memory, (int, str)):
            raise self.fail("limits.max_memory", f"must be bytes or a size like \"2GiB\", not {memory!r}")
        try:
            memory = parse_size(str(memory))
        except ValueError as exc:
            raise self.fail("limits.max_memory", str(exc)) from None
        return ClientLimits(
            max_connections=self.integer(t, "max_connections", "limits", d.max_connections, 1, 10**7),
            max_tubes=self.integer(t, "max_tubes", "limits", d.max_tubes, 1, 10**9),
            max_watched_tubes=self.integer(t, "max_watched_tubes", "limits", d.max_watched_tubes, 1, 10**9),
            max_memory=memory,
            output_timeout=self.number(t, "output_timeout", "limits", d.output_timeout, 0, 86400),
        )

    def tls(self, data: dict) -> TlsSettings | None:
        if "tls" not in data:
            return None
        t = self.optional_table(data, "tls", {"cert", "key"})
        for key in ("cert", "key"):
            if key not in t:
                raise self.fail(f"tls.{key}", "missing: TLS needs both cert and key")
        return TlsSettings(cert=self.string(t, "cert", "tls"), key=self.string(t, "key", "tls"))

    def deploy(self, data: dict) -> Deploy:
        t = self.optional_table(data, "deploy", {"config_path", "haqueue_bin", "user", "data_dir"})
        d = Deploy()
        return Deploy(
            config_path=self.path(t, "config_path", "deploy", d.config_path),
            haqueue_bin=self.path(t, "haqueue_bin", "deploy", d.haqueue_bin),
            user=self.user(t, "user", "deploy", d.user),
            data_dir=self.path(t, "data_dir", "deploy", d.data_dir),
        )

    def advert_int(self, t: dict, where: str, default: float) -> float:
        # VRRPv3 carries the interval in centiseconds (RFC 5798 5.2.7), 12 bits.
        value = self.number(t, "advert_int", where, default, 0.01, 40.95)
        if abs(round(value * 100) - value * 100) > 1e-6:
            raise self.fail(f"{where}.advert_int", f"{value:g} is not a multiple of 0.01 s (VRRPv3 centiseconds)")
        return round(value, 2)

    def keepalived(self, data: dict) -> KeepalivedSettings:
        t = self.optional_table(
            data,
            "keepalived",
            {
                "advert_int", "check", "check_command", "garp_master_delay", "garp_master_refresh",
                "script_user", "script_dir", "start_delay",
            },
        )
        d = KeepalivedSettings()
        check_command = t.get("check_command")
        if check_command is not None:
            check_command = self.command(t, "check_command", "keepalived")
        return KeepalivedSettings(
            advert_int=self.advert_int(t, "keepalived", d.advert_int),
            check=self.choice(t, "check", "keepalived", d.check, LEADER_CHECKS),
            check_command=check_command,
            garp_master_delay=self.integer(t, "garp_master_delay", "keepalived", d.garp_master_delay, 0, 3600),
            garp_master_refresh=self.integer(
                t, "garp_master_refresh", "keepalived", d.garp_master_refresh, 0, 86400
            ),
            script_user=self.user(t, "script_user", "keepalived", d.script_user),
            script_dir=self.path(t, "script_dir", "keepalived", d.script_dir),
            start_delay=self.number(t, "start_delay", "keepalived", d.start_delay, 0, 600),
        )

    def command(self, t: dict, key: str, where: str) -> str:
        name = f"{where}.{key}"
        value = self.string(t, key, where)
        try:
            words = shlex.split(value)
        except ValueError as exc:
            raise self.fail(name, f"cannot be split into words: {exc}") from None
        if not words or not _PATH_RE.match(words[0]):
            raise self.fail(name, "must start with the absolute path of the program")
        for placeholder in re.findall(r"\{[^}]*\}", value):
            if placeholder != "{node}":
                raise self.fail(name, f"unknown placeholder {placeholder} (only {{node}} is replaced)")
        if any(c in value for c in "\"'\n"):
            # It is written into a quoted keepalived `script "..."` string.
            raise self.fail(name, "must not contain quotes, backslashes or newlines")
        return value

    def lvs(self, data: dict, vip, members: tuple[Node, ...]) -> LvsSettings:
        t = self.optional_table(
            data,
            "lvs",
            {"mode", "advert_int", "virtual_router_id", "delay_loop", "conn_tab_bits", "tcp_timeout", "nat_gateway"},
        )
        d = LvsSettings()
        vrid = t.get("virtual_router_id")
        if vrid is not None:
            vrid = self.integer(t, "virtual_router_id", "lvs", None, 1, 255)
        mode = self.choice(t, "mode", "lvs", d.mode, LVS_MODES)
        gateway = t.get("nat_gateway")
        if gateway is not None:
            text = self.string(t, "nat_gateway", "lvs")
            try:
                address = ipaddress.IPv4Address(text)
            except ValueError:
                raise self.fail("lvs.nat_gateway", f"{text!r} is not an IPv4 address") from None
            if address not in vip.network:
                raise self.fail("lvs.nat_gateway", f"{address} is outside the VIP's subnet {vip.network}")
            if address == vip.ip:
                raise self.fail("lvs.nat_gateway", f"{address} is the VIP itself")
            for member in members:
                if member.address == str(address):
                    raise self.fail("lvs.nat_gateway", f"{address} is already {member.id}'s address")
            gateway = str(address)
        elif mode == "nat":
            raise self.fail("lvs.nat_gateway", "missing: NAT mode needs the real servers' gateway address")
        return LvsSettings(
            mode=mode,
            advert_int=self.advert_int(t, "lvs", d.advert_int),
            virtual_router_id=vrid,
            delay_loop=self.number(t, "delay_loop", "lvs", d.delay_loop, 0.05, 60),
            # ip_vs accepts 8..20 (the module clamps anything else to its default).
            conn_tab_bits=self.integer(t, "conn_tab_bits", "lvs", d.conn_tab_bits, 8, 20),
            tcp_timeout=self.integer(t, "tcp_timeout", "lvs", d.tcp_timeout, 60, 7 * 86400),
            nat_gateway=gateway,
        )

    def members(self, data: dict, key: str, vip, defaults: dict, required: bool) -> tuple[Node, ...]:
        raw = data.get(key)
        if raw is None:
            if required:
                raise self.fail(key, "missing: add one [[nodes]] table per node")
            return ()
        if not isinstance(raw, list) or not all(isinstance(n, dict) for n in raw):
            raise self.fail(key, f"must be an array of tables ([[{key}]])")
        if required and not raw:
            raise self.fail(key, "at least one node is needed")
        members: list[Node] = []
        seen_ids: dict[str, int] = {}
        seen_priorities: dict[int, str] = {}
        seen_endpoints: dict[tuple[str, int], str] = {}
        for i, entry in enumerate(raw):
            where = f"{key}[{i}]"
            self.unknown_keys(
                entry,
                {"id", "address", "interface", "priority", "client_port", "raft_port", "admin_port", "data_dir"},
                where,
            )
            node_id = self.string(entry, "id", where)
            if not _ID_RE.match(node_id):
                raise self.fail(f"{where}.id", f"{node_id!r} must be letters, digits, '-' or '_' (max 32)")
            if node_id in seen_ids:
                raise self.fail(f"{where}.id", f"duplicate id {node_id!r} (also {key}[{seen_ids[node_id]}])")
            seen_ids[node_id] = i
            address_text = self.string(entry, "address", where)
            try:
                address = ipaddress.IPv4Address(address_text)
            except ValueError:
                raise self.fail(f"{where}.address", f"{address_text!r} is not an IPv4 address") from None
            if address not in vip.network:
                raise self.fail(
                    f"{where}.address", f"{address} is outside the VIP's subnet {vip.network}"
                )
            if address == vip.ip:
                raise self.fail(f"{where}.address", f"{address} is the VIP itself")
            interface = self.string(entry, "interface", where)
            if not _IFNAME_RE.match(interface):
                raise self.fail(f"{where}.interface", f"{interface!r} is not a valid interface name")
            priority = self.integer(entry, "priority", where, None, 1, 254)
            if priority in seen_priorities:
                raise self.fail(
                    f"{where}.priority", f"duplicate priority {priority} (also {seen_priorities[priority]})"
                )
            seen_priorities[priority] = node_id
            ports = {
                name: self.integer(entry, name, where, default, 1, 65535) for name, default in defaults.items()
            }
            for name, port in ports.items():
                endpoint = (str(address), port)
                if endpoint in seen_endpoints:
                    raise self.fail(
                        f"{where}.{name}", f"{address}:{port} is already used by {seen_endpoints[endpoint]}"
                    )
                seen_endpoints[endpoint] = f"{node_id} {name}"
            data_dir = entry.get("data_dir")
            if data_dir is not None and (not isinstance(data_dir, str) or not data_dir):
                raise self.fail(f"{where}.data_dir", "must be a non-empty string")
            members.append(
                Node(
                    id=node_id,
                    address=str(address),
                    interface=interface,
                    priority=priority,
                    data_dir=data_dir,
                    **ports,
                )
            )
        return tuple(members)
