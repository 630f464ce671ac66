"""Shared by the lab tests: skip without root or tools, and a lab directory keepalived accepts."""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
from contextlib import contextmanager
from pathlib import Path

import pytest

from haqueue.lab import storage
from haqueue.lab.lab import KEEPALIVED, Lab, wait_for


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


def loop_devices_under(directory) -> list[str]:
    listed = subprocess.run(["losetup", "-a"], capture_output=True, text=True).stdout.splitlines()
    return [line for line in listed if str(directory) in line]


@contextmanager
def running_lab(nodes: int = 3):
    """A lab that is up, then down with everything it made gone, also when the test fails:
    no namespace, no mounted data disk (not even of a node added later), no loop device
    still holding an image (not even in the mount namespaces `ip netns exec` gave the
    lab's processes: an unmount reaches them, storage.make_shared_mount)."""
    require_root_tools()
    directory, prefix = lab_dir()
    the_lab = Lab(directory, prefix=prefix, nodes=nodes)
    try:
        the_lab.up()
        yield the_lab
    finally:
        the_lab.down()
        shutil.rmtree(directory, ignore_errors=True)
        assert namespaces_with(prefix) == []
        assert not any(storage.is_mounted(directory / "data" / f"n{k}") for k in range(1, 10))
        assert wait_for(lambda: not loop_devices_under(directory), 10), loop_devices_under(directory)
