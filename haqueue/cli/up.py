"""`haqueue up`: a cluster on loopback (three nodes; --nodes 5 for five), to see failover without root."""

from __future__ import annotations

import signal
import tempfile
import time
from pathlib import Path

import click

from haqueue import admin_client
from haqueue.cli.user_errors import HaqueueError

LEADER_ASK_S = 1.0  # how often the leader is asked whether it still leads


@click.command()
@click.option("--dir", "workdir", type=click.Path(file_okay=False), default=None,
              help="Keep the cluster file, data and logs here (default: a temporary directory).")
@click.option("--nodes", type=click.IntRange(1, 7), default=3, show_default=True, help="How many nodes.")
@click.option("--port", type=click.IntRange(1024, 60000), default=11300, show_default=True,
              help="Client port to start looking for a free one from.")
@click.option("--fsync-ms", "fsync_ms", type=click.IntRange(0, None), default=0, show_default=True,
              help="Each node's -f (0: fsync before every acknowledgement).")
@click.option("--for", "run_for", type=float, default=None, help="Stop after this many seconds.")
def up(workdir, nodes, port, fsync_ms, run_for) -> None:
    """Start a local cluster, print who leads and where to connect, follow failovers."""
    from haqueue.local_cluster import LocalCluster

    base = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="haqueue-up-"))
    cluster = LocalCluster.create(base, nodes=nodes, serve_args=[f"-f{fsync_ms}"], client_port=port)
    stop = {"now": False}

    def on_signal(signum, frame):
        stop["now"] = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    spec = cluster.spec
    click.echo(f"cluster file: {cluster.config_path}")
    cluster.start()
    try:
        leader = cluster.leader(timeout=15)
        if leader is None:
            tails = "\n".join(cluster.log_tail(m.id, 3) for m in spec.nodes)
            raise HaqueueError(f"no leader was elected within 15 s; logs in {base}\n{tails}")
        for member in spec.nodes:
            click.echo(f"  {member.id}: pid {cluster.nodes[member.id].process.pid}, "
                       f"clients {member.client_endpoint}, admin {member.admin_url}, "
                       f"log {cluster.nodes[member.id].log_path}")
        click.echo(f"leader: {leader.id} — connect a beanstalkd client to {leader.client_endpoint}")
        click.echo(f"or to the cluster's VIP {spec.vip_address}:{spec.client_port}, which the leader "
                   "also serves (on loopback no keepalived is needed to move it)")
        majority = len(spec.nodes) // 2 + 1
        click.echo(f"try a failover: kill -9 {cluster.nodes[leader.id].process.pid} "
                   f"(the cluster serves while {majority} of its {len(spec.nodes)} nodes run)")
        click.echo(f"status: haqueue cluster status --config {cluster.config_path}")
        current, named = leader, leader.id  # who leads, if known; who was named last
        started = asked = time.monotonic()
        while not stop["now"]:
            if run_for is not None and time.monotonic() - started >= run_for:
                break
            time.sleep(0.2)
            exited = False
            for member in spec.nodes:
                node = cluster.nodes[member.id]
                if node.process.poll() is not None and getattr(node, "_reported", None) != node.process.pid:
                    node._reported = node.process.pid
                    exited = True
                    click.echo(f"{member.id} exited (status {node.process.returncode}); "
                               f"restart it with: haqueue serve --config {cluster.config_path} "
                               f"--node {member.id} -b {base / member.id}")
            # Followed without waking the nodes for nothing: the leader alone is asked,
            # once a second (an idle node's CPU is its wake-ups, docs/benchmarks.md);
            # every node only once it is gone or no longer says it leads.
            if not exited and current is not None and time.monotonic() - asked < LEADER_ASK_S:
                continue
            asked = time.monotonic()
            if (current is not None and not exited and cluster.alive(current.id)
                    and admin_client.is_leader(current.address, current.admin_port, 0.3)):
                continue
            now_leader = cluster.leader(timeout=0.5)
            if now_leader is not None and now_leader.id != named:
                click.echo(f"leader: {now_leader.id} — clients now connect to {now_leader.client_endpoint}")
                named = now_leader.id
            current = now_leader
    finally:
        click.echo("stopping the cluster")
        cluster.stop()
