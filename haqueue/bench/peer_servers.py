"""Start and stop the replicated peers `bench peers` compares haqueue with:
a RabbitMQ 3-node cluster and a NATS 3-server JetStream cluster, both from Debian's packages.

Rules:
- Everything listens on 127.0.0.1 only, on free ports, with every data and log
  directory under one temporary directory that is removed afterwards. The
  Debian packages' own services are never used (scripts/setup stops them).
- RabbitMQ gets an epmd of its own, started here on its own port (ERL_EPMD_PORT),
  so the nodes neither use nor start the system's epmd; node names are
  `haqueue-bench-N@localhost`; the nodes form one cluster by classic_config peer
  discovery before they open their AMQP listeners, so "every node listens" means
  "the cluster has formed". Each VM runs one scheduler and no busy waiting
  (`+S 1:1 +sbwt none +sbwtdcpu none +sbwtdio none`), as RabbitMQ advises when
  nodes share cores.
- NATS servers are clustered by explicit routes, JetStream on, file store.
- Every process runs in its own session (a Ctrl-C reaches bench, which stops them
  in order) under the CPUs of servers.SERVER_CPUS, and is stopped by its PID on
  every way out: SIGTERM, then after a grace period SIGKILL to the process group
  the session made (RabbitMQ's start script is a shell that waits for its VM).
- A server that exits before it serves is reported with the last line it logged.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from haqueue.bench import servers
from haqueue.bench.load import BenchError
from haqueue.bench.servers import HOST, free_port

NODES = 3
RABBITMQ_SCRIPT = "/usr/lib/rabbitmq/bin/rabbitmq-server"
# Three Erlang VMs booting on one core take 10-30 s; NATS starts in well under one.
RABBITMQ_READY_TIMEOUT = 120.0
NATS_READY_TIMEOUT = 30.0
STOP_GRACE = 30.0  # RabbitMQ stops its queues and writes its state before exiting
# One scheduler, no busy waiting: the VMs share CPU 0 with each other.
ERL_ARGS = "+S 1:1 +sbwt none +sbwtdcpu none +sbwtdio none -kernel inet_dist_use_interface {127,0,0,1}"


@dataclass
class Peer:
    """A started peer: its name as the table shows it and the client ports of its nodes."""

    name: str
    ports: list[int]
    pids: list[int]


def rabbitmq_installed() -> bool:
    return os.access(RABBITMQ_SCRIPT, os.X_OK) and shutil.which("epmd") is not None


def nats_path() -> str | None:
    return shutil.which("nats-server") or next(
        (p for p in ("/usr/sbin/nats-server", "/usr/bin/nats-server") if os.access(p, os.X_OK)), None)


def _pinned(argv: list[str]) -> list[str]:
    if servers.SERVER_CPUS is None:
        return argv
    # taskset sets the affinity before exec: every thread and child inherits it.
    return ["taskset", "-c", ",".join(map(str, sorted(servers.SERVER_CPUS))), *argv]


class _Processes:
    """Processes started for one peer, stopped together: SIGTERM to every PID first,
    so the nodes of a cluster shut down side by side, not one waiting for the next."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen] = []

    def start(self, argv: list[str], log_path: str, env: dict[str, str] | None = None) -> subprocess.Popen:
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(_pinned(argv), stdin=subprocess.DEVNULL, stdout=log,
                                    stderr=subprocess.STDOUT, start_new_session=True, env=env)
        self.procs.append(proc)
        return proc

    def stop(self, procs: list[subprocess.Popen] | None = None) -> None:
        """SIGTERM to each PID, then SIGKILL to each one's process group after STOP_GRACE."""
        procs = list(self.procs if procs is None else procs)
        for proc in procs:
            if proc.poll() is None:
                proc.terminate()
        deadline = time.monotonic() + STOP_GRACE
        for proc in procs:
            try:
                proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # the group start_new_session made: ours alone
            except (ProcessLookupError, PermissionError):
                pass
            if proc.poll() is None:
                proc.wait()
            self.procs.remove(proc)


