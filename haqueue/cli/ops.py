"""`haqueue ops …`: render what operators deploy from the cluster file, and check a host.

Every gen-* command reads `--config FILE`, validates it before rendering (one
line naming the problem), and writes one file per node into `-o DIR` (default:
the current directory) or prints to stdout with `-o -`; `--node ID` renders one
node only. The group has two halves: the renderers of what runs the cluster
(here: gen-keepalived, gen-lvs, gen-systemd, gen-prometheus) and the host side
(cli/ops_host.py: gen-sysctl, gen-bonding, check); the options both use live
in cli/options.py, so every command spells them the same way.
"""

from __future__ import annotations

import click

from haqueue.cli import ops_host
from haqueue.cli.options import config_option, emit, load, made_by, node_option, one_line_errors, output_option
from haqueue.config.cluster import ClusterFileError


@click.group()
def ops() -> None:
    """Render keepalived/LVS/sysctl/bonding/systemd configs and check a host."""


# -- gen-keepalived, gen-lvs, gen-systemd, gen-prometheus ------------------


@click.command("gen-keepalived")
@config_option
@output_option
@node_option
@click.pass_context
@one_line_errors(ClusterFileError)
def gen_keepalived(ctx: click.Context, config_path: str, output: str, node_id: str | None) -> None:
    """Render collocated VRRP: keepalived per node.

    One keepalived.conf per queue node (and the shared leader-check script):
    the VIP follows the Raft leader within about a second.
    """
    from haqueue.ops import keepalived

    cluster = load(config_path)
    emit(keepalived.render(cluster, node_id, made_by(ctx)), output)


@click.command("gen-lvs")
@config_option
@output_option
@node_option
@click.option(
    "--mode",
    type=click.Choice(["dr", "tun", "nat"]),
    help="LVS forwarding method (default: [lvs] mode in the cluster file, else dr).",
)
@click.pass_context
@one_line_errors(ClusterFileError)
def gen_lvs(ctx: click.Context, config_path: str, output: str, node_id: str | None, mode: str | None) -> None:
    """Render LVS directors and real-server scripts.

    keepalived.conf for the two [[directors]] sharing the VIP, ip_vs forwarding
    to the leader only; the real-server side of DR, TUN or NAT per node.
    """
    from haqueue.ops import lvs

    cluster = load(config_path)
    emit(lvs.render(cluster, node_id, mode, made_by(ctx)), output)


@click.command("gen-systemd")
@config_option
@output_option
@node_option
@click.pass_context
@one_line_errors(ClusterFileError)
def gen_systemd(ctx: click.Context, config_path: str, output: str, node_id: str | None) -> None:
    """Render haqueue, keepalived and LVS real-server units.

    Per node: the hardened haqueue unit, and a keepalived drop-in with a
    start-up delay after haqueue and Restart=always. Per LVS director: a
    keepalived drop-in (after the network, lvs-director.sh first,
    Restart=always). With directors, per node: the unit running gen-lvs's
    lvs-realserver.sh before haqueue.
    """
    from haqueue.ops import systemd

    cluster = load(config_path)
    emit(systemd.render(cluster, node_id, made_by(ctx)), output)


@click.command("gen-prometheus")
@config_option
@output_option
@click.pass_context
@one_line_errors(ClusterFileError)
def gen_prometheus(ctx: click.Context, config_path: str, output: str) -> None:
    """Render a Prometheus scrape config and alert rules.

    prometheus-haqueue.yml scrapes every node's /metrics (admin port) with
    cluster and node labels; haqueue-alerts.yml alerts on no leader, two
    leaders, a node down, follower lag, fsync p99, disk space and internal
    errors. Check them with `promtool check config` / `check rules`.
    """
    from haqueue.ops import prometheus

    cluster = load(config_path)
    emit(prometheus.render(cluster, made_by(ctx)), output)


COMMANDS = (gen_keepalived, gen_lvs, gen_systemd, gen_prometheus)

for command in (*COMMANDS, *ops_host.COMMANDS):
    ops.add_command(command)
