"""The lab's network: namespaces, a bridge and veth links, built with pyroute2.

Layout (PREFIX defaults to `hqlab`; every name is recorded before it exists):

    PREFIX-sw      switch namespace: bridge br0, one port per other namespace
    PREFIX-n1..nN  node namespaces (three by default, five with --nodes 5): lo,
                   eth1 (veth to br0) with the node address, 198.18.0.(10+K) for nK
    PREFIX-client  client namespace: lo, eth1 with the client address

Rules:
- Nothing of the lab lives in the root namespace: veth pairs are created inside
  a node namespace with their peer placed straight into the switch namespace.
- No namespace has a default route, and every address is in 198.18.0.0/15
  (RFC 2544, benchmarking), so no lab packet can leave the machine or be
  mistaken for a real one.
- The state file is written before each step, so `destroy()` removes whatever
  a crashed `build()` managed to create.
- pysyncobj clobbers socket.inet_ntop at import (haqueue/replication says why);
  this module never imports it, and neither may anything that imports this one
  in the same process before using pyroute2.
"""

from __future__ import annotations

import ctypes
import ipaddress
import json
import os
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path

from pyroute2 import IPRoute, netns

LAB_NETWORK = ipaddress.IPv4Network("198.18.0.0/15")  # RFC 2544 benchmark range
DEFAULT_SUBNET = "198.18.0"
NODE_HOST_BASE = 10  # node nK is SUBNET.(10+K): n1 .11, n2 .12, ... below the client's .50
MAX_NODE = 39  # n39 is .49, the last host below the client
CLIENT_HOST = 50
VIP_HOST = 100
IFNAME = "eth1"
BRIDGE = "br0"
STATE_NAME = "state.json"
CLONE_NEWNET = 0x40000000  # linux/sched.h


@dataclass
class LabState:
    """Everything the lab created, so `down` can remove it (saved as JSON)."""

    dir: str
    prefix: str = "hqlab"
    subnet: str = DEFAULT_SUBNET
    namespaces: list[str] = field(default_factory=list)
    # The cluster's members, each in its own namespace (membership changes add and remove them)
    nodes: list[str] = field(default_factory=lambda: ["n1", "n2", "n3"])
    # process name ("n1", "keepalived-n1", "workload") -> {"pid", "started", "group"}
    processes: dict[str, dict] = field(default_factory=dict)
    # data filesystem mount points (each node's data directory, storage.py), recorded before mounting
    mounts: list[str] = field(default_factory=list)
    journal_size: int = 65536  # each node's -s: small, so snapshots come every second or two under load
    disk_mib: int = 32  # each node's data filesystem
    disk: str = "ext4"  # its kind: "ext4" (an image on a loop device) or "tmpfs" (storage.py)

    @property
    def path(self) -> Path:
        return Path(self.dir) / STATE_NAME

    def save(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=2, sort_keys=True) + "\n")
        os.replace(tmp, self.path)

    @classmethod
    def load(cls, directory: str | Path) -> "LabState | None":
        path = Path(directory) / STATE_NAME
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            raise ValueError(f"{path}: unreadable lab state: {exc}") from None
        return cls(**data)

    # names --------------------------------------------------------------
    @property
    def switch_ns(self) -> str:
        return f"{self.prefix}-sw"

    @property
    def client_ns(self) -> str:
        return f"{self.prefix}-client"

    def node_ns(self, node_id: str) -> str:
        return f"{self.prefix}-{node_id}"

    def node_address(self, node_id: str) -> str:
        return f"{self.subnet}.{NODE_HOST_BASE + node_number(node_id)}"

    @property
    def client_address(self) -> str:
        return f"{self.subnet}.{CLIENT_HOST}"

    @property
    def vip(self) -> str:
        return f"{self.subnet}.{VIP_HOST}"


def node_number(node_id: str) -> int:
    """K of a lab node id nK; the lab names its nodes n1, n2, ... and nothing else."""
    number = node_id[1:]
    if not (node_id.startswith("n") and number.isdigit() and 1 <= int(number) <= MAX_NODE):
        raise ValueError(f"lab node id {node_id!r}: expected n1 to n{MAX_NODE}")
    return int(number)


def check_subnet(subnet: str) -> None:
    """Refuse a subnet outside 198.18.0.0/15: lab addresses must never be real ones."""
    try:
        net = ipaddress.IPv4Network(f"{subnet}.0/24")
    except ValueError:
        raise ValueError(f"subnet {subnet!r}: expected three octets, e.g. 198.18.0") from None
    if not net.subnet_of(LAB_NETWORK):
        raise ValueError(f"subnet {subnet}: lab addresses must be inside {LAB_NETWORK} (RFC 2544)")


def existing_namespaces() -> set[str]:
    return set(netns.listnetns())


def _up(ipr: IPRoute, ifname: str, **extra) -> int:
    index = ipr.link_lookup(ifname=ifname)[0]
    ipr.link("set", index=index, state="up", **extra)
    return index


