"""NIC bonding for a cluster member, rendered for ifupdown, systemd-networkd and RHEL ifcfg.

Owns one bond description (`BondSpec`) and three renderers that say the same
thing in each tool's syntax, plus a parser for the kernel's view of a live bond
(/proc/net/bonding/NAME) used by `ops check`.

Rules:
- Validate first (`bond_spec`), render after: every problem is one line.
- The bond carries the member's address and, through keepalived, the VIP, so the
  cluster file's `interface` for the member must be the bond, never a slave.
- Modes: active-backup (default; works with any switch) and 802.3ad (LACP; the
  switch ports must form a LAG). miimon is required: without link monitoring a
  dead slave is never failed over.
- active-backup keeps the current slave when the primary comes back
  (primary_reselect=failure): one fail-over per fault, like keepalived's nopreempt.
- Deterministic output; the same BondSpec gives the same bytes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from haqueue.config.cluster import Cluster, Node
from haqueue.ops import render
from haqueue.ops.render import RenderedFile

MODES = ("active-backup", "802.3ad")
FORMATS = ("ifupdown", "networkd", "ifcfg")
DEFAULT_MIIMON_MS = 100
# A slave must stay up this many miimon intervals before it is used again:
# a switch port that just came back may not forward yet (STP, LACP negotiation).
UPDELAY_INTERVALS = 2
MAX_MIIMON_MS = 10_000

_IFNAME_RE = re.compile(r"^[A-Za-z0-9_.-]{1,15}$")  # IFNAMSIZ 16 incl. NUL; no ':' (aliases)


class BondingError(ValueError):
    """The requested bond cannot be rendered; one line naming the problem."""


@dataclass(frozen=True)
class BondSpec:
    member: Node
    address: str  # "192.0.2.11/24": the member's address with the VIP's prefix
    bond: str
    slaves: tuple[str, ...]
    mode: str
    miimon: int

    @property
    def updelay(self) -> int:
        return self.miimon * UPDELAY_INTERVALS

    @property
    def primary(self) -> str | None:
        return self.slaves[0] if self.mode == "active-backup" else None

    def kernel_options(self) -> list[tuple[str, str]]:
        """Bonding driver options (sysfs names), the common vocabulary of the renderers."""
        opts = [("mode", self.mode), ("miimon", str(self.miimon)), ("updelay", str(self.updelay)),
                ("downdelay", "0")]
        if self.mode == "active-backup":
            opts += [("primary", self.slaves[0]), ("primary_reselect", "failure")]
        else:
            # lacp_rate fast: a dead partner is noticed in 3 s, not 90 s.
            # layer3+4: flows to one peer (the router) spread over all links.
            opts += [("lacp_rate", "fast"), ("xmit_hash_policy", "layer3+4")]
        return opts


def bond_spec(cluster: Cluster, member: Node, slaves: list[str], mode: str, miimon: int) -> BondSpec:
    """Validate the request against the cluster file and return what to render.

    The bond is the member's `interface` from the cluster file: that is where
    its address and the VIP live, so naming the bond anything else would
    render a config that disagrees with keepalived's.
    """
    if mode not in MODES:
        raise BondingError(f"--mode {mode!r}: choose one of {', '.join(MODES)}")
    if not 1 <= miimon <= MAX_MIIMON_MS:
        raise BondingError(
            f"--miimon {miimon}: must be 1..{MAX_MIIMON_MS} ms (0 would disable link monitoring)"
        )
    if len(slaves) < 2:
        raise BondingError(f"--slaves needs at least two interfaces, got {','.join(slaves) or 'none'!r}: "
                           "a bond of one has nothing to fail over to")
    for name in slaves:
        if not _IFNAME_RE.match(name):
            raise BondingError(f"--slaves: {name!r} is not a valid interface name")
    duplicates = sorted({s for s in slaves if slaves.count(s) > 1})
    if duplicates:
        raise BondingError(f"--slaves: {', '.join(duplicates)} listed twice")
    bond = member.interface
    if bond in slaves:
        raise BondingError(
            f"{member.id}: its interface {bond!r} is one of the slaves; the address and the VIP go on "
            f"the bond: set interface = \"bond0\" for {member.id} in the cluster file"
        )
    if not _IFNAME_RE.match(bond):
        raise BondingError(f"{member.id}: interface {bond!r} cannot name a bond (no ':' aliases)")
    return BondSpec(
        member=member,
        address=f"{member.address}/{cluster.vip_prefixlen}",
        bond=bond,
        slaves=tuple(slaves),
        mode=mode,
        miimon=miimon,
    )


# -- renderers: each returns {file name: text} -------------------------------

def _intro(command: str, install_as: str, spec: BondSpec, extra: str = "") -> list[str]:
    lines = [render.header(command, install=install_as).rstrip("\n"),
             f"# {spec.member.id}: {spec.bond} = {' + '.join(spec.slaves)}, mode {spec.mode}, "
             f"miimon {spec.miimon} ms, address {spec.address}"]
    if extra:
        lines.append(f"# {extra}")
    return lines


def render_ifupdown(spec: BondSpec, command: str) -> dict[str, str]:
    """Debian/Ubuntu ifupdown with the ifenslave package: /etc/network/interfaces.d/BOND."""
    name = spec.bond
    lines = _intro(command, f"/etc/network/interfaces.d/{name}", spec,
                   "needs: apt-get install ifenslave; the slaves need no stanza of their own")
    lines += ["", f"auto {name}", f"iface {name} inet static", f"    address {spec.address}",
              f"    bond-slaves {' '.join(spec.slaves)}"]
    lines += [f"    bond-{key.replace('_', '-')} {value}" for key, value in spec.kernel_options()]
    lines += [""]
    for slave in spec.slaves:
        lines += [f"iface {slave} inet manual", f"    bond-master {name}", ""]
    return {name: "\n".join(lines).rstrip("\n") + "\n"}


_NETWORKD_BOND_KEYS = {
    "mode": "Mode",
    "lacp_rate": "LACPTransmitRate",
    "xmit_hash_policy": "TransmitHashPolicy",
    "primary_reselect": "PrimaryReselectPolicy",
}
_NETWORKD_TIME_KEYS = {"miimon": "MIIMonitorSec", "updelay": "UpDelaySec", "downdelay": "DownDelaySec"}


def networkd_prefix() -> str:
    # networkd applies the first .network file (in lexical order) that matches a
    # link; 10- keeps ours ahead of distribution catch-alls (80-, 99-default).
    return "10-haqueue-"


def render_networkd(spec: BondSpec, command: str) -> dict[str, str]:
    """systemd-networkd: BOND.netdev creates the bond, .network files attach slaves and address."""
    prefix = networkd_prefix()
    files: dict[str, str] = {}
    netdev = f"{prefix}{spec.bond}.netdev"
    lines = _intro(command, f"/etc/systemd/network/{netdev}", spec)
    lines += ["", "[NetDev]", f"Name={spec.bond}", "Kind=bond", "", "[Bond]"]
    for key, value in spec.kernel_options():
        if key in _NETWORKD_TIME_KEYS:
            lines.append(f"{_NETWORKD_TIME_KEYS[key]}={value}ms")
        elif key in _NETWORKD_BOND_KEYS:
            lines.append(f"{_NETWORKD_BOND_KEYS[key]}={value}")
        # "primary" is not a netdev key: the slave's .network says PrimarySlave=true.
    files[netdev] = "\n".join(lines) + "\n"

    network = f"{prefix}{spec.bond}.network"
    lines = _intro(command, f"/etc/systemd/network/{network}", spec)
    lines += ["", "[Match]", f"Name={spec.bond}", "", "[Network]", f"Address={spec.address}",
              "# The address exists even while every slave is down, so haqueue and",
              "# keepalived can bind it at boot.",
              "ConfigureWithoutCarrier=yes",
              "# keepalived adds the VIP at run time; without this, a restart of",
              "# systemd-networkd (e.g. a package upgrade) removes it as a foreign",
              "# address (systemd#12050) and the VIP is gone until the next takeover.",
              "KeepConfiguration=yes"]
    files[network] = "\n".join(lines) + "\n"

    for slave in spec.slaves:
        name = f"{prefix}{spec.bond}-{slave}.network"
        lines = _intro(command, f"/etc/systemd/network/{name}", spec)
        lines += ["", "[Match]", f"Name={slave}", "", "[Network]", f"Bond={spec.bond}"]
        if slave == spec.primary:
            lines.append("PrimarySlave=true")
        files[name] = "\n".join(lines) + "\n"
    return files


def render_ifcfg(spec: BondSpec, command: str) -> dict[str, str]:
    """RHEL-style network-scripts (also read by NetworkManager's ifcfg-rh plugin)."""
    files: dict[str, str] = {}
    opts = " ".join(f"{k}={v}" for k, v in spec.kernel_options())
    ip, prefix = spec.address.split("/")
    name = f"ifcfg-{spec.bond}"
    lines = _intro(command, f"/etc/sysconfig/network-scripts/{name}", spec)
    lines += [
        f"DEVICE={spec.bond}",
        f"NAME={spec.bond}",
        "TYPE=Bond",
        "BONDING_MASTER=yes",
        f'BONDING_OPTS="{opts}"',
        "BOOTPROTO=none",
        "ONBOOT=yes",
        f"IPADDR={ip}",
        f"PREFIX={prefix}",
    ]
    files[name] = "\n".join(lines) + "\n"
    for slave in spec.slaves:
        name = f"ifcfg-{slave}"
        lines = _intro(command, f"/etc/sysconfig/network-scripts/{name}", spec)
        lines += [
            f"DEVICE={slave}",
            f"NAME={slave}",
            "TYPE=Ethernet",
            "BOOTPROTO=none",
            "ONBOOT=yes",
            f"MASTER={spec.bond}",
            "SLAVE=yes",
        ]
        files[name] = "\n".join(lines) + "\n"
    return files


RENDERERS = {"ifupdown": render_ifupdown, "networkd": render_networkd, "ifcfg": render_ifcfg}


def render_files(spec: BondSpec, formats: tuple[str, ...], command: str) -> list[RenderedFile]:
    """One file per bond/slave and format, named MEMBER/FORMAT/FILE."""
    return [
        RenderedFile(f"{spec.member.id}/{fmt}/{name}", text)
        for fmt in formats
        for name, text in RENDERERS[fmt](spec, command).items()
    ]


# -- the live bond -------------------------------------------------------------

@dataclass(frozen=True)
class SlaveState:
    name: str
    mii_up: bool


@dataclass(frozen=True)
class BondState:
    name: str
    mode: str
    mii_up: bool
    active_slave: str | None
    slaves: tuple[SlaveState, ...]


def parse_proc_bonding(name: str, text: str) -> BondState:
    """Parse /proc/net/bonding/NAME (drivers/net/bonding/bond_procfs.c's format).

    The file is a series of "Key: value" lines; the bond's own block comes
    first, then one block per slave opened by "Slave Interface: ethX".
    """
    mode = ""
    bond_mii: bool | None = None
    active = None
    slaves: list[SlaveState] = []
    current: str | None = None
    current_mii: bool | None = None
    for raw in text.splitlines():
        key, sep, value = raw.partition(":")
        if not sep:
            continue
        key, value = key.strip(), value.strip()
        if key == "Slave Interface":
            if current is not None:
                slaves.append(SlaveState(current, bool(current_mii)))
            current, current_mii = value, None
        elif key == "Bonding Mode" and current is None:
            mode = value
        elif key == "Currently Active Slave" and current is None:
            active = None if value == "None" else value
        elif key == "MII Status":
            if current is None:
                bond_mii = value == "up"
            elif current_mii is None:
                current_mii = value == "up"
    if current is not None:
        slaves.append(SlaveState(current, bool(current_mii)))
    if bond_mii is None:
        raise ValueError(f"/proc/net/bonding/{name}: no 'MII Status' line")
    return BondState(name=name, mode=mode, mii_up=bond_mii, active_slave=active, slaves=tuple(slaves))
