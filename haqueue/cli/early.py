"""Listen first: a lone node's client socket, opened before anything heavy is imported.

Client libraries' test harnesses start "beanstalkd" and connect after a fixed 0.1 s;
beanstalkd listens within a few ms. Importing click, asyncio and the server, and opening
the journal, take longer than that, so `haqueue serve` (and `haqueue-beanstalkd`) bind
and listen on the client address first, with nothing but the C modules behind socket
and signal loaded (`_socket`, `_signal`: their Python wrappers and ipaddress cost a few
ms, which may be what a harness on a busy machine lacks). The kernel completes
connections into the listen backlog; the server accepts them once it serves (a lone
node leads at once: replication/lone.py) and has applied its first entry, so a `put`
sent early simply waits for its reply and is never answered before it is committed
(docs/design.md I1).

Only the plain case is taken early: a lone node (no --config), TCP on a literal IP
address or a Unix socket (-l unix:PATH), and a command line made only of options this
module can read exactly as click will (anything else, including -h/-v, systemd's socket
or -u, goes the usual way, which reports its own errors). A Unix socket is made as
beanstalkd makes it: a socket file already at PATH (a previous run's) is replaced, any
other file is not, and is left to the usual path, which says so in one line. --admin goes the usual way too: there, a
listening client port has always meant the admin endpoint is up, and monitoring relies
on it; harnesses do not pass it. A bind that fails here is left to the usual
path too, which says why in one line.

While the node starts, a thread watches the early socket (haqueue/cli/arrivals.py): it
accepts what connects and notes when each connection's first bytes came, so that the
commands that arrived while the node started count their delays and timeouts from their
arrival, as beanstalkd's would (a harness's `reserve-with-timeout 1` sent 0.1 s after exec
times out 1 s after it was sent, not 1 s after the node first read it).

A command line taken early is not read by click at all: `plain_options` has read every
option in it, with click's defaults and bounds (a value click would refuse is not plain),
and haqueue/cli/node_start.py starts the node from them. That saves importing click
(about 30 ms, a fifth of the way to the first reply).
"""

from __future__ import annotations

import _signal
import _socket
import os
import stat

# serve's options that take a value (name -> its key in plain_options' result); its flags
# are -F/--no-fsync, -c, -n and -V/--verbose (haqueue/cli/serve.py declares them all).
_VALUED = {"-l": "listen", "--listen": "listen", "-p": "port", "--port": "port",
           "-b": "data_dir", "--data-dir": "data_dir", "-f": "fsync_ms", "--fsync-ms": "fsync_ms",
           "-z": "max_job_size", "--max-job-size": "max_job_size",
           "-s": "journal_size", "--journal-size": "journal_size"}
DEFAULT_FSYNC_MS = 50  # beanstalkd's default -f (haqueue/config/fsync_policy.py)
DEFAULT_MAX_JOB_SIZE = 65535
DEFAULT_JOURNAL_SIZE = 10485760
# click's IntRange for each number: (smallest, largest or None).
_BOUNDS = {"port": (1, 65535),  # 0 (any port) goes the usual way: there is nothing to listen on early
           "fsync_ms": (0, None), "max_job_size": (0, 2**32 - 1), "journal_size": (4096, None)}
DEFAULT_HOST = "0.0.0.0"
DEFAULT_PORT = 11300
BACKLOG = 1024

UNIX_PREFIX = "unix:"

_early: _socket.socket | None = None
_arrivals = None  # arrivals.Arrivals: who connected to _early, and when their bytes came
_early_address: tuple[str, int | None] | None = None  # (host, port), or ("unix:PATH", None)
_pending: list[int] = []
REMEMBERED_SIGNALS = (_signal.SIGTERM, _signal.SIGINT, _signal.SIGUSR1)


def listen_early(args: list[str]) -> dict | None:
    """If `args` (serve's arguments) are plain (plain_options), listen on their TCP
    address now; then return them, for the node to start from without click."""
    global _early, _early_address
    if os.environ.get("LISTEN_FDS"):
        return None  # systemd hands over its own socket
    values = plain_options(args)
    if values is None:
        return None
    host, port = values["listen"], values["port"]
    if host.startswith(UNIX_PREFIX):
        sock, address = _listen_unix(host[len(UNIX_PREFIX):]), (host, None)
    else:
        sock, address = _listen_tcp(host, port), (host, port)
    if sock is None:
        return None
    _early, _early_address = sock, address
    from haqueue.cli.arrivals import Arrivals

    global _arrivals
    _arrivals = Arrivals(sock)
    for signum in REMEMBERED_SIGNALS:
        _signal.signal(signum, _remember)
    return values


def _listen_tcp(host: str, port: int) -> _socket.socket | None:
    family = _family(host)
    sock = _socket.socket(family, _socket.SOCK_STREAM)
    try:
        sock.setsockopt(_socket.SOL_SOCKET, _socket.SO_REUSEADDR, 1)
        if family == _socket.AF_INET6:
            sock.setsockopt(_socket.IPPROTO_IPV6, _socket.IPV6_V6ONLY, 1)
        sock.bind((host, port))
        sock.listen(BACKLOG)
    except OSError:
        sock.close()  # the usual path binds again and reports the problem
        return None
    return sock


