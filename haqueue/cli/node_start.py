"""Starting a node once `haqueue serve`'s options are read, without click.

serve.py reads a command line with click and ends here; so does a plain command line
that haqueue/cli/early.py has read itself (`serve_plain`), which then never imports
click at all: the way a client harness starts "beanstalkd" reaches its first reply
that much sooner. What a user can get wrong here is a StartError: one line, exit
status 1, whichever way the command line was read.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import stat
import sys

SD_LISTEN_FDS_START = 3  # sd_listen_fds(3): the first passed descriptor


class StartError(Exception):
    """A problem the user can fix, found while starting: one line, exit status 1."""


def serve_plain(values: dict) -> int:
    """Run a lone node from early.plain_options' values; the exit status."""
    from haqueue import logs
    from haqueue.config.fsync_policy import NEVER, FsyncPolicy

    logs.configure(values["verbose"])
    policy = NEVER if values["no_fsync"] else FsyncPolicy(values["fsync_ms"])
    try:
        options = lone_options(values["listen"], values["port"], values["data_dir"], policy,
                               values["max_job_size"])
        set_compaction(options, values["journal_size"], values["compact"])
        return run_node(options)
    except StartError as exc:
        sys.stderr.write(f"haqueue: {exc}\n")  # as haqueue/cli/main.py shows HaqueueError
        return 1
    except KeyboardInterrupt:  # Ctrl-C once the loop has let go of SIGINT: as main.py does
        return 130


def lone_options(listen: str, port: int, data_dir: str | None, policy, max_job_size: int):
    """NodeOptions for a node on its own: systemd's socket, a Unix socket or host:port."""
    from haqueue.cli import early
    from haqueue.config.replication import ReplicationSettings
    from haqueue.server.app import NodeOptions
    from haqueue.server.listeners import Listen

    early_signals = None
    inherited = systemd_socket()
    if inherited is not None:
        where = Listen(sock=inherited)
    elif listen.startswith("unix:"):
        path = listen[len("unix:"):]
        if not path:
            raise StartError("-l unix: needs a path, e.g. -l unix:/run/haqueue.sock")
        sock = early.take(listen, None)
        where = Listen(unix_path=path, sock=sock, arrived=early.arrived())
        if sock is not None:
            early_signals = early.pending_signals
        else:
            check_unix_path(path)
    else:
        sock = early.take(listen, port)
        if sock is not None:
            where = Listen(host=listen, port=port, sock=sock, arrived=early.arrived())
            early_signals = early.pending_signals
        else:
            check_bindable(listen, port)
            where = Listen(host=listen, port=port)
    return NodeOptions(
        listen=where,
        # A one-node cluster talks to nobody: no partners, no Raft port bound.
        replication=ReplicationSettings("127.0.0.1:0", [], data_dir=data_dir, policy=policy),
        max_job_size=max_job_size,
        early_signals=early_signals,
    )


def set_compaction(options, journal_size: int, compact: bool) -> None:
    """-s BYTES and -c/-n: when the journal is compacted into a snapshot, if ever
    (snapshot.journal_due: the one trigger)."""
    limit = journal_size if compact else None
    options.replication = dataclasses.replace(options.replication, journal_limit=limit)


def run_node(options, user: str | None = None) -> int:
    """Open the journal, serve until stopped; the exit status (StartError: one line)."""
    from haqueue.replication.replica import preload, startup_errors
    from haqueue.server.app import QueueServer

    preload(bool(options.replication.partners), options.data_dir)
    # A journal or snapshot this node cannot trust: one line, exit non-zero.
    untrusted = startup_errors()
    if user is not None:
        drop_privileges(user)
    data_dir = options.data_dir
    if data_dir is not None:
        try:
            os.makedirs(data_dir, exist_ok=True)
        except OSError as exc:
            raise StartError(f"-b {data_dir}: {exc.strerror}") from None
        if not os.access(data_dir, os.W_OK):
            raise StartError(f"-b {data_dir}: not writable")
    server = QueueServer(options)
    try:
        code = run_event_loop(server.run())
    except untrusted as exc:
        raise StartError(str(exc)) from None
    if server.fatal:
        raise StartError(server.fatal)
    if server.removed_line is not None:  # its own exit status (replication/removal.py REMOVED_EXIT)
        sys.stderr.write(f"haqueue: {server.removed_line}\n")
    return code


def run_event_loop(main):
    """Run the node's event loop: uvloop's when it is installed (a dependency).

    uvloop's C loop wakes and dispatches faster than asyncio's own, and every
    command crosses it twice (measured, same machine, alternating runs: one
    node in memory, cycle 4+4 4.9-6.1k -> 7.7k cycles/s, put 111k -> 122k; a
    3-node cluster, cycle 1.46-1.52k -> 1.79-1.80k). Without it (a platform
    with no wheel), asyncio's loop runs the same code.
    """
    try:
        import uvloop
    except ImportError:
        import asyncio

        return asyncio.run(main)
    return uvloop.run(main)


def systemd_socket() -> socket.socket | None:
    if os.environ.get("LISTEN_PID") != str(os.getpid()):
        return None
    try:
        count = int(os.environ.get("LISTEN_FDS", "0"))
    except ValueError:
        raise StartError("LISTEN_FDS is not a number") from None
    if count < 1:
        return None
    if count > 1:
        raise StartError(f"systemd passed {count} sockets; haqueue uses exactly one")
    for key in ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"):
        os.environ.pop(key, None)
    sock = socket.socket(fileno=SD_LISTEN_FDS_START)
    if sock.type != socket.SOCK_STREAM:
        raise StartError("the socket passed by systemd is not a stream socket")
    return sock


def check_bindable(host: str, port: int) -> None:
    """Fail now, with one line, if the client address cannot be bound."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise StartError(f"cannot resolve listen address {host!r}: {exc.strerror}") from None
    family, kind, proto, _, addr = infos[0]
    probe = socket.socket(family, kind, proto)
    try:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind(addr)
    except OSError as exc:
        raise StartError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    finally:
        probe.close()


def check_unix_path(path: str) -> None:
    """Fail now, with one line, where beanstalkd refuses a Unix socket path: a file
    there that is not a socket (the listener replaces a stale socket file only)."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    except OSError as exc:
        raise StartError(f"cannot listen on unix:{path}: {exc.strerror}") from None
    if not stat.S_ISSOCK(mode):
        raise StartError(f"cannot listen on unix:{path}: a file that is not a socket is there")


def drop_privileges(user: str) -> None:
    import pwd

    try:
        entry = pwd.getpwnam(user)
    except KeyError:
        raise StartError(f"-u: no such user {user!r}") from None
    if os.geteuid() != 0:
        raise StartError("-u: only root can switch user")
    # Codecs load lazily, from the interpreter's directory, which the new
    # user may not be able to read (a Python installed under /root): load
    # the ones the server uses (pysyncobj decodes with latin1) while we can.
    import encodings.idna  # noqa: F401
    import encodings.latin_1  # noqa: F401
    os.setgroups([])
    os.setgid(entry.pw_gid)
    os.setuid(entry.pw_uid)
