"""Small file systems for tests: a tmpfs of a given size per data directory, always unmounted.

`small_disks(paths, mib)` mounts one size-limited tmpfs on each path (the lab's own
helpers, haqueue/lab/storage.py) and unmounts every one it mounted when the block
ends, pass or fail. `leave_free(path, bytes)` writes a ballast file so that the
file system has about that much left; `drop_ballast(path)` frees it again.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Iterator

from haqueue.lab import storage

BALLAST = "test-ballast"


@contextlib.contextmanager
def small_disks(paths: list[Path], mib: int) -> Iterator[list[Path]]:
    mounted: list[Path] = []
    try:
        for path in paths:
            storage.mount_tmpfs(path, mib)
            mounted.append(path)
        yield paths
    finally:
        for path in mounted:
            storage.unmount(path)


def free_bytes(path: Path) -> int:
    return storage.free_bytes(path)


def leave_free(path: Path, wanted: int) -> None:
    """Grow the ballast file until about `wanted` bytes are left free (never shrinks it)."""
    missing = free_bytes(path) - wanted
    if missing <= 0:
        return
    with open(path / BALLAST, "ab") as f:
        block = b"\0" * (1 << 20)
        while missing > 0:
            n = f.write(block[:min(missing, len(block))])
            missing -= n
        f.flush()
        os.fsync(f.fileno())


def drop_ballast(path: Path) -> None:
    (path / BALLAST).unlink(missing_ok=True)