def _listen_unix(path: str) -> _socket.socket | None:
    """A listening Unix socket at `path`, replacing a stale socket file there, as
    beanstalkd does; None (the usual path) for any other file there, or a failed bind."""
    try:
        if stat.S_ISSOCK(os.lstat(path).st_mode):
            os.unlink(path)
        else:
            return None  # not ours to remove: the usual path refuses it in one line
    except FileNotFoundError:
        pass
    except OSError:
        return None
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        sock.bind(path)
        sock.listen(BACKLOG)
    except OSError:
        sock.close()  # too long a path, no such directory...: the usual path says which
        return None
    return sock


def _remember(signum: int, frame) -> None:
    _pending.append(signum)


def pending_signals() -> list[int]:
    """Signals received since listening early, before the server handled them (once)."""
    taken = list(_pending)
    del _pending[:len(taken)]
    return taken


def take(host: str, port: int | None):
    """The socket listened on early for host:port (or for "unix:PATH", None), if any
    (once), as a socket.socket; the connections it had accepted meanwhile are then
    `arrived` (once)."""
    global _early, _early_address, _arrivals, _arrived
    if _early is None or _early_address != (host, port):
        return None
    import socket

    if _arrivals is not None:
        _arrived = [(socket.socket(raw.family, raw.type, raw.proto, fileno=raw.detach()), first, count)
                    for raw, first, count in _arrivals.stop()]
        _arrivals = None
    raw, _early, _early_address = _early, None, None
    return socket.socket(raw.family, raw.type, raw.proto, fileno=raw.detach())


_arrived: list = []


def arrived() -> list:
    """(socket.socket, monotonic time its first bytes were readable or None, how many
    bytes were readable then) for each connection accepted while the node started,
    oldest first (once; haqueue/cli/arrivals.py)."""
    global _arrived
    taken, _arrived = _arrived, []
    return taken


def plain_options(args: list[str]) -> dict | None:
    """serve's options from `args`, or None unless every one of them is plainly readable.

    Keys: listen, port, data_dir, fsync_ms, no_fsync, max_job_size, journal_size,
    compact, verbose (click's names for serve's parameters). Read as click reads them:
    a value is the rest of its argument (-p11300, --port=11300) or the next argument,
    whatever it looks like; the last of a repeated option wins; -c and -n set one switch.
    """
    values = {"listen": DEFAULT_HOST, "port": str(DEFAULT_PORT), "data_dir": None,
              "fsync_ms": str(DEFAULT_FSYNC_MS), "no_fsync": False,
              "max_job_size": str(DEFAULT_MAX_JOB_SIZE), "journal_size": str(DEFAULT_JOURNAL_SIZE),
              "compact": True, "verbose": 0}
    i = 0
    while i < len(args):
        arg = args[i]
        if arg in ("-F", "--no-fsync"):
            values["no_fsync"] = True
        elif arg in ("-c", "-n"):
            values["compact"] = arg == "-c"
        elif arg == "--verbose" or (arg.startswith("-V") and set(arg[1:]) == {"V"}):
            values["verbose"] += len(arg) - 1 if arg.startswith("-V") else 1
        else:
            name, value = arg, None
            if arg.startswith("--") and "=" in arg:
                name, value = arg.split("=", 1)
            elif not arg.startswith("--") and len(arg) > 2 and arg[:2] in _VALUED:
                name, value = arg[:2], arg[2:]  # -p11300, -f0
            if name not in _VALUED:
                return None  # -h, -v, --config, -u, -Fn, a typo...: the usual path
            if value is None:
                if i + 1 >= len(args):
                    return None
                value = args[i + 1]
                i += 1
            values[_VALUED[name]] = value
        i += 1
    for key, (low, high) in _BOUNDS.items():
        text = values[key]
        if not (text.isascii() and text.isdigit()):
            return None  # click reads " 1", "+1" and "1_0" too: left to it
        number = int(text)
        if number < low or (high is not None and number > high):
            return None  # click says which bound
        values[key] = number
    listen = values["listen"]
    if listen.startswith(UNIX_PREFIX):
        if not listen[len(UNIX_PREFIX):]:
            return None  # "-l unix:": node_start says what is missing
    elif _family(listen) is None:
        return None  # a name (may resolve to several addresses), fe80::1%eth0
    if values["data_dir"] is not None and not _a_directory_click_accepts(values["data_dir"]):
        return None  # click names the problem
    return values


def _family(host: str) -> int | None:
    """AF_INET or AF_INET6 for a literal IP address (as bind reads it), else None."""
    for family in (_socket.AF_INET, _socket.AF_INET6):
        try:
            _socket.inet_pton(family, host)
            return family
        except (OSError, ValueError):
            pass
    return None


def _a_directory_click_accepts(path: str) -> bool:
    """What click.Path(file_okay=False) lets through: nothing there yet, or something
    readable that is not a regular file."""
    try:
        st = os.stat(path)
    except OSError:
        return True
    return not stat.S_ISREG(st.st_mode) and os.access(path, os.R_OK)


def _address(args: list[str]) -> tuple[str, int | None] | None:
    """(host, port) or ("unix:PATH", None) to listen on early for serve's arguments, or None."""
    values = plain_options(args)
    if values is None:
        return None
    if values["listen"].startswith(UNIX_PREFIX):
        return values["listen"], None
    return values["listen"], values["port"]
