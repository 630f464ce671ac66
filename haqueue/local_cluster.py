"""A haqueue cluster on loopback (three nodes, or five): for the demo, the tests and bench.

Nodes listen on distinct loopback addresses (127.0.0.11, .12, .13, and .14,
.15 for five — Linux routes all of 127.0.0.0/8 to lo), sharing ports as a real
deployment would.
Each node is a real `haqueue serve --config FILE --node ID` process with its
own data directory and log file. Processes are stopped by PID only.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from haqueue import admin_client
from haqueue.config.cluster import Cluster, load_cluster

LOOPBACK_BASE = 11  # 127.0.0.11, .12, ...


def free_port_on_all(addresses: list[str], start: int) -> int:
    """A port free on every address, searching upward from `start`."""
    for port in range(start, 65000):
        ok = True
        for address in addresses:
            probe = socket.socket()
            try:
                probe.bind((address, port))
            except OSError:
                ok = False
                break
            finally:
                probe.close()
        if ok:
            return port
    raise RuntimeError("no free port")


def write_cluster_file(path: Path, nodes: int = 3, client_port: int = 11300, secret: str = "local-demo",
                       name: str = "local", pick_free: bool = True) -> Path:
    addresses = [f"127.0.0.{LOOPBACK_BASE + i}" for i in range(nodes)]
    if pick_free:
        client_port = free_port_on_all(addresses, client_port)
        raft_port = free_port_on_all(addresses, client_port + 100)
        admin_port = free_port_on_all(addresses, client_port + 200)
    else:
        raft_port, admin_port = client_port + 100, client_port + 200
    lines = [
        "# A local haqueue cluster on loopback (written by haqueue up).",
        "[cluster]",
        f'name = "{name}"',
        'vip = "127.0.0.100/8"',
        f"client_port = {client_port}",
        f"raft_port = {raft_port}",
        f"admin_port = {admin_port}",
        f'secret = "{secret}"',
        "",
    ]
    for i, address in enumerate(addresses):
        lines += ["[[nodes]]", f'id = "n{i + 1}"', f'address = "{address}"', 'interface = "lo"',
                  f"priority = {150 - 10 * i}", ""]
    path.write_text("\n".join(lines))
    return path


@dataclass
class LocalNode:
    id: str
    process: subprocess.Popen | None = None
    log_path: Path | None = None


@dataclass
class LocalCluster:
    workdir: Path
    config_path: Path
    serve_args: list[str] = field(default_factory=list)
    nodes: dict[str, LocalNode] = field(default_factory=dict)
    # Per node, an argv prefix for `haqueue serve` (e.g. ip netns exec NS, to
    # run a node in a network namespace of a lab).
    launch_prefix: dict[str, list[str]] = field(default_factory=dict)

    @classmethod
    def create(cls, workdir: Path, nodes: int = 3, serve_args: list[str] | None = None,
               client_port: int = 11300) -> "LocalCluster":
        workdir = Path(workdir)
        workdir.mkdir(parents=True, exist_ok=True)
        config = write_cluster_file(workdir / "cluster.toml", nodes=nodes, client_port=client_port)
        return cls(workdir=workdir, config_path=config, serve_args=list(serve_args or []))

    @property
    def spec(self) -> Cluster:
        return load_cluster(self.config_path)

    def start(self) -> None:
        for member in self.spec.nodes:
            self.start_node(member.id)

    def start_node(self, node_id: str) -> LocalNode:
        node = self.nodes.setdefault(node_id, LocalNode(node_id))
        if node.process is not None and node.process.poll() is None:
            return node
        data_dir = self.workdir / node_id
        node.log_path = self.workdir / f"{node_id}.log"
        log = open(node.log_path, "ab")
        node.process = subprocess.Popen(
            [*self.launch_prefix.get(node_id, []), sys.executable, "-m", "haqueue", "serve",
             "--config", str(self.config_path), "--node", node_id, "-b", str(data_dir), *self.serve_args],
            stdout=log, stderr=log, stdin=subprocess.DEVNULL,
        )
        log.close()
        return node

    def signal_node(self, node_id: str, sig: int) -> None:
        node = self.nodes[node_id]
        if node.process is not None and node.process.poll() is None:
            os.kill(node.process.pid, sig)

    def kill_node(self, node_id: str) -> None:
        self.signal_node(node_id, signal.SIGKILL)
        self.nodes[node_id].process.wait(timeout=10)

    def stop_node(self, node_id: str, timeout: float = 10) -> None:
        node = self.nodes.get(node_id)
        if node is None or node.process is None:
            return
        if node.process.poll() is None:
            node.process.send_signal(signal.SIGCONT)
            node.process.terminate()
            try:
                node.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                node.process.kill()
                node.process.wait(timeout=5)

    def stop(self) -> None:
        for node_id in list(self.nodes):
            self.stop_node(node_id)

    def alive(self, node_id: str) -> bool:
        node = self.nodes.get(node_id)
        return node is not None and node.process is not None and node.process.poll() is None

    def leader(self, timeout: float = 10.0, exclude: str | None = None):
        """The node serving clients, once exactly one does; None after `timeout`."""
        deadline = time.monotonic() + timeout
        spec = self.spec
        while time.monotonic() < deadline:
            serving = [m for m in spec.nodes
                       if m.id != exclude and self.alive(m.id)
                       and admin_client.is_leader(m.address, m.admin_port, 0.3)]
            if len(serving) == 1:
                return serving[0]
            time.sleep(0.05)
        return None

    def log_tail(self, node_id: str, lines: int = 20) -> str:
        node = self.nodes.get(node_id)
        if node is None or node.log_path is None or not node.log_path.exists():
            return ""
        return "\n".join(node.log_path.read_text(errors="replace").splitlines()[-lines:])
