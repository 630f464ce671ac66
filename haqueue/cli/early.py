"""Listen first: a lone node's client socket, opened before anything heavy is imported.

Client libraries' test harnesses start "beanstalkd" and connect after a fixed 0.1 s;
beanstalkd listens within a few ms. Importing click, asyncio and the server, and opening
the journal, take longer than that, so `haqueue serve` (and
`haqueue-beanstalkd`) bind and listen on the client address first, with nothing but the
socket module loaded. The kernel completes connections into the listen backlog; the
server accepts them once it serves (a lone node leads at once: replication/lone.py) and
has applied its first entry, so a `put` sent early
simply waits for its reply and is never answered before it is committed
(docs/design.md I1).

Only the plain case is taken early: a lone node (no --config), TCP on a literal IP
address, and a command line made only of options this module can read exactly as click
will (anything else, including -h/-v, a Unix socket, systemd's socket or -u, goes the
usual way, which reports its own errors). --admin goes the usual way too: there, a
listening client port has always meant the admin endpoint is up, and monitoring relies
on it; harnesses do not pass it. A bind that fails here is left to the usual
path too, which says why in one line.
"""

from __future__ import annotations

import ipaddress
import os
import signal
import socket

# serve's options that take a value, and those that do not (haqueue/cli/serve.py).
_VALUED = {"-l": "listen", "--listen": "listen", "-p": "port", "--port": "port",
           "-b": None, "--data-dir": None, "-f": None, "--fsync-ms": None, "-z": None,
           "--max-job-size": None, "-s": None, "--journal-size": None}
_FLAGS = {"-F", "--no-fsync", "-c", "-n", "-V", "--verbose"}
DEFAULT_HOST = "0.0.0.0"
DEFAULT_PORT = 11300
BACKLOG = 1024

_early: socket.socket | None = None
_early_address: tuple[str, int] | None = None
_pending: list[int] = []
REMEMBERED_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)


def listen_early(args: list[str]) -> None:
    """If `args` (serve's arguments) name a plain TCP address, listen on it now."""
    global _early, _early_address
    if os.environ.get("LISTEN_FDS"):
        return  # systemd hands over its own socket
    address = _address(args)
    if address is None:
        return
    host, port = address
    family = socket.AF_INET6 if ipaddress.ip_address(host).version == 6 else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.bind((host, port))
        sock.listen(BACKLOG)
    except OSError:
        sock.close()  # the usual path binds again and reports the problem
        return
    _early, _early_address = sock, (host, port)
    for signum in REMEMBERED_SIGNALS:
        signal.signal(signum, _remember)


def _remember(signum: int, frame) -> None:
    _pending.append(signum)


def pending_signals() -> list[int]:
    """Signals received since listening early, before the server handled them (once)."""
    taken = list(_pending)
    del _pending[:len(taken)]
    return taken


def take(host: str, port: int) -> socket.socket | None:
    """The socket listened on early for host:port, if any (once)."""
    global _early, _early_address
    if _early is None or _early_address != (host, port):
        return None
    sock, _early, _early_address = _early, None, None
    return sock


def _address(args: list[str]) -> tuple[str, int] | None:
    """(host, port) from serve's arguments, or None unless they are all plainly readable."""
    values = {"listen": DEFAULT_HOST, "port": str(DEFAULT_PORT)}
    i = 0
    while i < len(args):
        arg = args[i]
        if arg in _FLAGS or (arg.startswith("-V") and set(arg[1:]) == {"V"}):
            i += 1
            continue
        name, value = arg, None
        if arg.startswith("--") and "=" in arg:
            name, value = arg.split("=", 1)
        elif not arg.startswith("--") and len(arg) > 2 and arg[:2] in _VALUED:
            name, value = arg[:2], arg[2:]  # -p11300, -f0
        if name not in _VALUED:
            return None  # -h, -v, --config, -u, a typo...: the usual path
        if value is None:
            if i + 1 >= len(args):
                return None
            value = args[i + 1]
            i += 1
        if _VALUED[name] is not None:
            values[_VALUED[name]] = value
        i += 1
    host, port = values["listen"], values["port"]
    if not port.isdigit() or not 0 < int(port) < 65536:
        return None  # 0 (any port) and bad values: the usual path
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return None  # a name (may resolve to several addresses) or unix:/path
    return host, int(port)
