"""The root `haqueue` command and the one place that turns errors into one line.

Every command group lives in its own module and is registered here. Errors a
user can cause (a bad option, a bad cluster file, a port in use) end as one
line on stderr naming the problem, and a non-zero exit — never a traceback.
"""

from __future__ import annotations

import sys

import click

from haqueue import __version__


class HaqueueError(click.ClickException):
    """A problem the user can fix; shown as one line, exit status 1."""


CONTEXT_SETTINGS = {"help_option_names": ["--help"]}


@click.group(context_settings=CONTEXT_SETTINGS)
@click.version_option(__version__, "--version", prog_name="haqueue")
def cli() -> None:
    """haqueue: a highly available, beanstalkd-compatible job queue."""


def _register() -> None:
    # Imported here so that each module can import `cli` helpers from this one.
    from haqueue.cli import bench, cluster, node, ops, serve, up

    cli.add_command(serve.serve)
    cli.add_command(up.up)
    cli.add_command(cluster.cluster)
    cli.add_command(node.node)
    cli.add_command(bench.bench)
    cli.add_command(ops.ops)


_register()


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; usage errors become one line instead of click's usage block."""
    args = sys.argv[1:] if argv is None else argv
    try:
        rv = cli.main(args=args, prog_name="haqueue", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("haqueue: aborted", err=True)
        return 1
    except click.UsageError as exc:
        where = exc.ctx.command_path if exc.ctx is not None else "haqueue"
        click.echo(f"{where}: {exc.format_message()}", err=True)
        return exc.exit_code
    except click.ClickException as exc:
        click.echo(f"haqueue: {exc.format_message()}", err=True)
        return exc.exit_code
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    return rv if isinstance(rv, int) else 0


if __name__ == "__main__":
    sys.exit(main())
