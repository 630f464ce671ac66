"""`haqueue serve`: run one node, with beanstalkd's own flags as aliases.

So that a beanstalkd systemd unit or a client library's test harness can swap
the binary, the short flags mean what they mean to beanstalkd 1.12:
  -l ADDR   listen address (or unix:/path)      -p PORT  listen port
  -b DIR    keep the journal and snapshots here -f MS    fsync at most every MS ms (-f0: always)
  -F        never fsync                         -z BYTES max job size
  -s BYTES  journal size that triggers a snapshot (beanstalkd: WAL file size;
            haqueue has one journal, compacted into a snapshot past this size)
  -c / -n   compact the journal (default) / never compact it
  -u USER   run as USER                         -V       more logging (repeatable)
  -v        print the version                   -h       help
haqueue's own flags bound what clients may hold (--max-connections,
--max-tubes, --max-watched-tubes, --max-memory, --output-timeout), put TLS on
the client port (--tls-cert/--tls-key) and guard the admin port's /status
(--admin-token); with --config they default to the cluster file's [limits],
[tls] and cluster.admin_token, and a flag given here wins.
A single node is a cluster of one: the same log, journal, snapshots and core as
three nodes, without Raft's machinery (haqueue/replication/lone.py).
With --config FILE --node ID the node runs as part of the cluster the file
describes. Like beanstalkd, a listening socket handed over by systemd socket
activation (LISTEN_FDS/LISTEN_PID) is used instead of -l/-p (single node only).
"""

from __future__ import annotations

import asyncio
import os
import pwd
import socket
import ssl

import click

from haqueue import __version__
from haqueue.cli.user_errors import HaqueueError, load_cluster_file

SD_LISTEN_FDS_START = 3  # sd_listen_fds(3): the first passed descriptor


def _systemd_socket() -> socket.socket | None:
    if os.environ.get("LISTEN_PID") != str(os.getpid()):
        return None
    try:
        count = int(os.environ.get("LISTEN_FDS", "0"))
    except ValueError:
        raise HaqueueError("LISTEN_FDS is not a number") from None
    if count < 1:
        return None
    if count > 1:
        raise HaqueueError(f"systemd passed {count} sockets; haqueue uses exactly one")
    for key in ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"):
        os.environ.pop(key, None)
    sock = socket.socket(fileno=SD_LISTEN_FDS_START)
    if sock.type != socket.SOCK_STREAM:
        raise HaqueueError("the socket passed by systemd is not a stream socket")
    return sock