def _add_namespace(state: LabState, name: str) -> None:
    if name in existing_namespaces():
        raise FileExistsError(f"network namespace {name} already exists (is a lab up? try `haqueue lab down`)")
    state.namespaces.append(name)
    state.save()  # recorded before it exists: a crash from here on is cleaned up by destroy()
    netns.create(name)


def _attach(state: LabState, ns: str, port: str, address: str) -> None:
    """Give `ns` an eth1 with `address`/24, its peer `port` on the switch's bridge."""
    with IPRoute(netns=ns) as ipr:
        _up(ipr, "lo")
        ipr.link("add", ifname=IFNAME, kind="veth", peer={"ifname": port, "net_ns_fd": state.switch_ns})
        index = ipr.link_lookup(ifname=IFNAME)[0]
        ipr.addr("add", index=index, address=address, prefixlen=24)
        ipr.link("set", index=index, state="up")
    with IPRoute(netns=state.switch_ns) as sw:
        bridge = sw.link_lookup(ifname=BRIDGE)[0]
        _up(sw, port, master=bridge)


def build(state: LabState, node_ids: list[str]) -> None:
    """Create the switch, node and client namespaces and wire them to the bridge."""
    check_subnet(state.subnet)
    _add_namespace(state, state.switch_ns)
    with IPRoute(netns=state.switch_ns) as sw:
        _up(sw, "lo")
        sw.link("add", ifname=BRIDGE, kind="bridge")
        _up(sw, BRIDGE)
    for node_id in node_ids:
        add_node(state, node_id)
    _add_namespace(state, state.client_ns)
    _attach(state, state.client_ns, "p-client", state.client_address)


def add_node(state: LabState, node_id: str) -> None:
    """A node namespace wired to the switch (at `build`, or later for a node that joins)."""
    ns = state.node_ns(node_id)
    _add_namespace(state, ns)
    _attach(state, ns, f"p-{node_id}", state.node_address(node_id))


def destroy(state: LabState) -> list[str]:
    """Delete every namespace the state records (their veths go with them); return those deleted."""
    present = existing_namespaces()
    removed = []
    for name in reversed(state.namespaces):
        if name in present:
            netns.remove(name)
            removed.append(name)
    state.namespaces = []
    state.save()
    return removed


def set_link(ns: str, up: bool) -> None:
    """Bring a namespace's eth1 up or down (the lab's partition: cut the cable)."""
    with IPRoute(netns=ns) as ipr:
        index = ipr.link_lookup(ifname=IFNAME)[0]
        ipr.link("set", index=index, state="up" if up else "down")


def set_port(state: LabState, member: str, attached: bool) -> None:
    """Attach or detach a member's switch port (`p-MEMBER`) from the bridge.

    Detached, the member's own link stays up with carrier: a partition that
    the member's keepalived cannot see as an interface going down, so only
    the leader check can make it let go of the VIP.
    """
    with IPRoute(netns=state.switch_ns) as sw:
        port = sw.link_lookup(ifname=f"p-{member}")[0]
        master = sw.link_lookup(ifname=BRIDGE)[0] if attached else 0
        sw.link("set", index=port, master=master)


def set_blackhole(ns: str, address: str, on: bool) -> None:
    """Add or remove a blackhole route to one address inside a namespace.

    Blackholing the leader and one follower from each other is a partial
    partition: both still reach the third node and the clients.
    """
    with IPRoute(netns=ns) as ipr:
        ipr.route("add" if on else "del", dst=f"{address}/32", type="blackhole")


def addresses(ns: str) -> list[str]:
    """IPv4 addresses on the namespace's eth1."""
    with IPRoute(netns=ns) as ipr:
        found = ipr.link_lookup(ifname=IFNAME)
        if not found:
            return []
        return [a.get("address") for a in ipr.get_addr(index=found[0], family=2)]


def routes_have_default(ns: str) -> bool:
    with IPRoute(netns=ns) as ipr:
        return any(r.get("dst_len") == 0 for r in ipr.get_routes(family=2, table=254))


_libc = ctypes.CDLL(None, use_errno=True)


def in_namespace(ns: str, fn, *args, **kwargs):
    """Run fn in a thread that has joined network namespace `ns` (sockets it opens live there).

    setns(2) on a network namespace affects only the calling thread, so the
    caller's own namespace is untouched; the thread ends with fn.
    """
    result: dict = {}

    def target() -> None:
        try:
            fd = os.open(f"/var/run/netns/{ns}", os.O_RDONLY)
            try:
                if _libc.setns(fd, CLONE_NEWNET) != 0:
                    err = ctypes.get_errno()
                    raise OSError(err, f"setns {ns}: {os.strerror(err)}")
            finally:
                os.close(fd)
            result["value"] = fn(*args, **kwargs)
        except BaseException as exc:  # handed to the caller
            result["error"] = exc

    thread = threading.Thread(target=target, name=f"netns-{ns}", daemon=True)
    thread.start()
    thread.join()
    if "error" in result:
        raise result["error"]
    return result["value"]
