"""The options `haqueue bench`'s subcommands share, each defined once.

A subcommand stacks the groups it takes (`@load_options`, `@started_options`, ...) or
single options; the defaults are bench_run.Settings', so a subcommand and the old flag
spelling (bench_legacy.py) default alike.
"""

from __future__ import annotations

from collections.abc import Callable

import click

from haqueue.cli.bench_run import Settings

_POSITIVE = click.FloatRange(min=0, min_open=True)
SERVER_KINDS = ("beanstalkd", "haqueue")
WORKLOADS = ("put", "cycle", "openloop")


def stack(*options: Callable) -> Callable:
    """Several options as one decorator, listed in --help in the order given."""

    def apply(f: Callable) -> Callable:
        for option in reversed(options):
            f = option(f)
        return f

    return apply


# Where the load goes.
address = click.option("--address", default=Settings.address, show_default=True, metavar="HOST:PORT",
                       help="Any beanstalkd-protocol server.")
server = click.option("--server", type=click.Choice(SERVER_KINDS), default=None,
                      help="Start this server on a free loopback port and bench it.")
compare = click.option("--compare", is_flag=True, help="Start beanstalkd and a haqueue node, bench each in turn.")
# tests compare two beanstalkd where a haqueue node is beside the point
compare_with = click.option("--compare-with", type=click.Choice(["haqueue", "beanstalkd"]),
                            default=Settings.compare_with, hidden=True)
durable = click.option("--durable", is_flag=True,
                       help="Started servers keep a write-ahead log and fsync every change (-b DIR -f0).")
cluster = click.option("--cluster", type=click.Path(dir_okay=False), default=None, metavar="CONFIG",
                       help="Bench the leader of the running cluster in this cluster file "
                            "(`haqueue up` prints it).")
server_cpus = click.option("--server-cpus", default=None, metavar="LIST",
                           help="Run the servers bench starts on these CPUs (e.g. 0) and the load on the "
                                "others; for a --cluster, start it under `taskset -c LIST` yourself.")

# The load.
workload = click.option("--workload", type=click.Choice(WORKLOADS), default=Settings.workload, show_default=True,
                        help="put: windowed puts; cycle: put, reserve, delete; openloop: puts at a fixed "
                             "--rate, latency from when each was due.")
rate = click.option("--rate", type=_POSITIVE, default=Settings.rate, show_default=True,
                    help="openloop: puts per second over all connections.")
connections = click.option("--connections", type=click.IntRange(min=1), default=Settings.connections,
                           show_default=True, help="put, openloop: producer connections.")
producers = click.option("--producers", type=click.IntRange(min=1), default=Settings.producers, show_default=True,
                         help="cycle: producer connections.")
consumers = click.option("--consumers", type=click.IntRange(min=1), default=Settings.consumers, show_default=True,
                         help="cycle: consumer connections.")
backlog = click.option("--backlog", type=click.IntRange(min=0), default=None,
                       help="cycle: most jobs put but not yet deleted [default: window x producers; "
                            "0: no limit].")
tube = click.option("--tube", default=Settings.tube, show_default=True)
window = click.option("--window", type=click.IntRange(min=1), default=Settings.window, show_default=True,
                      help="Puts each producer keeps in flight.")
body_size = click.option("--body-size", type=click.IntRange(min=0), default=Settings.body_size, show_default=True,
                         metavar="BYTES")
duration = click.option("--duration", type=_POSITIVE, default=None, metavar="SECONDS",
                        help="Measured time [default: 5, or until --jobs].")
jobs = click.option("--jobs", type=click.IntRange(min=1), default=None,
                    help="Stop after this many acknowledged (measured) puts.")
warmup = click.option("--warmup", type=click.FloatRange(min=0), default=Settings.warmup, show_default=True,
                      metavar="SECONDS", help="Load before measuring starts, not counted.")
processes = click.option("--processes", type=click.IntRange(min=1), default=Settings.processes, show_default=True,
                         help="Load processes, each running a share of the connections.")
timeout = click.option("--timeout", type=_POSITIVE, default=Settings.timeout, show_default=True, metavar="SECONDS",
                       help="Fail when the server sends nothing for this long.")
repeat = click.option("--repeat", type=click.IntRange(min=1), default=Settings.repeat, show_default=True,
                      help="Runs per server, servers taking turns; figures pooled.")
json_path = click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None,
                         metavar="FILE", help="Also write the figures as JSON.")

# What every load run takes, whatever its workload.
load_options = stack(tube, window, body_size, duration, jobs, warmup, processes, timeout, repeat, json_path)
# The options of all three workloads, for the commands that take --workload.
workload_options = stack(workload, connections, rate, producers, consumers, backlog)
# Servers bench starts itself: one kind, or both in turn.
started_options = stack(server, compare, durable)
