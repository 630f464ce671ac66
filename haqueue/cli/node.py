"""`haqueue node …`: questions about one node, for health checks."""

from __future__ import annotations

import click

from haqueue import admin_client
from haqueue.cli.options import config_option
from haqueue.cli.user_errors import HaqueueError, load_cluster_file


@click.group()
def node() -> None:
    """Ask one node of a cluster (leader checks for keepalived and LVS)."""


@node.command("is-leader")
@config_option
@click.option("--node", "node_id", required=True, help="Node id in the cluster file.")
@click.option("--timeout", type=float, default=0.5, show_default=True, help="Seconds to wait.")
@click.option("-q", "--quiet", is_flag=True, help="Print nothing; the exit status says it.")
def is_leader(config_path, node_id, timeout, quiet) -> None:
    """Exit 0 only if NODE is the Raft leader serving clients."""
    _, me = load_cluster_file(config_path, node_id)
    leader = admin_client.is_leader(me.address, me.admin_port, timeout)
    if not quiet:
        click.echo(f"{node_id}: {'leader' if leader else 'not leader'}")
    if not leader:
        raise click.exceptions.Exit(1)


@node.command("replay")
@click.option("-b", "--data-dir", required=True, type=click.Path(file_okay=False, exists=True),
              help="A stopped node's data directory.")
@click.option("--uncommitted", is_flag=True,
              help="Apply the whole journal, as a lone node does on restart (default: only "
                   "entries known to be committed).")
def replay(data_dir, uncommitted) -> None:
    """Rebuild a stopped node's state from its snapshot and journal; print a summary."""
    from haqueue.replication.replay import replay_with_tail
    from haqueue.replication.replica import startup_errors

    try:
        state, applied, tail = replay_with_tail(data_dir, uncommitted=uncommitted)
    except (OSError, ValueError, *startup_errors()) as exc:
        raise HaqueueError(f"{data_dir}: {exc}") from None
    counts = state.counts()
    click.echo(f"applied-index: {applied}")
    if tail:
        click.echo(f"not-applied: {tail} (after the stored commit index; --uncommitted applies them)")
    click.echo(f"jobs: {len(state.jobs)}")
    for key in ("ready", "reserved", "delayed", "buried"):
        click.echo(f"{key}: {counts[key]}")
    click.echo(f"next-id: {state.next_id}")
    click.echo(f"digest: {state.digest()}")


def _recover_command() -> None:
    # node recover --force-new-cluster: beside add-node and remove-node (cli/membership.py)
    from haqueue.cli.membership import recover

    node.add_command(recover)


_recover_command()
