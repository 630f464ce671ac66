"""Finding the system tools tests drive (prometheus, promtool, chromium, tmux)."""

from __future__ import annotations

import shutil
from pathlib import Path


def binary(name: str) -> str | None:
    """The tool's path on PATH or in /usr/bin (Debian's packages), or None when absent."""
    for candidate in (shutil.which(name), f"/usr/bin/{name}"):
        if candidate and Path(candidate).exists():
            return candidate
    return None
