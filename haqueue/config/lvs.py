"""The cluster file's [lvs] block: the LVS director pair's knobs and the rules they obey.

Owns `LvsSettings`, the forwarding methods (`LVS_MODES`) and how the block is
read from the file (with the field reader of fields.py); haqueue/ops/lvs.py
renders the directors' and real servers' files from the values and explains
each. Kept apart from the renderer for the same
reason as keepalived.py: loading a cluster file stays cheap.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Mapping

from haqueue.config.fields import Fields
from haqueue.config.keepalived import read_advert_int

LVS_MODES = ("dr", "tun", "nat")


@dataclass(frozen=True)
class LvsSettings:
    """The LVS director pair's knobs, the cluster file's [lvs]; `read` holds its rules."""

    mode: str = "dr"
    advert_int: float = 0.2
    virtual_router_id: int | None = None  # None: cluster.virtual_router_id
    delay_loop: float = 0.2
    conn_tab_bits: int = 15
    tcp_timeout: int = 3600
    nat_gateway: str | None = None

    @classmethod
    def read(cls, top: Fields, vip: ipaddress.IPv4Interface, addresses: Mapping[str, str]) -> LvsSettings:
        """`addresses`: every member's address, to the member's id (the gateway must be none of them)."""
        t = top.optional_table("lvs", (
            "mode", "advert_int", "virtual_router_id", "delay_loop", "conn_tab_bits", "tcp_timeout", "nat_gateway",
        ))
        d = cls()
        vrid = t.integer("virtual_router_id", None, 1, 255) if "virtual_router_id" in t else None
        mode = t.choice("mode", d.mode, LVS_MODES)
        if "nat_gateway" in t:
            gateway = _read_nat_gateway(t, vip, addresses)
        elif mode == "nat":
            raise t.fail("nat_gateway", "missing: NAT mode needs the real servers' gateway address")
        else:
            gateway = None
        return cls(
            mode=mode,
            advert_int=read_advert_int(t, d.advert_int),
            virtual_router_id=vrid,
            delay_loop=t.number("delay_loop", d.delay_loop, 0.05, 60),
            # ip_vs accepts 8..20 (the module clamps anything else to its default).
            conn_tab_bits=t.integer("conn_tab_bits", d.conn_tab_bits, 8, 20),
            tcp_timeout=t.integer("tcp_timeout", d.tcp_timeout, 60, 7 * 86400),
            nat_gateway=gateway,
        )


def _read_nat_gateway(t: Fields, vip: ipaddress.IPv4Interface, addresses: Mapping[str, str]) -> str:
    """The NAT real servers' default gateway: held by the directors, inside the VIP's subnet."""
    address = t.address_beside("nat_gateway", vip)
    if str(address) in addresses:
        raise t.fail("nat_gateway", f"{address} is already {addresses[str(address)]}'s address")
    return str(address)
