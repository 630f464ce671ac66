"""Options and helpers the commands share, spelled once.

`--config FILE` (the cluster file) is every command's that reads one: both
halves of the `ops` group, the renderers (cli/ops.py: gen-keepalived, gen-lvs,
gen-systemd, gen-prometheus) and the host side (cli/ops_host.py: gen-sysctl,
gen-bonding, check), and `cluster status`, `top` and `node is-leader`. The
file is read and validated before anything is written; `-o DIR|-` chooses
where files go; `made_by` records in each file's header the command that
renders it; every problem ends as one line (HaqueueError), never a traceback.

keepalived runs `haqueue node is-leader` every second, and it loads this
module: the renderers' own module (ops/render.py, which pulls in tempfile and
random) is imported only by the helpers that write files.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Callable

import click
from click.core import ParameterSource

from haqueue.cli.user_errors import HaqueueError, load_cluster_file

if TYPE_CHECKING:
    from haqueue.config.cluster import Cluster
    from haqueue.ops.render import RenderedFile


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
    from haqueue.ops import render

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


def emit(files: list[RenderedFile], output: str) -> None:
    """Write or print the rendered files; say what was written on stderr."""
    from haqueue.ops import render

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
