"""The running lab: haqueue and keepalived in each node namespace, and what they report.

`Lab.up()` builds the topology (topology.py), writes the lab's cluster file,
renders keepalived configs with the real `haqueue ops gen-keepalived`, mounts
each node's data directory as its own small filesystem (an ext4 image or a
tmpfs) and builds the fsync shim
(storage.py), starts one `haqueue serve -f0 -s JOURNAL_SIZE --disk-reserve off`
(durable, small journal so snapshots are frequent; with the sync-fault shim
preloaded, so storage faults can be injected) and one keepalived per node
namespace, and waits until
exactly the Raft leader holds the VIP. `Lab.down()` stops every process,
unmounts every data filesystem (a loop device goes with its mount), deletes
the images and removes every namespace the state file records.

The disk reserve (server/disk_reserve.py) is off: the lab's disk-full faults fill
a node's disk from outside, and what they test is ENOSPC's fatal path (the node
exits, naming the file, and the VIP moves). With the reserve on, a node at the
filled disk refuses puts and lives on until its journal outgrows the room it
preallocated (in the lab: still leading 10 s after the fill, 824 puts refused);
that is the reserve's own behaviour, tested on three nodes whose disks fill with
the backlog itself by tests/cluster/test_disk_reserve.py. The other storage
faults leave the disks room, so the reserve would not change them.

Rules:
- Processes are started with `ip netns exec NS ...` (which execs, so the PID
  recorded is the program's own) in a new session, and recorded with their
  start time: a process is signalled only if its PID still names the process
  this lab started (a recycled PID is left alone). keepalived is signalled by
  its process group, which holds its VRRP child and check scripts.
- Each keepalived start gets a fresh pid-file directory: a SIGKILLed VRRP child
  may linger as a zombie where nothing reaps it, and keepalived would take its
  old pid file for a running daemon.
- Waits poll a condition with a bound; nothing sleeps for synchronisation.
- Admin endpoints are asked from inside the client namespace (the root
  namespace has no route to the lab).
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

from haqueue import admin_client
from haqueue.config.cluster import Cluster, load_cluster
from haqueue.lab import storage, topology
from haqueue.lab.topology import LabState

DEFAULT_DIR = "/run/haqueue-lab"
NODE_IDS = ("n1", "n2", "n3")  # the default lab's members; a lab's own are Lab.node_ids
NODE_COUNTS = (3, 5)  # `lab up --nodes`: the sizes the lab's tests run; Raft wants an odd count
CLIENT_PORT = 11300
ID_PORT = 1200  # the id service on UDP (server/ids/udp.py): the chaos runs check it too
GEARMAN_PORT = 4730  # Gearman (server/gearman/service.py): likewise
DISKS = ("ext4", "tmpfs")  # each node's data filesystem (storage.py)
KEEPALIVED = shutil.which("keepalived") or "/usr/sbin/keepalived"


class LabError(RuntimeError):
    """The lab cannot do what was asked; the message is one line."""


def wait_for(predicate, timeout: float, step: float = 0.02):
    """Poll predicate until truthy (return its value) or timeout (return the last value)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() >= deadline:
            return value
        time.sleep(step)


def cluster_text(state: LabState, script_dir: str) -> str:
    lines = [
        "# The chaos lab's cluster (haqueue lab up). Addresses: 198.18.0.0/15, RFC 2544.",
        "[cluster]",
        'name = "lab"',
        f'vip = "{state.vip}/24"',
        f"client_port = {CLIENT_PORT}",
        f"id_port = {ID_PORT}",
        f"gearman_port = {GEARMAN_PORT}",
        f'secret = "lab-{secrets.token_hex(8)}"',
        "",
    ]
    for i, node_id in enumerate(state.nodes):
        lines += ["[[nodes]]", f'id = "{node_id}"', f'address = "{state.node_address(node_id)}"',
                  f'interface = "{topology.IFNAME}"', f"priority = {150 - 10 * i}", ""]
    lines += [
        # The id workload asks both modes: the built-in `counter` (exact) and this one.
        "[[id_rules]]",
        'name = "segment"',
        'format = "{counter:019}"',
        'mode = "segment"',
        "segment = 1000",
        "",
        "[keepalived]",
        "advert_int = 0.1",
        # The check script only curls /leader; nobody exists on every host,
        # so the lab needs no user of its own.
        'script_user = "nobody"',
        f'script_dir = "{script_dir}"',
        "",
    ]
    return "\n".join(lines)


