"""A three-node VRRP lab in network namespaces, running the rendered keepalived configs.

One switch namespace holds a bridge; each node namespace has `eth1` on it,
its address, a real HTTP leader endpoint (200 on /leader while this node's
flag file exists, 503 otherwise; it stands in for haqueue's admin port) and
a real keepalived started from the generated keepalived-ID.conf and check
script. Everything is created here and torn down in `close()`, pass or fail;
only processes this lab started are signalled, by PID.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from haqueue.config.cluster import Cluster, parse_cluster
from haqueue.lab.lab import wait_for
from haqueue.ops import keepalived
from tests.ops.keepalived_tools import KEEPALIVED, SCRIPT_UID

SUBNET = "198.18.7"  # RFC 2544 benchmark range: never a real network
VIP = f"{SUBNET}.100"

LEADER_ENDPOINT = r"""
import http.server, os, sys
flag, addr, port, ready = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        code = 200 if self.path == "/leader" and os.path.exists(flag) else 503
        self.send_response(code)
        self.send_header("Content-Length", "0")
        self.end_headers()
    def log_message(self, *a):
        pass
server = http.server.ThreadingHTTPServer((addr, port), H)
open(ready, "w").close()
server.serve_forever()
"""


def cluster_text(n: int = 3, advert_int: float = 0.1) -> str:
    text = f'[cluster]\nname = "lab"\nvip = "{VIP}/24"\nsecret = "s"\n'
    for i in range(1, n + 1):
        text += (
            f'[[nodes]]\nid = "n{i}"\naddress = "{SUBNET}.{10 + i}"\ninterface = "eth1"\n'
            f"priority = {160 - 10 * i}\n"
        )
    return text + f"[keepalived]\nadvert_int = {advert_int}\n"


@dataclass
class LabNode:
    id: str
    ns: str
    address: str
    flag: Path
    endpoint: subprocess.Popen | None = None
    keepalived: subprocess.Popen | None = None
    log: Path | None = None
    starts: int = 0


@dataclass
class Lab:
    root: Path
    cluster: Cluster = field(default_factory=lambda: parse_cluster(cluster_text()))
    tag: str = field(default_factory=lambda: secrets.token_hex(3))
    nodes: dict[str, LabNode] = field(default_factory=dict)
    namespaces: list[str] = field(default_factory=list)

    def ip(self, *args: str) -> None:
        subprocess.run(["ip", *args], check=True, capture_output=True)

    def start(self) -> None:
        switch = f"hqsw-{self.tag}"
        self.ip("netns", "add", switch)
        self.namespaces.append(switch)
        self.ip("-n", switch, "link", "add", "br0", "type", "bridge")
        self.ip("-n", switch, "link", "set", "br0", "up")
        files = {f.name: f.text for f in keepalived.render(self.cluster, None, "lab")}
        script_dir = self.root / "script-dir"
        script_dir.mkdir()
        script_dir.chmod(0o755)
        script = script_dir / keepalived.SCRIPT_NAME
        script.write_text(files[keepalived.SCRIPT_NAME])
        script.chmod(0o755)
        passwd = self.root / "passwd"
        group = self.root / "group"
        user = self.cluster.keepalived.script_user
        passwd.write_text(Path("/etc/passwd").read_text() + f"{user}:x:{SCRIPT_UID}:{SCRIPT_UID}::/:/bin/false\n")
        group.write_text(Path("/etc/group").read_text() + f"{user}:x:{SCRIPT_UID}:\n")
        self.mounts = [
            (script_dir, self.cluster.keepalived.script_dir),
            (passwd, "/etc/passwd"),
            (group, "/etc/group"),
        ]
        for i, node in enumerate(self.cluster.nodes):
            ns = f"hq{node.id}-{self.tag}"
            self.ip("netns", "add", ns)
            self.namespaces.append(ns)
            self.ip("-n", ns, "link", "set", "lo", "up")
            self.ip("-n", ns, "link", "add", "eth1", "type", "veth", "peer", "name", f"sw{i}", "netns", switch)
            self.ip("-n", ns, "addr", "add", f"{node.address}/24", "dev", "eth1")
            self.ip("-n", ns, "link", "set", "eth1", "up")
            self.ip("-n", switch, "link", "set", f"sw{i}", "master", "br0", "up")
            lab_node = LabNode(node.id, ns, node.address, self.root / f"{node.id}.leader")
            (self.root / f"keepalived-{node.id}.conf").write_text(files[keepalived.file_name(node)])
            self.nodes[node.id] = lab_node
            self.start_endpoint(lab_node)

    def start_endpoint(self, node: LabNode) -> None:
        ready = self.root / f"{node.id}.ready"
        ready.unlink(missing_ok=True)
        port = self.cluster.node(node.id).admin_port
        node.endpoint = subprocess.Popen(
            ["ip", "netns", "exec", node.ns, sys.executable, "-c", LEADER_ENDPOINT,
             str(node.flag), node.address, str(port), str(ready)]
        )
        assert wait_for(ready.exists, 10, step=0.01), f"{node.id}: leader endpoint did not start"

    def kill_endpoint(self, node_id: str) -> None:
        node = self.nodes[node_id]
        if node.endpoint and node.endpoint.poll() is None:
            node.endpoint.kill()
            node.endpoint.wait()

    def start_keepalived(self, node_id: str) -> None:
        node = self.nodes[node_id]
        # A fresh pid-file directory per start: a SIGKILLed VRRP child may stay
        # a zombie here (no init reaps it in a container), and keepalived
        # would take its old pid file for a running daemon.
        node.starts += 1
        run = self.root / f"run-{node_id}-{node.starts}"
        run.mkdir()
        node.log = self.root / f"keepalived-{node_id}.log"
        binds = " && ".join(f"mount --bind {src} {dst}" for src, dst in self.mounts)
        cmd = (
            f"{binds} && exec {KEEPALIVED} --dont-fork --log-console --log-detail --vrrp"
            f" -f {self.root}/keepalived-{node_id}.conf"
            f" -p {run}/keepalived.pid -r {run}/vrrp.pid -c {run}/checkers.pid"
        )
        with open(node.log, "ab") as log:
            node.keepalived = subprocess.Popen(
                ["ip", "netns", "exec", node.ns, "unshare", "--mount", "--propagation", "private",
                 "sh", "-c", cmd],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def signal_keepalived(self, node_id: str, sig: int) -> None:
        """Signal the keepalived parent (the process `exec`ed in place of sh) and wait for it."""
        proc = self.nodes[node_id].keepalived
        assert proc is not None
        if sig == signal.SIGKILL:
            # Kill the whole process group this lab started: with SIGKILL the
            # parent cannot stop its VRRP child, which would otherwise linger.
            os.killpg(proc.pid, signal.SIGKILL)
        else:
            proc.send_signal(sig)
        proc.wait(timeout=10)

    def make_leader(self, node_id: str | None) -> None:
        """Move 'Raft leadership': only node_id's endpoint answers 200 from now on."""
        for node in self.nodes.values():
            if node.id != node_id:
                node.flag.unlink(missing_ok=True)
        if node_id:
            self.nodes[node_id].flag.touch()

    def holders(self) -> list[str]:
        """The nodes whose eth1 carries the VIP right now."""
        found = []
        for node in self.nodes.values():
            out = subprocess.run(
                ["ip", "-n", node.ns, "-4", "-o", "addr", "show", "dev", "eth1"],
                capture_output=True,
                text=True,
            ).stdout
            if f" {VIP}/" in out:
                found.append(node.id)
        return found

    def wait_holders(self, expected: list[str], timeout: float) -> float:
        """Seconds until exactly `expected` hold the VIP; fail with who holds it otherwise."""
        start = time.monotonic()
        got = wait_for(lambda: self.holders() == expected, timeout, step=0.01)
        assert got, f"VIP holders {self.holders()} after {timeout} s, expected {expected}\n{self.logs()}"
        return time.monotonic() - start

    def logs(self) -> str:
        out = []
        for node in self.nodes.values():
            if node.log and node.log.exists():
                tail = node.log.read_text(errors="replace").splitlines()[-15:]
                out.append(f"--- {node.id}\n" + "\n".join(tail))
        return "\n".join(out)

    def close(self) -> None:
        for node in self.nodes.values():
            for proc in (node.keepalived, node.endpoint):
                if proc is None or proc.poll() is not None:
                    continue
                try:
                    if proc is node.keepalived:
                        os.killpg(proc.pid, signal.SIGKILL)
                    else:
                        proc.kill()
                except ProcessLookupError:
                    pass
                proc.wait(timeout=10)
        for ns in reversed(self.namespaces):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
