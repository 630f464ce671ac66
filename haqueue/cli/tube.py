"""`haqueue tube list|stats|pause|kick|tail`: a cluster's tubes, on its leader.

Thin commands over haqueue/console/console.py's Console; options, output and
exit statuses are shared with `haqueue job` (cli/console_options.py).
"""

from __future__ import annotations

import time

import click

from haqueue.cli.console_options import (
    body_json, body_text, console_errors, console_for, emit_json, target_options, tube_name,
)

TAIL_INTERVAL = 0.5
TAIL_MAX_SCAN = 10_000  # ids looked at per poll; a faster flood is skipped, and said so


@click.group()
def tube() -> None:
    """Tubes of a running cluster (found through the cluster file's leader)."""


@tube.command("list")
@target_options
@console_errors
def list_tubes(config_path, address, timeout, as_json) -> None:
    """The tubes that exist, one per line."""
    names = console_for(config_path, address, timeout).tubes()
    if as_json:
        emit_json(names)
    else:
        for name in names:
            click.echo(name)


@tube.command("stats")
@click.argument("name", callback=tube_name)
@target_options
@console_errors
def stats(name, config_path, address, timeout, as_json) -> None:
    """A tube's counters (beanstalkd's stats-tube); exit 1 if there is no such tube."""
    fields = console_for(config_path, address, timeout).tube_stats(name)
    if as_json:
        emit_json(fields)
    else:
        for key, value in fields.items():
            click.echo(f"{key}: {value}")


@tube.command("pause")
@click.argument("name", callback=tube_name)
@click.argument("seconds", type=click.IntRange(0, 2**32 - 1))
@target_options
@console_errors
def pause(name, seconds, config_path, address, timeout, as_json) -> None:
    """Hold back reserves from tube NAME for SECONDS (0 resumes it at once)."""
    console_for(config_path, address, timeout).pause(name, seconds)
    if as_json:
        emit_json({"tube": name, "paused": seconds})
    else:
        click.echo(f"paused tube {name} for {seconds} s" if seconds else f"resumed tube {name}")


@tube.command("kick")
@click.argument("name", callback=tube_name)
@click.argument("count", type=click.IntRange(0, 2**32 - 1))
@target_options
@console_errors
def kick(name, count, config_path, address, timeout, as_json) -> None:
    """Move up to COUNT buried jobs of NAME back to ready (delayed ones if none is buried)."""
    kicked = console_for(config_path, address, timeout).kick(name, count)
    if as_json:
        emit_json({"tube": name, "kicked": kicked})
    else:
        click.echo(f"kicked {kicked} job{'s' if kicked != 1 else ''} in tube {name}")


@tube.command("tail")
@click.argument("name", callback=tube_name)
@click.option("--interval", type=click.FloatRange(min=0.05), default=TAIL_INTERVAL, show_default=True,
              metavar="SECONDS", help="Time between looks.")
@target_options
@console_errors
def tail(name, interval, config_path, address, timeout, as_json) -> None:
    """Show jobs put into NAME from now on, without reserving them (Ctrl-C stops).

    Follows new job ids (a job deleted before the next look is not seen) and
    keeps following through a failover.
    """
    console = console_for(config_path, address, timeout)
    cursor = console.next_id()
    click.echo(f"following tube {name} from job id {cursor} (Ctrl-C stops)", err=True)
    try:
        while True:
            newest = console.next_id()
            if newest - cursor > TAIL_MAX_SCAN:
                click.echo(f"(skipped {newest - TAIL_MAX_SCAN - cursor} job ids: more than "
                           f"{TAIL_MAX_SCAN} puts since the last look)", err=True)
                cursor = newest - TAIL_MAX_SCAN
            if newest > cursor:
                for job in console.jobs_from(name, cursor, newest):
                    if as_json:
                        emit_json({"id": job["id"], "state": job["state"], **body_json(job["body"])})
                    else:
                        click.echo(f"{job['id']}\t{body_text(job['body'])}")
                cursor = newest
            time.sleep(interval)  # a polling follower, like tail -f
    except KeyboardInterrupt:
        return
