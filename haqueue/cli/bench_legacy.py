"""The old single-command spelling of `haqueue bench`, kept so older scripts and notes run.

`haqueue bench --compare --workload cycle ...`, `bench --peers`, `bench --memory N`
and the rest: every flag the one command took, run through the same Settings as the
subcommands (bench.py routes any arguments that start with an option here). Hidden
from --help; docs/benchmarks.md gives the subcommand for each.
"""

from __future__ import annotations

import click

from haqueue.cli import bench_options as opt
from haqueue.cli.bench_run import PEER_SYSTEMS, Settings, run

LEGACY_NAME = "legacy-flags"


class _SpelledAsBench(click.Context):
    """Errors and usage say `haqueue bench`, as the user typed, not the hidden name."""

    @property
    def command_path(self) -> str:
        return self.parent.command_path if self.parent is not None else super().command_path


class _Legacy(click.Command):
    context_class = _SpelledAsBench


@click.command(LEGACY_NAME, cls=_Legacy, hidden=True)
@click.option("--id-mode", type=click.Choice(["segment", "exact", "both"]), default=Settings.id_mode,
              hidden=True)
@click.option("--clients", type=click.IntRange(min=1), default=None, hidden=True)
@opt.address
@opt.workload_options
@opt.load_options
@opt.started_options
@opt.compare_with
@opt.cluster
@opt.server_cpus
@click.option("--memory", "memory_jobs", type=click.IntRange(min=1), default=None, metavar="N",
              help="= bench memory N")
@click.option("--scrape", "scrape_tubes", type=click.IntRange(min=1), default=None, metavar="TUBES",
              help="= bench scrape TUBES")
@click.option("--timers", "timer_count", type=click.IntRange(min=1), default=None, metavar="N",
              help="= bench timers N")
@click.option("--startup", "startup_count", type=click.IntRange(min=1), default=None, metavar="N",
              help="= bench startup N")
@click.option("--unix", "startup_unix", is_flag=True, help="= bench startup N --unix")
@click.option("--flood", is_flag=True, help="= bench flood")
@click.option("--gearman", "gearman_workload", type=click.Choice(["submit", "cycle"]), default=None,
              help="= bench gearman WORKLOAD")
@click.option("--gearman-nodes", type=click.IntRange(1, 5), default=Settings.gearman_nodes,
              help="= bench gearman --nodes")
@click.option("--peers", is_flag=True, help="= bench peers")
@click.option("--peer-systems", default=",".join(PEER_SYSTEMS), metavar="LIST", help="= bench peers --systems")
def legacy(**kwargs) -> None:
    """The old flags of `haqueue bench`; each subcommand's --help has the new form."""
    run(Settings(**kwargs))
