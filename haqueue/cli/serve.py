"""`haqueue serve`: run one node, with beanstalkd's own flags as aliases.

So that a beanstalkd systemd unit or a client library's test harness can swap
the binary, the short flags mean what they mean to beanstalkd 1.12:
  -l ADDR   listen address (or unix:/path)      -p PORT  listen port
  -b DIR    keep the journal and snapshots here -f MS    fsync at most every MS ms (-f0: always)
  -F        never fsync                         -z BYTES max job size
  -s BYTES  journal size that triggers a snapshot (beanstalkd: WAL file size;
            haqueue has one journal, compacted into a snapshot past this size
            and past the last snapshot's)
  -c / -n   compact the journal (default) / never compact it
  -u USER   run as USER                         -V       more logging (repeatable)
  -v        print the version                   -h       help
haqueue's own flags bound what clients may hold (--max-connections,
--max-tubes, --max-watched-tubes, --max-memory, --output-timeout), keep a disk
reserve (--disk-reserve), put TLS on
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

import ssl

import click

from haqueue import __version__
from haqueue.cli import early
from haqueue.cli.node_start import StartError
from haqueue.cli.user_errors import HaqueueError, load_cluster_file


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-l", "--listen", "listen", default=early.DEFAULT_HOST, show_default=True,
              help="Client address, or unix:/path for a Unix socket.")
@click.option("-p", "--port", type=click.IntRange(0, 65535), default=early.DEFAULT_PORT, show_default=True,
              help="Client port.")
@click.option("-b", "--data-dir", type=click.Path(file_okay=False), default=None,
              help="Keep the journal and snapshots here (without it: memory only).")
@click.option("-f", "--fsync-ms", type=click.IntRange(0, None), default=early.DEFAULT_FSYNC_MS, show_default=True,
              help="fsync at most every MS ms; 0 = before every acknowledgement.")
@click.option("-F", "--no-fsync", is_flag=True, help="Never fsync.")
@click.option("-z", "--max-job-size", type=click.IntRange(0, 2**32 - 1), default=early.DEFAULT_MAX_JOB_SIZE,
              show_default=True, help="Largest job body in bytes.")
@click.option("-s", "--journal-size", type=click.IntRange(4096, None), default=early.DEFAULT_JOURNAL_SIZE,
              show_default=True, help="Journal size in bytes that triggers a snapshot (once the journal is also "
                   "as large as the last snapshot).")
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
@click.option("--max-input-buffers", default=None, metavar="SIZE",
              help="Bytes of big requests (put bodies, Gearman packets over 64 KiB) all clients may "
                   "have on their way at once; more wait their turn. [default: 256MiB]")
@click.option("--disk-reserve", default=None, metavar="SIZE",
              help="Floor of the disk reserve (e.g. 64MiB, or off): below the reserve puts answer "
                   "OUT_OF_MEMORY until space returns. [default: 1/16 of the data file system, at most 64MiB]")
@click.option("--output-timeout", type=click.FloatRange(0, None), default=None, metavar="SECONDS",
              help="Close a client whose unread replies stay over 64 KiB this long; 0: never. [default: 60]")
@click.option("--tls-cert", type=click.Path(dir_okay=False), default=None,
              help="Serve clients over TLS with this certificate chain (PEM); needs --tls-key.")
@click.option("--tls-key", type=click.Path(dir_okay=False), default=None,
              help="The private key (PEM) for --tls-cert.")
@click.option("--id-port", type=click.IntRange(0, 65535), default=None, metavar="PORT",
              help="Serve the id service (id_server's JSON over UDP) on this port at the -l address; "
                   "needs -b. 0: off. [default: 0; the cluster file's id_port]")
@click.option("--id-rate-limit", type=click.IntRange(0, None), default=None, metavar="N",
              help="Id service datagrams a second per source address; more are dropped unanswered; "
                   "0: no limit. [default: 20000; the cluster file's id_rate_limit]")
@click.option("--gearman-port", type=click.IntRange(0, 65535), default=None, metavar="PORT",
              help="Serve the Gearman protocol on this TCP port at the -l address (the leader only); "
                   "0: off. [default: 0; the cluster file's gearman_port]")
def serve(listen, port, data_dir, fsync_ms, no_fsync, max_job_size, journal_size, compact, user,
          verbose, show_version, config_path, node_id, admin, log_json, admin_token, max_connections,
          max_tubes, max_watched_tubes, max_memory, max_input_buffers, disk_reserve, output_timeout, tls_cert,
          tls_key, id_port, id_rate_limit, gearman_port) -> None:
    """Run a haqueue node (beanstalkd's flags work as aliases)."""
    if show_version:
        click.echo(f"haqueue {__version__} (beanstalkd 1.12 protocol)")
        return
    from haqueue import logs
    from haqueue.cli import node_start
    from haqueue.config.fsync_policy import NEVER, FsyncPolicy

    logs.configure(verbose, json_lines=log_json, show_events=config_path is not None)
    policy = NEVER if no_fsync else FsyncPolicy(fsync_ms)
    if (config_path is None) != (node_id is None):
        raise click.UsageError("--config and --node go together")
    try:
        if config_path is not None:
            options = _cluster_options(config_path, node_id, data_dir, policy, max_job_size)
        else:
            options = node_start.lone_options(listen, port, data_dir, policy, max_job_size)
        _apply_client_options(options, admin_token, max_connections, max_tubes, max_watched_tubes,
                              max_memory, output_timeout, tls_cert, tls_key, disk_reserve,
                              max_input_buffers)
        if id_port is not None:
            if options.listen.unix_path:
                raise HaqueueError("--id-port needs -l HOST (the id service's UDP address), not a Unix socket")
            options.id_port = id_port
            if config_path is not None:
                # The flag is this node's port; the other members are taken to use
                # the same one when a follower names the leader.
                spec, _ = load_cluster_file(config_path, node_id)
                options.id_endpoints = {n.raft_endpoint: f"{n.address}:{id_port}" for n in spec.nodes} if id_port else {}
        if options.id_port and options.data_dir is None:
            # In memory, a restart starts every counter again: ids handed out
            # before it would be handed out again (docs/id-service.md, "Durability").
            raise HaqueueError(f"--id-port {options.id_port} needs -b DIR: without a journal on disk "
                               f"a restart would hand out the same ids again")
        if id_rate_limit is not None:
            options.id_rate_limit = id_rate_limit
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
        node_start.set_compaction(options, journal_size, compact)
        code = node_start.run_node(options, user=user)
    except StartError as exc:
        raise HaqueueError(str(exc)) from None
    if code:
        raise click.exceptions.Exit(code)


def _apply_client_options(options, admin_token, max_connections, max_tubes, max_watched_tubes,
                          max_memory, output_timeout, tls_cert, tls_key, disk_reserve=None,
                          max_input_buffers=None) -> None:
    """Flags given on the command line win over the cluster file's (already in options)."""
    from haqueue.server.tls import TlsFiles
    from haqueue.config.limits import parse_reserve, parse_size

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
    if max_input_buffers is not None:
        try:
            limits.max_input_buffers = parse_size(max_input_buffers)
        except ValueError as exc:
            raise HaqueueError(f"--max-input-buffers: {exc}") from None
    if disk_reserve is not None:
        try:
            limits.disk_reserve = parse_reserve(disk_reserve)
        except ValueError as exc:
            raise HaqueueError(f"--disk-reserve: {exc}") from None
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

    from haqueue.config.replication import ReplicationSettings
    from haqueue.server.app import NodeOptions
    from haqueue.server.listeners import Listen
    from haqueue.server.tls import TlsFiles

    cluster, me = load_cluster_file(config_path, node_id)
    return NodeOptions(
        listen=Listen(host=me.address, port=me.client_port, vip=cluster.vip_address),
        replication=ReplicationSettings(
            self_address=me.raft_endpoint,
            partners=[peer.raft_endpoint for peer in cluster.peers_of(node_id)],
            data_dir=data_dir or me.data_dir,
            policy=policy,
            secret=cluster.secret,
        ),
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
        id_rules=cluster.id_rules,
        id_rate_limit=cluster.id_rate_limit,
        config_path=str(config_path),
        gearman_port=me.gearman_port,
    )
