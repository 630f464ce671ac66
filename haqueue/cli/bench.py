"""`haqueue bench`: load generators and measurements, one subcommand each.

    haqueue bench put|cycle|openloop   a workload against --address, or a --server bench starts
    haqueue bench compare              beanstalkd and a haqueue node (or a --cluster) in one run
    haqueue bench cluster CONFIG       a workload against a running cluster's leader
    haqueue bench peers                haqueue, RabbitMQ and NATS as 3-node replicated clusters
    haqueue bench gearman WORKLOAD     gearmand and a haqueue cluster, Gearman's protocol
    haqueue bench ids                  the id service's ids/s and latency
    haqueue bench startup N | timers N | memory N | scrape TUBES | flood

Each subcommand takes only its own options (shared ones in bench_options.py), fills a
bench_run.Settings and runs it. The old single-command spelling (`haqueue bench
--compare ...`, used by older scripts and notes) still works: arguments that start
with an option go to a hidden command that takes the old flags (bench_legacy.py) and
runs the same Settings.
"""

from __future__ import annotations

from collections.abc import Callable

import click

from haqueue.cli import bench_options as opt
from haqueue.cli.bench_legacy import LEGACY_NAME, legacy
from haqueue.cli.bench_run import PEER_SYSTEMS, Settings, run


class BenchGroup(click.Group):
    """A group that sends the old flag spelling (`bench --compare ...`, or no arguments at
    all: a put run against 127.0.0.1:11300) to the hidden legacy command."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if not args or (args[0].startswith("-") and args[0] not in ctx.help_option_names):
            args = [LEGACY_NAME, *args]
        return super().parse_args(ctx, args)


@click.group(cls=BenchGroup)
def bench() -> None:
    """Measure throughput and latency: haqueue against beanstalkd, its peers, itself.

    Every reply is checked; the first unexpected one ends the run with an error.
    Figures and the commands that made them: docs/benchmarks.md. The older
    spelling with flags only (`bench --compare --workload cycle`) still runs
    the same benchmark as the subcommand (`bench compare --workload cycle`).
    """


bench.add_command(legacy)


def _workload_command(name: str, options: Callable, summary: str) -> None:
    """put, cycle and openloop: the same target and load options, each with its own."""

    @bench.command(name, help=summary)
    @opt.address
    @opt.server
    @opt.durable
    @options
    @opt.load_options
    @opt.server_cpus
    def command(**kwargs) -> None:
        run(Settings(workload=name, **kwargs))


_workload_command("put", opt.connections, "Windowed puts: --connections producers, each keeping "
                  "--window puts in flight.")
_workload_command("cycle", opt.stack(opt.producers, opt.consumers, opt.backlog),
                  "Put, reserve, delete: --producers and --consumers; latency put to delete.")
_workload_command("openloop", opt.stack(opt.rate, opt.connections),
                  "Puts at a fixed --rate over --connections; latency from when each put was due.")


@bench.command("compare")
@opt.workload_options
@opt.durable
@click.option("--cluster", type=click.Path(dir_okay=False), default=None, metavar="CONFIG",
              help="Bench this running cluster's leader against beanstalkd in memory and with -f0, "
                   "instead of a haqueue node bench starts.")
@opt.load_options
@opt.server_cpus
@opt.compare_with
def compare(**kwargs) -> None:
    """Start beanstalkd and a haqueue node, bench each in turn, print the ratio."""
    if kwargs["cluster"] is not None and kwargs["durable"]:
        raise click.ClickException("compare --cluster always runs beanstalkd both in memory and with -f0: "
                                   "drop --durable")
    run(Settings(compare=True, **kwargs))


@bench.command("cluster")
@click.argument("config", type=click.Path(dir_okay=False))
@opt.workload_options
@opt.load_options
def cluster(config: str, **kwargs) -> None:
    """Bench the leader of the running cluster in CONFIG (`haqueue up` prints it)."""
    run(Settings(cluster=config, **kwargs))


@bench.command("peers")
@click.option("--systems", "peer_systems", default=",".join(PEER_SYSTEMS), show_default=True, metavar="LIST",
              help="Which systems, in this order.")
@click.option("--peer-systems", "peer_systems", hidden=True)  # the old spelling
@opt.server_cpus
@opt.duration
@opt.warmup
@opt.timeout
@opt.json_path
def peers(**kwargs) -> None:
    """Replicated peers: haqueue 3 nodes -f0 and -f 50, RabbitMQ 3 nodes (quorum queue) and
    NATS 3 servers (JetStream R3), one after another, each on --server-cpus (default 0);
    cycle, put and open loop on each; one table with ratios."""
    run(Settings(peers=True, **kwargs))


@bench.command("gearman")
@click.argument("gearman_workload", metavar="WORKLOAD", type=click.Choice(["submit", "cycle"]))
@click.option("--nodes", "gearman_nodes", type=click.IntRange(1, 5), default=Settings.gearman_nodes,
              show_default=True, help="Nodes of the haqueue cluster started.")
@click.option("--gearman-nodes", "gearman_nodes", type=click.IntRange(1, 5), hidden=True)  # the old spelling
@opt.connections
@opt.producers
@opt.consumers
@opt.backlog
@opt.body_size
@opt.duration
@opt.warmup
@opt.timeout
@opt.repeat
@opt.json_path
@opt.server_cpus
def gearman(**kwargs) -> None:
    """Start gearmand (in memory, then with its SQLite queue where built with it) and a
    durable haqueue cluster, run WORKLOAD on each with synchronous clients. submit:
    background submits (--connections); cycle: submit -> grab -> complete (--producers,
    --consumers as workers, --backlog)."""
    run(Settings(**kwargs))


@bench.command("ids")
@click.option("--id-mode", type=click.Choice(["segment", "exact", "both"]), default=Settings.id_mode,
              show_default=True, help="Which mode(s) to run.")
@click.option("--clients", type=click.IntRange(min=1), default=None,
              help="Closed-loop UDP clients [default: 4 in segment mode, 64 in exact mode].")
@opt.duration
@opt.warmup
def ids(**kwargs) -> None:
    """Start a three-node durable cluster with the id service; measure ids/s and latency
    with closed-loop UDP clients."""
    run(Settings(what="ids", **kwargs))


def _started(kwargs: dict, what: str, cluster_too: bool = False) -> None:
    """The one-line refusal when a benchmark of servers bench starts names none."""
    if not (kwargs.get("server") or kwargs.get("compare") or kwargs.get("cluster")):
        raise click.ClickException(f"bench {what} needs --server KIND or --compare"
                                   + (" or --cluster CONFIG" if cluster_too else ""))


@bench.command("startup")
@click.argument("startup_count", metavar="N", type=click.IntRange(min=1))
@opt.started_options
@click.option("--unix", "startup_unix", is_flag=True, help="The servers listen on a Unix socket "
              "(-l unix:PATH), not TCP.")
@opt.json_path
@opt.server_cpus
def startup(**kwargs) -> None:
    """Exec the started server(s) N times; report the time to listening and to the first
    put answered, and the server's CPU time until then."""
    _started(kwargs, "startup")
    run(Settings(**kwargs))


