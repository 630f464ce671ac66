"""`haqueue job put|peek|show|delete|kick|bury`: one job of a cluster, on its leader.

Thin commands over haqueue/console/console.py's Console; options, output and
exit statuses are shared with `haqueue tube` (cli/console_options.py).
"""

from __future__ import annotations

import sys

import click

from haqueue.cli.console_options import (
    body_json, body_text, console_errors, console_for, emit_json, target_options, tube_name,
)

U32 = click.IntRange(0, 2**32 - 1)
JOB_ID = click.IntRange(1, 2**64 - 1)


@click.group()
def job() -> None:
    """Jobs of a running cluster (found through the cluster file's leader)."""


@job.command("put")
@click.option("--tube", "tube_", default="default", show_default=True, callback=tube_name)
@click.option("--pri", type=U32, default=0, show_default=True, help="Priority (lower runs first).")
@click.option("--delay", type=U32, default=0, show_default=True, metavar="SECONDS")
@click.option("--ttr", type=U32, default=60, show_default=True, metavar="SECONDS", help="Time to run.")
@click.argument("body")
@target_options
@console_errors
def put(tube_, pri, delay, ttr, body, config_path, address, timeout, as_json) -> None:
    """Put a job with BODY (- reads it from stdin) and print its id."""
    data = sys.stdin.buffer.read() if body == "-" else body.encode("utf-8", "surrogateescape")
    job_id = console_for(config_path, address, timeout).put(tube_, data, pri, delay, ttr)
    emit_json({"id": job_id}) if as_json else click.echo(job_id)


@job.command("peek")
@click.option("--tube", "tube_", default="default", show_default=True, callback=tube_name)
@click.argument("state", type=click.Choice(["ready", "delayed", "buried"]))
@target_options
@console_errors
def peek(tube_, state, config_path, address, timeout, as_json) -> None:
    """The next ready, delayed or buried job of a tube; exit 1 if there is none."""
    found = console_for(config_path, address, timeout).peek(tube_, state)
    if as_json:
        emit_json({"id": found["id"], **body_json(found["body"])})
    else:
        click.echo(f"id: {found['id']}")
        click.echo(body_text(found["body"]))


@job.command("show")
@click.argument("job_id", type=JOB_ID)
@target_options
@console_errors
def show(job_id, config_path, address, timeout, as_json) -> None:
    """A job's stats (beanstalkd's stats-job) and body; exit 1 if there is no such job."""
    found = console_for(config_path, address, timeout).show(job_id)
    if as_json:
        emit_json({"id": job_id, "stats": found["stats"], **body_json(found["body"])})
        return
    for key, value in (found["stats"] or {}).items():
        click.echo(f"{key}: {value}")
    click.echo("body:")
    click.echo(body_text(found["body"]))


def _done(job_id: int, result: str, as_json: bool) -> None:
    emit_json({"id": job_id, "result": result}) if as_json else click.echo(f"{result} job {job_id}")


@job.command("delete")
@click.argument("job_id", type=JOB_ID)
@target_options
@console_errors
def delete(job_id, config_path, address, timeout, as_json) -> None:
    """Delete a job that no worker holds; exit 1 if there is no such job."""
    console_for(config_path, address, timeout).delete(job_id)
    _done(job_id, "deleted", as_json)


@job.command("kick")
@click.argument("job_id", type=JOB_ID)
@target_options
@console_errors
def kick(job_id, config_path, address, timeout, as_json) -> None:
    """Move one buried or delayed job to ready; exit 1 if it is neither."""
    console_for(config_path, address, timeout).kick_job(job_id)
    _done(job_id, "kicked", as_json)


@job.command("bury")
@click.argument("job_id", type=JOB_ID)
@target_options
@console_errors
def bury(job_id, config_path, address, timeout, as_json) -> None:
    """Bury a ready or delayed job (reserved by id, then buried at its priority)."""
    result = console_for(config_path, address, timeout).bury(job_id)
    _done(job_id, result, as_json)
