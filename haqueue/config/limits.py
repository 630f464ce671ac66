"""What one node lets its clients hold: the [limits] table's values and their units.

A careless or hostile client must not exhaust a node's memory or starve the
others (docs/design.md I8). This module owns the numbers an operator sets
(`haqueue serve` flags, the cluster file's [limits] table) and how sizes are
written; server/limits.py owns what enforces them outside a connection (the
file-descriptor limit, the resident-memory gauge) and the fixed per-connection
buffer bounds.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# The disk reserve turned off ("off"): the value server/disk_reserve.py knows as OFF.
RESERVE_OFF = -1


@dataclass
class ClientLimits:
    """The limits `haqueue serve` flags and the cluster file's [limits] table set."""

    max_connections: int = 10000
    max_tubes: int = 100000
    max_watched_tubes: int = 1000
    max_memory: int = 0  # bytes of resident memory; 0: no limit
    output_timeout: float = 60.0  # seconds a connection's output may stay over OUTPUT_HIGH
    # Bytes of requests bigger than a connection's own input bound (a put's body, a
    # Gearman packet) that all connections may hold while they arrive (input_budget.py).
    max_input_buffers: int = 256 << 20
    # The disk reserve's floor in bytes (disk_reserve.py); None: the default (1/16 of the
    # file system, at most 64 MiB); RESERVE_OFF (-1): no reserve.
    disk_reserve: int | None = None


_UNITS = {"": 1, "k": 1000, "kb": 1000, "kib": 1024, "m": 1000**2, "mb": 1000**2, "mib": 1024**2,
          "g": 1000**3, "gb": 1000**3, "gib": 1024**3}
_SIZE = re.compile(r"\s*(\d+)\s*([A-Za-z]*)\s*")


def parse_size(text: str) -> int:
    """Bytes from "536870912", "512MiB", "2GiB" or "2G"; ValueError names the problem."""
    m = _SIZE.fullmatch(text)
    unit = m[2].lower() if m else None
    if m is None or unit not in _UNITS:
        raise ValueError(f"{text!r} is not a size (bytes, or a number with KiB, MiB, GiB, K, M, G)")
    return int(m[1]) * _UNITS[unit]


def parse_reserve(text: str) -> int | None:
    """A disk reserve floor: a size, or "off" (RESERVE_OFF); ValueError names the problem."""
    if text.strip().lower() == "off":
        return RESERVE_OFF
    return parse_size(text)
