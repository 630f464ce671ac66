"""Reading the cluster file's tables: typed fields, and one line naming the key at fault.

Owns `ClusterFileError` and `Fields`, the one small reader that every block of
the cluster file is validated with, so that each block's rules can sit beside
its dataclass (cluster.py: [cluster], [[nodes]], [[directors]], [deploy],
[limits], [tls]; keepalived.py: [keepalived]; lvs.py: [lvs]) while a missing
key, a wrong type, a value out of range or an unknown key is reported the
same way everywhere:

    cluster.toml: lvs.delay_loop: 0.01 is out of range 0.05..60

Deliberately not a schema library: the rules that matter are the ones across
keys (addresses inside the VIP's subnet, no two members on one endpoint), and
those read best as plain code beside the dataclass they fill.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Any, Iterable

# Paths and user names are written unquoted into keepalived.conf and systemd
# units, so keep them free of spaces, quotes and other syntax.
PATH_RE = re.compile(r"^/[A-Za-z0-9_./+-]*$")
_USER_RE = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")


class ClusterFileError(ValueError):
    """The cluster file is unusable; the message is one line naming the key."""


class Fields:
    """One table of a cluster file (or the file's top level, `where=""`), read key by key.

    Every reader takes the key's default (None: the key is required) and
    raises ClusterFileError naming `where.key`.
    """

    def __init__(self, source: str, data: dict, where: str = "") -> None:
        self.source = source
        self.data = data
        self.where = where

    def name(self, key: str) -> str:
        return f"{self.where}.{key}" if self.where else key

    def fail(self, key: str, problem: str) -> ClusterFileError:
        return ClusterFileError(f"{self.source}: {self.name(key)}: {problem}")

    def __contains__(self, key: str) -> bool:
        return key in self.data

    def __iter__(self):
        return iter(self.data)

    def get(self, key: str, default: Any = None) -> Any:
        """The raw value, for a rule the readers below do not cover."""
        return self.data.get(key, default)

    def only(self, known: Iterable[str], problem: str = "unknown key") -> Fields:
        """Refuse any key not in `known` (a misspelt key would silently take its default)."""
        known = set(known)
        for key in self.data:
            if key not in known:
                raise self.fail(key, problem)
        return self

    def at(self, where: str, data: dict) -> Fields:
        """A nested table (an entry of an array of tables) read as `where`."""
        return Fields(self.source, data, where)

    def table(self, key: str) -> Fields:
        """A required table."""
        value = self.data.get(key)
        if value is None:
            raise self.fail(key, "missing table")
        if not isinstance(value, dict):
            raise self.fail(key, "must be a table")
        return self.at(self.name(key), value)

    def optional_table(self, key: str, known: Iterable[str]) -> Fields:
        """A table whose keys all have defaults (empty when absent); only `known` keys."""
        value = self.data.get(key, {})
        if not isinstance(value, dict):
            raise self.fail(key, "must be a table")
        return self.at(self.name(key), value).only(known)

    def string(self, key: str, default: str | None = None) -> str:
        value = self.data.get(key, default)
        if value is None:
            raise self.fail(key, "missing")
        if not isinstance(value, str) or not value:
            raise self.fail(key, "must be a non-empty string")
        return value

    def integer(self, key: str, default: int | None, lo: int, hi: int) -> int:
        value = self.data.get(key, default)
        if value is None:
            raise self.fail(key, "missing")
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(key, f"must be an integer, not {value!r}")
        if not lo <= value <= hi:
            raise self.fail(key, f"{value} is out of range {lo}..{hi}")
        return value

    def number(self, key: str, default: float, lo: float, hi: float) -> float:
        """Seconds: an integer or a float within lo..hi."""
        value = self.data.get(key, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.fail(key, f"must be a number of seconds, not {value!r}")
        if not lo <= value <= hi:
            raise self.fail(key, f"{value} is out of range {lo:g}..{hi:g}")
        return float(value)

    def choice(self, key: str, default: str, choices: tuple[str, ...]) -> str:
        value = self.string(key, default)
        if value not in choices:
            raise self.fail(key, f"{value!r} is not one of {', '.join(choices)}")
        return value

    def path(self, key: str, default: str | None = None) -> str:
        value = self.string(key, default)
        if not PATH_RE.match(value):
            raise self.fail(key, f"{value!r} must be an absolute path of letters, digits and _ . / + -")
        return value

    def address_beside(self, key: str, vip: ipaddress.IPv4Interface) -> ipaddress.IPv4Address:
        """An IPv4 address in the VIP's subnet (where keepalived and the directors reach it), not the VIP."""
        text = self.string(key)
        try:
            address = ipaddress.IPv4Address(text)
        except ValueError:
            raise self.fail(key, f"{text!r} is not an IPv4 address") from None
        if address not in vip.network:
            raise self.fail(key, f"{address} is outside the VIP's subnet {vip.network}")
        if address == vip.ip:
            raise self.fail(key, f"{address} is the VIP itself")
        return address

    def user(self, key: str, default: str) -> str:
        value = self.string(key, default)
        if not _USER_RE.match(value):
            raise self.fail(key, f"{value!r} is not a valid user name")
        return value
