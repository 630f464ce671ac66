"""`haqueue ops …`: render what operators deploy from the cluster file, and check a host.

Every gen-* command reads `--config FILE`, validates it before rendering (one
line naming the problem), and writes one file per node into `-o DIR` (default:
the current directory) or prints to stdout with `-o -`; `--node ID` renders one
node only. The options shared by all commands live here so every command spells
them the same way; gen-sysctl, gen-bonding and check live in `ops_host`.
"""

from __future__ import annotations

import functools
from typing import Callable

import click
from click.core import ParameterSource

from haqueue.cli.main import HaqueueError, load_cluster_file
from haqueue.cluster import Cluster, ClusterFileError
from haqueue.ops import render


@click.group()
def ops() -> None:
    """Render keepalived/LVS/sysctl/bonding/systemd configs and check a host."""


# -- shared options ---------------------------------------------------------


def config_option(f: Callable) -> Callable:
    return click.option(
        "--config",
        "config_path",
        required=True,
        metavar="FILE",
        help="The cluster file (TOML) describing the deployment.",
    )(f)


def output_option(f: Callable) -> Callable:
    return click.option(
        "-o",
        "--output",
        default=".",
        show_default=True,
        metavar="DIR",
        help="Directory to write the files into, or - to print them.",
    )(f)


def node_option(f: Callable) -> Callable:
    return click.option("--node", "node_id", metavar="ID", help="Render this node only.")(f)


def load(config_path: str) -> Cluster:
    """The validated cluster file, or a one-line error naming the problem."""
    return load_cluster_file(config_path)


def made_by(ctx: click.Context, skip: tuple[str, ...] = ("output",)) -> str:
    """The command that renders this content, for the header.

    Only options given explicitly are recorded (in declaration order, not
    argv order), and never the output location: the same content always
    carries the same header, whether it was printed or written.
    """
    words = ["haqueue", "ops", ctx.info_name or ctx.command.name or "?"]
    for param in ctx.command.params:
        if not isinstance(param, click.Option) or param.name in skip:
            continue
        source = ctx.get_parameter_source(param.name)
        if source not in (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT):
            continue
        value = ctx.params[param.name]
        flag = max(param.opts, key=len)
        if param.is_flag:
            if value:
                words.append(flag)
            continue
        for item in value if param.multiple else (value,):
            words += [flag, str(item)]
    return render.command_text(words)


def emit(files: list[render.RenderedFile], output: str) -> None:
    """Write or print the rendered files; say what was written on stderr."""
    try:
        written = render.write_files(files, output)
    except OSError as exc:
        raise HaqueueError(f"{output}: cannot write: {exc.strerror or exc}") from None
    if output != "-":
        for path in written:
            click.echo(f"wrote {path}", err=True)


def one_line_errors(*errors: type[Exception]) -> Callable:
    """Turn the renderer's own validation errors into one-line CLI errors."""

    def decorate(f: Callable) -> Callable:
        @functools.wraps(f)
        def wrapper(*args, **kwargs):
            try:
                return f(*args, **kwargs)
            except errors as exc:
                raise HaqueueError(str(exc)) from None

        return wrapper

    return decorate


# -- gen-keepalived, gen-lvs, gen-systemd -----------------------------------


@ops.command("gen-keepalived")
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


@ops.command("gen-lvs")
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


@ops.command("gen-systemd")
@config_option
@output_option
@node_option
@click.pass_context
@one_line_errors(ClusterFileError)
def gen_systemd(ctx: click.Context, config_path: str, output: str, node_id: str | None) -> None:
    """Render haqueue.service + keepalived drop-ins.

    Per node: the hardened haqueue unit, and a keepalived drop-in with a
    start-up delay after haqueue and Restart=always. Per LVS director: a
    keepalived drop-in (after the network, Restart=always).
    """
    from haqueue.ops import systemd

    cluster = load(config_path)
    emit(systemd.render(cluster, node_id, made_by(ctx)), output)


@ops.command("gen-prometheus")
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


# -- the other half of the group: gen-sysctl, gen-bonding, check ------------
# Written in parallel in haqueue/cli/ops_host.py; skipped only while that
# module does not exist yet (any other import problem is a real bug and raises).
try:
    from haqueue.cli import ops_host
except ModuleNotFoundError as exc:
    if exc.name != "haqueue.cli.ops_host":
        raise
else:
    ops_host.register(ops)
