"""The system tools tests drive (prometheus, promtool, chromium, tmux): finding them, stopping them.

`require(name)` returns the tool's path, or skips the test naming the Debian
package that provides it, only when it is truly absent (scripts/setup installs
them all, so in CI these tests run). `stop(proc)` ends a process the test
started, by its PID: SIGTERM, then SIGKILL after a grace period.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

PACKAGES = {"prometheus": "prometheus", "promtool": "prometheus", "chromium": "chromium", "tmux": "tmux"}


def binary(name: str) -> str | None:
    """The tool's path on PATH or in /usr/bin (Debian's packages), or None when absent."""
    for candidate in (shutil.which(name), f"/usr/bin/{name}"):
        if candidate and Path(candidate).exists():
            return candidate
    return None


def require(name: str) -> str:
    found = binary(name)
    if found is None:
        package = PACKAGES.get(name, name)
        pytest.skip(f"{name} is not installed (apt-get install {package}; scripts/setup does)")
    return found


def stop(proc: subprocess.Popen, grace: float = 10.0) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)
