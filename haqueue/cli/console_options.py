"""What `haqueue tube` and `haqueue job` share: where the cluster is, output, errors.

Every command takes `--config FILE` (the cluster file: the leader is found
among its nodes, and found again after a failover) or `--address HOST:PORT`
(one node's client port, or any beanstalkd), `--timeout SECONDS` (how long to
look for a serving node), and `--json`. The console's outcomes end as one
line on stderr and the exit status haqueue/console/errors.py lists:
0 done/found, 1 not found, 2 usage or cluster file, 3 refused by the server,
4 no node serving, 5 outcome unknown.
"""

from __future__ import annotations

import functools
import json
from typing import Callable

import click

from haqueue.cli.user_errors import HaqueueError

USAGE_EXIT = 2
TUBE_NAME = r"[A-Za-z0-9+/;.$_()][A-Za-z0-9\-+/;.$_()]{0,199}"  # protocol/beanstalk.py _VALID_TUBE


class ConsoleExit(HaqueueError):
    """One line on stderr, and the console's exit status for it."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def target_options(f: Callable) -> Callable:
    f = click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")(f)
    f = click.option("--timeout", type=click.FloatRange(min=0), default=10.0, show_default=True,
                     metavar="SECONDS", help="How long to look for a serving node (a failover takes ~2 s).")(f)
    f = click.option("--address", metavar="HOST:PORT",
                     help="One node's client port (or any beanstalkd) instead of a cluster file.")(f)
    f = click.option("--config", "config_path", metavar="FILE",
                     help="The cluster file: the leader is found among its nodes.")(f)
    return f


def tube_name(ctx, param, value):
    import re

    if value is not None and re.fullmatch(TUBE_NAME, value) is None:
        raise click.BadParameter(f"{value!r} is not a tube name (1-200 of A-Z a-z 0-9 -+/;.$_(), "
                                 "not starting with -)")
    return value


def console_for(config_path: str | None, address: str | None, timeout: float):
    """The Console for --config or --address (exactly one), or a usage error."""
    from haqueue.console.console import Console, parse_address

    if (config_path is None) == (address is None):
        raise ConsoleExit("give either --config FILE or --address HOST:PORT", USAGE_EXIT)
    if address is not None:
        try:
            return Console([parse_address(address)], timeout=timeout)
        except ValueError as exc:
            raise ConsoleExit(f"--address: {exc}", USAGE_EXIT) from None
    from haqueue.cli.user_errors import load_cluster_file

    try:
        cluster = load_cluster_file(config_path)
    except HaqueueError as exc:
        raise ConsoleExit(exc.format_message(), USAGE_EXIT) from None
    if getattr(cluster, "tls", None) is not None:
        raise ConsoleExit(f"{config_path}: the client port speaks TLS ([tls]); the console does not yet",
                          USAGE_EXIT)
    return Console.for_cluster(cluster, timeout=timeout)


def console_errors(f: Callable) -> Callable:
    """The console's outcomes as one line and their exit status."""

    @functools.wraps(f)
    def wrapper(*args, **kwargs):
        from haqueue.console.errors import ConsoleError

        try:
            return f(*args, **kwargs)
        except ConsoleError as exc:
            raise ConsoleExit(str(exc), exc.exit_code) from None

    return wrapper


def emit_json(value) -> None:
    click.echo(json.dumps(value, sort_keys=True))


def body_json(body: bytes) -> dict:
    """A body for --json: "body" when it is UTF-8, else "body_base64"."""
    try:
        return {"body": body.decode("utf-8")}
    except UnicodeDecodeError:
        import base64

        return {"body_base64": base64.b64encode(body).decode("ascii")}


def body_text(body: bytes) -> str:
    """A body for a terminal: text as text, binary as hex, control characters escaped."""
    from haqueue.preview import preview, terminal_safe

    shown = preview(body, limit=1 << 30)
    if shown.kind == "binary":
        return f"(binary, {shown.size} bytes) {shown.text}"
    return terminal_safe(shown.text)