@dataclass
class NodeView:
    """One node as the lab sees it right now."""

    id: str
    ns: str
    address: str
    haqueue_alive: bool
    keepalived_alive: bool
    holds_vip: bool
    status: dict | None  # the node's /status, None when unreachable

    @property
    def role(self) -> str:
        return self.status.get("role", "?") if self.status else "down"

    @property
    def serving(self) -> bool:
        return bool(self.status and self.status.get("serving"))


class Lab:
    def __init__(self, directory: str | Path = DEFAULT_DIR, prefix: str = "hqlab",
                 subnet: str = topology.DEFAULT_SUBNET, journal_size: int | None = None,
                 disk_mib: int | None = None, disk: str | None = None, nodes: int | None = None) -> None:
        self.dir = Path(directory)
        loaded = LabState.load(self.dir) if (self.dir / topology.STATE_NAME).exists() else None
        self.state = loaded or LabState(dir=str(self.dir), prefix=prefix, subnet=subnet)
        if loaded is None:
            if journal_size is not None:
                self.state.journal_size = journal_size
            if disk_mib is not None:
                self.state.disk_mib = disk_mib
            if disk is not None:
                if disk not in DISKS:
                    raise ValueError(f"--disk: {disk!r} is not one of {', '.join(DISKS)}")
                self.state.disk = disk
            if nodes is not None:
                if nodes not in NODE_COUNTS:
                    raise ValueError(f"--nodes: {nodes} is not one of {', '.join(map(str, NODE_COUNTS))}")
                self.state.nodes = [f"n{k}" for k in range(1, nodes + 1)]
        self.children: dict[str, subprocess.Popen] = {}  # processes this Python process started
        self.rounds: dict[str, int] = {}  # scenario -> faults of it injected by this process (alternation)

    # -------------------------------------------------------------- paths
    @property
    def node_ids(self) -> list[str]:
        """The cluster's members as the lab runs them (n1..nN, or as membership changes left them)."""
        return list(self.state.nodes)

    @property
    def config_path(self) -> Path:
        return self.dir / "cluster.toml"

    @property
    def keepalived_dir(self) -> Path:
        return self.dir / "keepalived"

    @property
    def cluster(self) -> Cluster:
        return load_cluster(self.config_path)

    @property
    def is_up(self) -> bool:
        return bool(self.state.namespaces or self.state.mounts)

    def log_path(self, name: str) -> Path:
        return self.dir / "logs" / f"{name}.log"

    def data_dir(self, node_id: str) -> Path:
        return self.dir / "data" / node_id

    @property
    def shim_path(self) -> Path:
        return self.dir / "slow_fsync.so"

    # ------------------------------------------------------------ up/down
    def up(self, timeout: float = 30.0) -> None:
        if self.is_up:
            raise LabError(f"a lab is already up (state in {self.state.path}); run `haqueue lab down` first")
        topology.check_subnet(self.state.subnet)
        storage.check_tools()
        self.dir.mkdir(parents=True, exist_ok=True)
        self.dir.chmod(0o755)  # keepalived runs the check script from here as nobody
        # A new cluster (new secret): an earlier lab's journals must not replay
        # into it, and its logs start empty so they describe this lab alone.
        for old in ("data", "disks", "logs", "run", "sync-control"):
            if old == "data":
                for node_id in self.node_ids:  # a disk a crashed lab left (not in any state file now)
                    storage.unmount(self.data_dir(node_id))
                storage.unmount(self.dir / "data")
            shutil.rmtree(self.dir / old, ignore_errors=True)
        (self.dir / "logs").mkdir()
        self.state.save()
        self.keepalived_dir.mkdir(exist_ok=True)
        self.config_path.write_text(cluster_text(self.state, str(self.keepalived_dir)))
        self.render_keepalived()
        storage.build_shim(self.dir)
        shared = self.dir / "data"
        self.state.mounts.append(str(shared))
        self.state.save()  # recorded before it exists, as the disks are; unmounted after them
        storage.make_shared_mount(shared)
        for node_id in self.node_ids:
            self.mount_disk(node_id)
        topology.build(self.state, self.node_ids)
        for node_id in self.node_ids:
            self.start_node(node_id)
        leader = wait_for(self.leader, timeout, step=0.05)
        if leader is None:
            raise LabError(f"no Raft leader within {timeout:g} s; logs in {self.dir / 'logs'}")
        for node_id in self.node_ids:
            self.start_keepalived(node_id)
        self.wait_stable(timeout)

    def mount_disk(self, node_id: str) -> None:
        """The node's data directory as its own filesystem of disk_mib (at `up`, or for a joining node)."""
        path = self.data_dir(node_id)
        self.state.mounts.append(str(path))
        self.state.save()  # recorded before it exists: `down` unmounts whatever a crash left
        if self.state.disk == "tmpfs":
            storage.mount_tmpfs(path, self.state.disk_mib)
        else:
            storage.mount_ext4(path, self.dir / "disks" / f"{node_id}.img", self.state.disk_mib)

    def render_keepalived(self) -> None:
        proc = subprocess.run(
            [sys.executable, "-m", "haqueue", "ops", "gen-keepalived", "--config", str(self.config_path),
             "-o", str(self.keepalived_dir)],
            capture_output=True, text=True,
        )
        if proc.returncode != 0:
            raise LabError(f"haqueue ops gen-keepalived failed: {proc.stderr.strip()}")

    def down(self) -> dict:
        """Stop every recorded process and remove every recorded namespace; say what went."""
        stopped = []
        for name, record in sorted(self.state.processes.items()):
            # The whole group: a node's forked snapshot writer is ours too.
            if self._signal_record({**record, "group": True}, signal.SIGKILL):
                stopped.append(name)
        for name, record in self.state.processes.items():
            self._wait_gone(name, record, 10)
        self.state.processes = {}
        unmounted = [path for path in reversed(self.state.mounts) if storage.unmount(path)]
        self.state.mounts = []
        shutil.rmtree(self.dir / "disks", ignore_errors=True)  # the ext4 images (in RAM under /run)
        removed = topology.destroy(self.state)
        self.state.path.unlink(missing_ok=True)
        return {"processes": stopped, "namespaces": removed, "mounts": unmounted}

    # ---------------------------------------------------------- processes
    def track(self, name: str, proc: subprocess.Popen, group: bool) -> None:
        """Record a started process in the state file, so `down` stops it whatever happens."""
        try:
            started = psutil.Process(proc.pid).create_time()
        except psutil.NoSuchProcess:
            started = 0.0
        self.children[name] = proc
        self.state.processes[name] = {"pid": proc.pid, "started": started, "group": group}
        self.state.save()

    def untrack(self, name: str) -> None:
        self.state.processes.pop(name, None)
        self.children.pop(name, None)
        self.state.save()

    @staticmethod
    def _ours(record: dict) -> psutil.Process | None:
        """The process if the recorded PID still names the one the lab started and it runs."""
        try:
            p = psutil.Process(record["pid"])
            if abs(p.create_time() - record["started"]) > 0.05 or p.status() == psutil.STATUS_ZOMBIE:
                return None
            return p
        except psutil.NoSuchProcess:
            return None

    def _signal_record(self, record: dict, sig: int) -> bool:
        if self._ours(record) is None:
            return False
        try:
            if record.get("group"):
                os.killpg(record["pid"], sig)
            else:
                os.kill(record["pid"], sig)
        except ProcessLookupError:
            return False
        return True

    def _wait_gone(self, name: str, record: dict, timeout: float) -> bool:
        child = self.children.get(name)
        if child is not None and child.pid == record["pid"]:
            try:
                child.wait(timeout=timeout)
                return True
            except subprocess.TimeoutExpired:
                return False
        return bool(wait_for(lambda: self._ours(record) is None, timeout))

    def alive(self, name: str) -> bool:
        record = self.state.processes.get(name)
        if record is None:
            return False
        child = self.children.get(name)
        if child is not None and child.pid == record["pid"]:
            return child.poll() is None and self._ours(record) is not None
        return self._ours(record) is not None

    def signal(self, name: str, sig: int) -> None:
        record = self.state.processes.get(name)
        if record is None or not self._signal_record(record, sig):
            raise LabError(f"{name} is not running")

    def signal_once(self, name: str, sig: int) -> None:
        """Signal the recorded process alone, not its group (keepalived reloads on a SIGHUP to its
        parent; its VRRP child and check scripts must not get one of their own)."""
        record = self.state.processes.get(name)
        if record is None or not self._signal_record({**record, "group": False}, sig):
            raise LabError(f"{name} is not running")

    def kill_group(self, name: str) -> None:
        """SIGKILL a process and everything in its process group (a node and its snapshot
        writer), as a power cut or systemd's cgroup kill would: nothing of it outlives it."""
        record = self.state.processes.get(name)
        if record is None or self._ours(record) is None:
            raise LabError(f"{name} is not running")
        try:
            os.killpg(record["pid"], signal.SIGKILL)  # started with its own session: pgid == pid
        except ProcessLookupError:
            raise LabError(f"{name} is not running") from None

    def wait_exit(self, name: str, timeout: float = 10.0) -> None:
        record = self.state.processes[name]
        if not self._wait_gone(name, record, timeout):
            raise LabError(f"{name} (pid {record['pid']}) did not exit within {timeout:g} s")

    def _spawn(self, name: str, ns: str, argv: list[str], group: bool) -> subprocess.Popen:
        with open(self.log_path(name), "ab") as log:
            proc = subprocess.Popen(["ip", "netns", "exec", ns, *argv], stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
        self.track(name, proc, group)
        return proc

    def start_node(self, node_id: str) -> None:
        if self.alive(node_id):
            return
        serve = [sys.executable, "-m", "haqueue", "serve", "--config", str(self.config_path), "--node", node_id,
                 "-b", str(self.data_dir(node_id)), "-f0", "-s", str(self.state.journal_size),
                 "--disk-reserve", "off"]  # the disk-full faults test ENOSPC (module docstring)
        argv = storage.node_argv(self.dir, node_id, self.shim_path, serve)
        self._spawn(node_id, self.state.node_ns(node_id), argv, group=False)

    def exit_code(self, node_id: str) -> int | None:
        """The exit status of a node this process started and saw exit (None if unknown)."""
        child = self.children.get(node_id)
        return None if child is None else child.poll()

    def last_log_line(self, name: str) -> str:
        try:
            lines = self.log_path(name).read_text(errors="replace").strip().splitlines()
        except FileNotFoundError:
            return ""
        return lines[-1] if lines else ""

    def start_keepalived(self, node_id: str) -> None:
        name = f"keepalived-{node_id}"
        if self.alive(name):
            return
        run = self.dir / "run" / f"{name}-{time.monotonic_ns()}"
        run.mkdir(parents=True)
        argv = [KEEPALIVED, "--dont-fork", "--log-console", "--log-detail", "--vrrp",
                "-f", str(self.keepalived_dir / f"keepalived-{node_id}.conf"),
                "-p", str(run / "keepalived.pid"), "-r", str(run / "vrrp.pid"), "-c", str(run / "checkers.pid")]
        self._spawn(name, self.state.node_ns(node_id), argv, group=True)

    # ------------------------------------------------------------ queries
    def node_status(self, node_id: str, timeout: float = 0.3) -> dict | None:
        address = self.state.node_address(node_id)
        port = self.cluster.node(node_id).admin_port
        try:
            return topology.in_namespace(self.state.client_ns, admin_client.status, address, port, timeout)
        except (OSError, ValueError):
            return None

    def vip_holders(self) -> list[str]:
        vip = self.state.vip
        return [n for n in self.node_ids if vip in topology.addresses(self.state.node_ns(n))]

    def view(self) -> list[NodeView]:
        holders = set(self.vip_holders())
        return [
            NodeView(
                id=n, ns=self.state.node_ns(n), address=self.state.node_address(n),
                haqueue_alive=self.alive(n), keepalived_alive=self.alive(f"keepalived-{n}"),
                holds_vip=n in holders, status=self.node_status(n) if self.alive(n) else None,
            )
            for n in self.node_ids
        ]

    def leader(self, exclude: str | None = None) -> str | None:
        """The one node serving clients, if exactly one does."""
        serving = [n for n in self.node_ids if n != exclude and self.alive(n)
                   and (self.node_status(n) or {}).get("serving")]
        return serving[0] if len(serving) == 1 else None

    def stable(self) -> str | None:
        """The leader's id when the lab is whole: every process up, one serving leader,
        the others following and caught up, and the VIP on the leader alone."""
        if not all(self.alive(n) and self.alive(f"keepalived-{n}") for n in self.node_ids):
            return None
        statuses = {n: self.node_status(n) for n in self.node_ids}
        if any(s is None for s in statuses.values()):
            return None
        leaders = [n for n, s in statuses.items() if s.get("serving")]
        if len(leaders) != 1:
            return None
        leader = leaders[0]
        commit = statuses[leader]["commit_index"]
        for n, s in statuses.items():
            if n != leader and (s.get("role") != "follower" or s.get("applied_index", 0) < commit - 500):
                return None
        if self.vip_holders() != [leader]:
            return None
        return leader

    def wait_stable(self, timeout: float = 30.0) -> str:
        leader = wait_for(self.stable, timeout, step=0.05)
        if leader is None:
            raise LabError(f"the lab did not settle within {timeout:g} s: {self.describe()}")
        return leader

    def describe(self) -> str:
        parts = []
        for v in self.view():
            parts.append(f"{v.id}: haqueue {'up' if v.haqueue_alive else 'down'} {v.role}"
                         f"{' serving' if v.serving else ''}, keepalived {'up' if v.keepalived_alive else 'down'}"
                         f"{', VIP' if v.holds_vip else ''}")
        return "; ".join(parts)
