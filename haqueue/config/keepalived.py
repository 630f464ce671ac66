"""The cluster file's [keepalived] block: collocated VRRP's knobs and the rules they obey.

Owns `KeepalivedSettings` and how it is read from the file (with the field
reader of fields.py); haqueue/ops/keepalived.py renders keepalived.conf
from the values and explains each. A module of its own, without the
renderer's text, because every `haqueue node is-leader`
(which keepalived runs every second) loads the cluster file.

`read_advert_int` is VRRP's rule, shared with the [lvs] block.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from haqueue.config.fields import PATH_RE, Fields

LEADER_CHECKS = ("http", "command")


@dataclass(frozen=True)
class KeepalivedSettings:
    """Collocated VRRP knobs, the cluster file's [keepalived]; `read` holds its rules."""

    advert_int: float = 0.1
    check: str = "http"
    check_command: str | None = None  # None: `haqueue node is-leader` from [deploy]
    garp_master_delay: int = 1
    garp_master_refresh: int = 60
    script_user: str = "keepalived_script"
    script_dir: str = "/etc/keepalived"
    start_delay: float = 2.0

    @classmethod
    def read(cls, top: Fields) -> KeepalivedSettings:
        t = top.optional_table("keepalived", (
            "advert_int", "check", "check_command", "garp_master_delay", "garp_master_refresh",
            "script_user", "script_dir", "start_delay",
        ))
        d = cls()
        return cls(
            check_command=_read_check_command(t) if "check_command" in t else None,
            advert_int=read_advert_int(t, d.advert_int),
            check=t.choice("check", d.check, LEADER_CHECKS),
            garp_master_delay=t.integer("garp_master_delay", d.garp_master_delay, 0, 3600),
            garp_master_refresh=t.integer("garp_master_refresh", d.garp_master_refresh, 0, 86400),
            script_user=t.user("script_user", d.script_user),
            script_dir=t.path("script_dir", d.script_dir),
            start_delay=t.number("start_delay", d.start_delay, 0, 600),
        )


def read_advert_int(t: Fields, default: float) -> float:
    """advert_int of a VRRP block ([keepalived], [lvs])."""
    # VRRPv3 carries the interval in centiseconds (RFC 5798 5.2.7), 12 bits.
    value = t.number("advert_int", default, 0.01, 40.95)
    if abs(round(value * 100) - value * 100) > 1e-6:
        raise t.fail("advert_int", f"{value:g} is not a multiple of 0.01 s (VRRPv3 centiseconds)")
    return round(value, 2)


def _read_check_command(t: Fields) -> str:
    value = t.string("check_command")
    try:
        words = shlex.split(value)
    except ValueError as exc:
        raise t.fail("check_command", f"cannot be split into words: {exc}") from None
    if not words or not PATH_RE.match(words[0]):
        raise t.fail("check_command", "must start with the absolute path of the program")
    for placeholder in re.findall(r"\{[^}]*\}", value):
        if placeholder != "{node}":
            raise t.fail("check_command", f"unknown placeholder {placeholder} (only {{node}} is replaced)")
    if any(c in value for c in "\"'\n"):
        # It is written into a quoted keepalived `script "..."` string.
        raise t.fail("check_command", "must not contain quotes, backslashes or newlines")
    return value