def _check_bindable(host: str, port: int) -> None:
    """Fail now, with one line, if the client address cannot be bound."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise HaqueueError(f"cannot resolve listen address {host!r}: {exc.strerror}") from None
    family, kind, proto, _, addr = infos[0]
    probe = socket.socket(family, kind, proto)
    try:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind(addr)
    except OSError as exc:
        raise HaqueueError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    finally:
        probe.close()


def _drop_privileges(user: str) -> None:
    try:
        entry = pwd.getpwnam(user)
    except KeyError:
        raise HaqueueError(f"-u: no such user {user!r}") from None
    if os.geteuid() != 0:
        raise HaqueueError("-u: only root can switch user")
    # Codecs load lazily, from the interpreter's directory, which the new
    # user may not be able to read (a Python installed under /root): load
    # the ones the server uses (pysyncobj decodes with latin1) while we can.
    import encodings.idna  # noqa: F401
    import encodings.latin_1  # noqa: F401
    os.setgroups([])
    os.setgid(entry.pw_gid)
    os.setuid(entry.pw_uid)


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-l", "--listen", "listen", default="0.0.0.0", show_default=True,
              help="Client address, or unix:/path for a Unix socket.")
@click.option("-p", "--port", type=click.IntRange(0, 65535), default=11300, show_default=True,
              help="Client port.")
@click.option("-b", "--data-dir", type=click.Path(file_okay=False), default=None,
              help="Keep the journal and snapshots here (without it: memory only).")
@click.option("-f", "--fsync-ms", type=click.IntRange(0, None), default=50, show_default=True,
              help="fsync at most every MS ms; 0 = before every acknowledgement.")
@click.option("-F", "--no-fsync", is_flag=True, help="Never fsync.")
@click.option("-z", "--max-job-size", type=click.IntRange(0, 2**32 - 1), default=65535,
              show_default=True, help="Largest job body in bytes.")
@click.option("-s", "--journal-size", type=click.IntRange(4096, None), default=10485760,
              show_default=True, help="Journal size in bytes that triggers a snapshot.")
@click.option("-c", "compact", flag_value=True, default=True, help="Compact the journal (default).")
@click.option("-n", "compact", flag_value=False, help="Never compact the journal.")
@click.option("-u", "--user", default=None, help="Run as this user.")
@click.option("-V", "--verbose", count=True, help="More logging (repeat for more).")
@click.option("-v", "--version", "show_version", is_flag=True, help="Print the version and exit.")
@click.option("--config", "config_path", type=click.Path(dir_okay=False), default=None,
              help="Cluster file (TOML): run as one node of that cluster.")
@click.option("--node", "node_id", default=None, help="This node's id in the cluster file.")
@click.option("--admin", "admin", default=None, metavar="HOST:PORT",
              help="Serve the HTTP admin endpoint (/, /metrics, /health, /leader, /status) here.")
@click.option("--log-json", is_flag=True, help="Log one JSON object per line (ts, level, msg, event fields).")
@click.option("--admin-token", default=None, metavar="TOKEN",
              help="/status and /gc need 'Authorization: Bearer TOKEN' (for an admin port beyond loopback).")
@click.option("--max-connections", type=click.IntRange(1, None), default=None,
              help="Client connections served at once; more are closed at once. [default: 10000]")
@click.option("--max-tubes", type=click.IntRange(1, None), default=None,
              help="Tubes at once; use/watch of one more answers OUT_OF_MEMORY. [default: 100000]")
@click.option("--max-watched-tubes", type=click.IntRange(1, None), default=None,
              help="Tubes one connection may watch; more answers OUT_OF_MEMORY. [default: 1000]")
@click.option("--max-memory", default=None, metavar="SIZE",
              help="Resident memory (e.g. 2GiB) above which puts answer OUT_OF_MEMORY. [default: 0, off]")
@click.option("--output-timeout", type=click.FloatRange(0, None), default=None, metavar="SECONDS",
              help="Close a client whose unread replies stay over 64 KiB this long; 0: never. [default: 60]")
@click.option("--tls-cert", type=click.Path(dir_okay=False), default=None,
              help="Serve clients over TLS with this certificate chain (PEM); needs --tls-key.")
@click.option("--tls-key", type=click.Path(dir_okay=False), default=None,
              help="The private key (PEM) for --tls-cert.")
@click.option("--id-port", type=click.IntRange(0, 65535), default=None, metavar="PORT",
              help="Serve the id service (id_server's JSON over UDP) on this port at the -l address; "
                   "0: off. [default: 0; the cluster file's id_port]")
@click.option("--gearman-port", type=click.IntRange(0, 65535), default=None, metavar="PORT",
              help="Serve the Gearman protocol on this TCP port at the -l address (the leader only); "
                   "0: off. [default: 0; the cluster file's gearman_port]")
def serve(listen, port, data_dir, fsync_ms, no_fsync, max_job_size, journal_size, compact, user,
          verbose, show_version, config_path, node_id, admin, log_json, admin_token, max_connections,
          max_tubes, max_watched_tubes, max_memory, output_timeout, tls_cert, tls_key, id_port,
          gearman_port) -> None:
    """Run a haqueue node (beanstalkd's flags work as aliases)."""
    if show_version:
        click.echo(f"haqueue {__version__} (beanstalkd 1.12 protocol)")
        return
    from haqueue.replication.fsync_policy import NEVER, FsyncPolicy
    from haqueue.server.app import Listen, NodeOptions, QueueServer

    from haqueue import logs

    logs.configure(verbose, json_lines=log_json)
    policy = NEVER if no_fsync else FsyncPolicy(fsync_ms)
    if (config_path is None) != (node_id is None):
        raise click.UsageError("--config and --node go together")
    early_signals = None
    if config_path is not None:
        options = _cluster_options(config_path, node_id, data_dir, policy, max_job_size)
    else:
        inherited = _systemd_socket()
        if inherited is not None:
            where = Listen(sock=inherited)
        elif listen.startswith("unix:"):
            path = listen[len("unix:"):]
            if not path:
                raise HaqueueError("-l unix: needs a path, e.g. -l unix:/run/haqueue.sock")
            where = Listen(unix_path=path)
        else:
            from haqueue.cli import early

            sock = early.take(listen, port)
            if sock is not None:
                where = Listen(host=listen, port=port, sock=sock)
                early_signals = early.pending_signals
            else:
                _check_bindable(listen, port)
                where = Listen(host=listen, port=port)
        options = NodeOptions(
            listen=where,
            raft_address="127.0.0.1:0",  # a one-node cluster talks to nobody
            data_dir=data_dir,
            policy=policy,
            max_job_size=max_job_size,
            early_signals=early_signals,
        )
    _apply_client_options(options, admin_token, max_connections, max_tubes, max_watched_tubes,
                          max_memory, output_timeout, tls_cert, tls_key)
    if id_port is not None:
        if options.listen.unix_path:
            raise HaqueueError("--id-port needs -l HOST (the id service's UDP address), not a Unix socket")
        options.id_port = id_port
        if config_path is not None:
            # The flag is this node's port; the other members are taken to use
            # the same one when a follower names the leader.
            spec, _ = load_cluster_file(config_path, node_id)
            options.id_endpoints = {n.raft_endpoint: f"{n.address}:{id_port}" for n in spec.nodes} if id_port else {}
    if gearman_port is not None:
        if options.listen.unix_path or options.listen.sock is not None:
            raise HaqueueError("--gearman-port needs -l HOST (the Gearman port's address), "
                               "not a Unix or inherited socket")
        if gearman_port and gearman_port == options.listen.port:
            raise HaqueueError(f"--gearman-port {gearman_port} is the beanstalkd port (-p)")
        options.gearman_port = gearman_port
    if admin is not None:
        host, sep, admin_port = admin.rpartition(":")
        if not sep or not admin_port.isdigit() or not 0 < int(admin_port) < 65536:
            raise HaqueueError(f"--admin {admin!r}: expected HOST:PORT")
        options.admin = (host or "127.0.0.1", int(admin_port))
    options.journal_limit = journal_size if compact else None
    options.compaction_entries = 20000 if compact else 2**62
    from haqueue.replication.replica import preload

    preload(bool(options.raft_partners))
    startup_errors = _startup_errors()
    if user is not None:
        _drop_privileges(user)
    if data_dir is not None:
        try:
            os.makedirs(data_dir, exist_ok=True)
        except OSError as exc:
            raise HaqueueError(f"-b {data_dir}: {exc.strerror}") from None
        if not os.access(data_dir, os.W_OK):
            raise HaqueueError(f"-b {data_dir}: not writable")
    server = QueueServer(options)
    try:
        code = run_event_loop(server.run())
    except startup_errors as exc:
        raise HaqueueError(str(exc)) from None

    if server.fatal:
        raise HaqueueError(server.fatal)
    if code:
        raise click.exceptions.Exit(code)


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
        return asyncio.run(main)
    return uvloop.run(main)


def _startup_errors():
    from haqueue.replication.replica import startup_errors

    # A journal or snapshot this node cannot trust: one line, exit non-zero.
    return startup_errors()


def _apply_client_options(options, admin_token, max_connections, max_tubes, max_watched_tubes,
                          max_memory, output_timeout, tls_cert, tls_key) -> None:
    """Flags given on the command line win over the cluster file's (already in options)."""
    from haqueue.server.app import TlsFiles
    from haqueue.server.limits import parse_size

    limits = options.limits
    if max_connections is not None:
        limits.max_connections = max_connections
    if max_tubes is not None:
        limits.max_tubes = max_tubes
    if max_watched_tubes is not None:
        limits.max_watched_tubes = max_watched_tubes
    if max_memory is not None:
        try:
            limits.max_memory = parse_size(max_memory)
        except ValueError as exc:
            raise HaqueueError(f"--max-memory: {exc}") from None
    if output_timeout is not None:
        limits.output_timeout = output_timeout
    if admin_token is not None:
        options.admin_token = admin_token
    if (tls_cert is None) != (tls_key is None):
        raise HaqueueError("--tls-cert and --tls-key go together")
    if tls_cert is not None:
        options.tls = TlsFiles(tls_cert, tls_key)
    if options.tls is not None:
        try:
            options.tls.server_context()  # a bad file is one line now, not a failure at election
        except (ssl.SSLError, OSError) as exc:
            raise HaqueueError(f"TLS certificate {options.tls.cert} / key {options.tls.key}: "
                               f"{getattr(exc, 'strerror', None) or exc}") from None


def _cluster_options(config_path, node_id, data_dir, policy, max_job_size):
    import dataclasses

    from haqueue.server.app import Listen, NodeOptions, TlsFiles

    cluster, me = load_cluster_file(config_path, node_id)
    return NodeOptions(
        listen=Listen(host=me.address, port=me.client_port, vip=cluster.vip_address),
        raft_address=me.raft_endpoint,
        raft_partners=[peer.raft_endpoint for peer in cluster.peers_of(node_id)],
        data_dir=data_dir or me.data_dir,
        policy=policy,
        secret=cluster.secret,
        max_job_size=max_job_size,
        admin=(me.address, me.admin_port),
        name=f"{cluster.name}/{me.id}",
        members=[(n.id, n.address, n.admin_port, n.raft_endpoint) for n in cluster.nodes],
        node_id=me.id,
        limits=dataclasses.replace(cluster.limits),
        tls=TlsFiles(cluster.tls.cert, cluster.tls.key) if cluster.tls is not None else None,
        admin_token=cluster.admin_token,
        id_port=me.id_port,
        id_endpoints={n.raft_endpoint: f"{n.address}:{n.id_port}" for n in cluster.nodes if n.id_port},
        gearman_port=me.gearman_port,
    )
