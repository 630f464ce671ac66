"""`haqueue ops …`: render what operators deploy from the cluster file, and check a host."""

from __future__ import annotations

import click


@click.group()
def ops() -> None:
    """Render keepalived/LVS/sysctl/bonding/systemd configs and check a host."""
