"""The root `haqueue` command and the one place that turns errors into one line.

Every command group lives in its own module and is registered here. Errors a
user can cause (a bad option, a bad cluster file, a port in use) end as one
line on stderr naming the problem, and a non-zero exit — never a traceback.
"""

from __future__ import annotations

import importlib
import sys

import click

from haqueue import __version__


CONTEXT_SETTINGS = {"help_option_names": ["--help"]}


class LazyGroup(click.Group):
    """Imports a command's module only when that command runs.

    keepalived runs `haqueue node is-leader` every second: it should not pay
    for importing the benchmark, the ops renderers and pysyncobj.
    """

    def __init__(self, *args, lazy: dict[str, str] | None = None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.lazy = dict(lazy or {})

    def list_commands(self, ctx) -> list[str]:
        return sorted(set(super().list_commands(ctx)) | set(self.lazy))

    def get_command(self, ctx, name):
        command = super().get_command(ctx, name)
        if command is None and name in self.lazy:
            module_name, attr = self.lazy[name].split(":")
            command = getattr(importlib.import_module(module_name), attr)
            self.add_command(command, name)
        return command


@click.group(
    cls=LazyGroup,
    context_settings=CONTEXT_SETTINGS,
    lazy={
        "serve": "haqueue.cli.serve:serve",
        "up": "haqueue.cli.up:up",
        "cluster": "haqueue.cli.cluster:cluster",
        "top": "haqueue.cli.top:top",
        "node": "haqueue.cli.node:node",
        "bench": "haqueue.cli.bench:bench",
        "ops": "haqueue.cli.ops:ops",
        "lab": "haqueue.cli.lab:lab",
        "tube": "haqueue.cli.tube:tube",
        "job": "haqueue.cli.job:job",
        "backup": "haqueue.cli.backup:backup",
        "restore": "haqueue.cli.backup:restore",
    },
)
@click.version_option(__version__, "--version", prog_name="haqueue")
def cli() -> None:
    """haqueue: a highly available, beanstalkd-compatible job queue."""


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; usage errors become one line instead of click's usage block."""
    args = sys.argv[1:] if argv is None else argv
    try:
        rv = cli.main(args=args, prog_name="haqueue", standalone_mode=False)
    except click.exceptions.Abort:
        # click turns Ctrl-C (and EOF at a prompt) into Abort: exit as a
        # SIGINT-ed program does.
        click.echo("haqueue: interrupted", err=True)
        return 130
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