@bench.command("timers")
@click.argument("timer_count", metavar="N", type=click.IntRange(min=1))
@opt.address
@opt.started_options
@opt.cluster
@opt.timeout
@opt.json_path
@opt.server_cpus
def timers(**kwargs) -> None:
    """N timers (delay, time-to-run, DEADLINE_SOON, pause-tube, reserve-with-timeout) on
    --address, started server(s) or a --cluster's leader; report how late they fire."""
    run(Settings(**kwargs))


@bench.command("memory")
@click.argument("memory_jobs", metavar="N", type=click.IntRange(min=1))
@opt.started_options
@opt.connections
@opt.window
@opt.body_size
@opt.tube
@opt.processes
@opt.timeout
@opt.json_path
@opt.server_cpus
def memory(**kwargs) -> None:
    """Put N jobs into started server(s); report RSS bytes per job."""
    _started(kwargs, "memory")
    run(Settings(**kwargs))


@bench.command("scrape")
@click.argument("scrape_tubes", metavar="TUBES", type=click.IntRange(min=1))
def scrape(**kwargs) -> None:
    """Start a haqueue node with TUBES tubes, scrape /metrics repeatedly, report the node's
    CPU per scrape."""
    run(Settings(**kwargs))


@bench.command("flood")
@opt.server
@opt.compare
@opt.cluster
@click.option("--jobs", type=click.IntRange(min=1), default=None, help="Puts per phase.")
@opt.repeat
@opt.timeout
@opt.server_cpus
def flood(**kwargs) -> None:
    """Hostile client: a synchronous client's put latency idle and while another
    connection floods stats, on started server(s) or a --cluster's leader."""
    _started(kwargs, "flood", cluster_too=True)
    run(Settings(flood=True, **kwargs))
