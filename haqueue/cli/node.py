"""`haqueue node …`: questions about one node, for health checks."""

from __future__ import annotations

import click

from haqueue import admin_client
from haqueue.cli.main import HaqueueError


@click.group()
def node() -> None:
    """Ask one node of a cluster (leader checks for keepalived and LVS)."""


@node.command("is-leader")
@click.option("--config", "config_path", required=True, type=click.Path(dir_okay=False),
              help="Cluster file.")
@click.option("--node", "node_id", required=True, help="Node id in the cluster file.")
@click.option("--timeout", type=float, default=0.5, show_default=True, help="Seconds to wait.")
@click.option("-q", "--quiet", is_flag=True, help="Print nothing; the exit status says it.")
def is_leader(config_path, node_id, timeout, quiet) -> None:
    """Exit 0 only if NODE is the Raft leader serving clients."""
    from haqueue.cluster import ClusterFileError, load_cluster

    try:
        me = load_cluster(config_path).node(node_id)
    except ClusterFileError as exc:
        raise HaqueueError(str(exc)) from None
    leader = admin_client.is_leader(me.address, me.admin_port, timeout)
    if not quiet:
        click.echo(f"{node_id}: {'leader' if leader else 'not leader'}")
    if not leader:
        raise click.exceptions.Exit(1)
