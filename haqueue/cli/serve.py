"""`haqueue serve`: run one node (beanstalkd's flags accepted as aliases)."""

from __future__ import annotations

import click


@click.command()
def serve() -> None:
    """Run a haqueue node."""
    raise click.ClickException("serve is not implemented yet")