def _last_line(path: str) -> str:
    try:
        with open(path, "rb") as f:
            lines = [ln for ln in f.read().decode("utf-8", "replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return lines[-1].strip()[:300] if lines else ""


def _wait_listening(procs: list[tuple[subprocess.Popen, int, str]], what: str, timeout: float) -> None:
    """Until every (process, port) accepts a connection; BenchError when one exits or at `timeout`."""
    deadline = time.monotonic() + timeout
    waiting = list(procs)
    while waiting:
        for item in list(waiting):
            proc, port, log_path = item
            if proc.poll() is not None:
                last = _last_line(log_path)
                raise BenchError(f"{what} exited with status {proc.returncode} before listening"
                                 + (f": {last}" if last else f" (log: {log_path})"))
            try:
                with socket.create_connection((HOST, port), timeout=0.5):
                    waiting.remove(item)
            except OSError:
                pass
        if waiting and time.monotonic() > deadline:
            ports = ", ".join(str(p) for _, p, _ in waiting)
            raise BenchError(f"{what} not listening on {HOST} port(s) {ports} after {timeout:g} s")
        if waiting:
            time.sleep(0.1)  # polling a condition (the ports), bounded by the deadline


def _distinct_free_ports(count: int) -> list[int]:
    ports: list[int] = []
    while len(ports) < count:
        port = free_port()
        if port not in ports:
            ports.append(port)
    return ports


@contextmanager
def rabbitmq_cluster() -> Iterator[Peer]:
    """Three RabbitMQ nodes clustered on loopback; yields their AMQP ports."""
    if not rabbitmq_installed():
        raise BenchError("RabbitMQ is not installed (apt-get install rabbitmq-server; scripts/setup does)")
    workdir = tempfile.mkdtemp(prefix="haqueue-bench-rabbitmq-")
    try:
        processes = _Processes()
        started: list[tuple[subprocess.Popen, int, str]] = []
        try:
            epmd_port, *ports = _distinct_free_ports(1 + 2 * NODES)
            amqp, dist = ports[:NODES], ports[NODES:]
            names = [f"haqueue-bench-{i + 1}@localhost" for i in range(NODES)]
            epmd = processes.start([shutil.which("epmd") or "epmd", "-port", str(epmd_port), "-address", HOST],
                                   os.path.join(workdir, "epmd.log"))
            _wait_listening([(epmd, epmd_port, os.path.join(workdir, "epmd.log"))], "epmd", 10)
            with open(os.path.join(workdir, ".erlang.cookie"), "w") as f:
                f.write(os.urandom(16).hex())
            os.chmod(os.path.join(workdir, ".erlang.cookie"), 0o400)
            with open(os.path.join(workdir, "enabled_plugins"), "w") as f:
                f.write("[].\n")
            open(os.path.join(workdir, "rabbitmq-env.conf"), "w").close()
            for i in range(NODES):
                node_dir = os.path.join(workdir, f"node{i + 1}")
                os.mkdir(node_dir)
                conf = os.path.join(node_dir, "rabbitmq.conf")
                with open(conf, "w") as f:
                    f.write("\n".join([
                        f"listeners.tcp.default = {HOST}:{amqp[i]}",
                        "loopback_users.guest = true",
                        "cluster_formation.peer_discovery_backend = classic_config",
                        *(f"cluster_formation.classic_config.nodes.{j + 1} = {n}" for j, n in enumerate(names)),
                        "log.console = false",
                        "log.file.level = warning",
                        "disk_free_limit.absolute = 50MB",
                        "",
                    ]))
                env = {
                    "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                    "HOME": workdir,  # where the VM finds .erlang.cookie
                    "LANG": "C.UTF-8",
                    "ERL_EPMD_PORT": str(epmd_port),
                    "ERL_EPMD_ADDRESS": HOST,
                    "RABBITMQ_NODENAME": names[i],
                    "RABBITMQ_USE_LONGNAME": "false",
                    "RABBITMQ_NODE_IP_ADDRESS": HOST,
                    "RABBITMQ_NODE_PORT": str(amqp[i]),
                    "RABBITMQ_DIST_PORT": str(dist[i]),
                    "RABBITMQ_CONFIG_FILE": conf,
                    "RABBITMQ_CONF_ENV_FILE": os.path.join(workdir, "rabbitmq-env.conf"),
                    "RABBITMQ_ENABLED_PLUGINS_FILE": os.path.join(workdir, "enabled_plugins"),
                    "RABBITMQ_MNESIA_BASE": os.path.join(node_dir, "mnesia"),
                    "RABBITMQ_LOG_BASE": node_dir,
                    "RABBITMQ_LOGS": os.path.join(node_dir, "rabbit.log"),
                    "RABBITMQ_PID_FILE": os.path.join(node_dir, "rabbit.pid"),
                    "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS": ERL_ARGS,
                }
                log_path = os.path.join(node_dir, "console.log")
                proc = processes.start([RABBITMQ_SCRIPT], log_path, env)
                started.append((proc, amqp[i], log_path))
                if i == 0:
                    # The first node forms the cluster; the others, started together, join it.
                    # (Started all at once, each found the others still booting and formed alone.)
                    _wait_listening(started, "RabbitMQ", RABBITMQ_READY_TIMEOUT)
            _wait_listening(started, "RabbitMQ", RABBITMQ_READY_TIMEOUT)
            _check_cluster(names, env, len(names))
            yield Peer("RabbitMQ", amqp, [p.pid for p, _, _ in started])
        finally:
            processes.stop([p for p, _, _ in started] if started else [])  # the nodes, then their epmd
            processes.stop()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _check_cluster(names: list[str], env: dict[str, str], expected: int) -> None:
    """BenchError unless `rabbitmqctl cluster_status` on the first node lists every node running."""
    import json

    ctl = os.path.join(os.path.dirname(RABBITMQ_SCRIPT), "rabbitmqctl")
    try:
        shown = subprocess.run(_pinned([ctl, "-n", names[0], "cluster_status", "--formatter", "json"]),
                               env=env, capture_output=True, text=True, timeout=60)
        running = json.loads(shown.stdout).get("running_nodes", [])
    except (OSError, subprocess.TimeoutExpired, ValueError):
        running = []
    if len(running) != expected:
        raise BenchError(f"RabbitMQ: {len(running)} of {expected} nodes in one cluster "
                         f"({', '.join(running) or 'rabbitmqctl cluster_status failed'})")


@contextmanager
def nats_cluster() -> Iterator[Peer]:
    """Three nats-servers with JetStream, clustered on loopback; yields their client ports."""
    binary = nats_path()
    if binary is None:
        raise BenchError("nats-server is not installed (apt-get install nats-server; scripts/setup does)")
    workdir = tempfile.mkdtemp(prefix="haqueue-bench-nats-")
    try:
        processes = _Processes()
        try:
            ports = _distinct_free_ports(2 * NODES)
            client, route = ports[:NODES], ports[NODES:]
            started = []
            for i in range(NODES):
                conf = os.path.join(workdir, f"n{i + 1}.conf")
                routes = ", ".join(f'"nats-route://{HOST}:{p}"' for j, p in enumerate(route) if j != i)
                with open(conf, "w") as f:
                    f.write("\n".join([
                        f"server_name: n{i + 1}",
                        f"listen: {HOST}:{client[i]}",
                        "jetstream {",
                        f'  store_dir: "{os.path.join(workdir, f"n{i + 1}")}"',
                        "  max_memory_store: 268435456",
                        "  max_file_store: 4294967296",
                        "}",
                        "cluster {",
                        "  name: haqueue-bench",
                        f"  listen: {HOST}:{route[i]}",
                        f"  routes: [{routes}]",
                        "}",
                        "",
                    ]))
                log_path = os.path.join(workdir, f"n{i + 1}.log")
                proc = processes.start([binary, "-c", conf], log_path)
                started.append((proc, client[i], log_path))
            _wait_listening(started, "nats-server", NATS_READY_TIMEOUT)
            yield Peer("NATS", client, [p.pid for p, _, _ in started])
        finally:
            processes.stop()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
