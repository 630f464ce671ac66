"""`haqueue bench`: a load generator for any beanstalkd-protocol address."""

from __future__ import annotations

import click


@click.command()
def bench() -> None:
    """Measure jobs/s and latency against a beanstalkd-protocol server."""
    raise click.ClickException("bench is not implemented yet")
