"""Shared by the lab tests: skip without root or tools, and a lab directory keepalived accepts."""

from __future__ import annotations

import os
import secrets
import shutil
from pathlib import Path

import pytest

from haqueue.lab.lab import KEEPALIVED


def require_root_tools() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root: the lab creates network namespaces and runs keepalived")
    for tool in ("ip", "curl"):
        if shutil.which(tool) is None:
            pytest.skip(f"needs {tool}")
    if not Path(KEEPALIVED).exists():
        pytest.skip("keepalived is not installed")


def lab_dir() -> tuple[Path, str]:
    """A fresh directory and namespace prefix for one lab.

    Under /run, not pytest's tmp_path: keepalived runs the leader check from
    the lab directory as `nobody`, which cannot enter pytest's 0700 tree.
    """
    tag = secrets.token_hex(3)
    return Path(f"/run/haqueue-lab-test-{tag}"), f"hqt{tag}"


def namespaces_with(prefix: str) -> list[str]:
    from pyroute2 import netns

    return [name for name in netns.listnetns() if name.startswith(prefix + "-")]
