"""Shared by the host-side ops tests: run the commands, compare golden files, build namespaces.

Golden files live in tests/ops/golden_host/. After an intended change to a
generator, rewrite them with `HAQUEUE_REWRITE_GOLDEN=1 pytest tests/ops` and
review the diff (the etcd-raft habit: behaviour changes are reviewed as diffs).
"""

from __future__ import annotations

import ipaddress
import os
import selectors
import shutil
import subprocess
import sys
import time
import contextlib
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from click.testing import CliRunner, Result

# Load the CLI the way `haqueue` does (main loads the ops group, which adds both halves).
from haqueue.cli.main import cli

HERE = Path(__file__).parent
GOLDEN = HERE / "golden_host"
REPO = HERE.parent.parent
CLUSTER = GOLDEN / "cluster.toml"
# As typed on the command line: the header records it, so golden files need the same path.
CLUSTER_ARG = "tests/ops/golden_host/cluster.toml"
REWRITE = os.environ.get("HAQUEUE_REWRITE_GOLDEN") == "1"

NOT_ROOT = os.geteuid() != 0
NOT_ROOT_REASON = "needs root to create network namespaces"


def run(*args: str) -> Result:
    """Run `haqueue ops ARGS` in-process from the repository root; exceptions are not swallowed."""
    with contextlib.chdir(REPO):
        return CliRunner().invoke(cli, ["ops", *args], catch_exceptions=False)


def assert_one_line_error(result: Result, *fragments: str) -> None:
    assert result.exit_code != 0, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.output
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def tree(directory: Path) -> dict[str, str]:
    return {
        str(p.relative_to(directory)): p.read_text(encoding="utf-8")
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }


def assert_matches_golden(actual_dir: Path, golden_dir: Path) -> None:
    """Every file, byte for byte, and no file more or less; rewrite on request."""
    actual = tree(actual_dir)
    if REWRITE:
        for old in golden_dir.rglob("*"):
            if old.is_file():
                old.unlink()
        for name, text in actual.items():
            (golden_dir / name).parent.mkdir(parents=True, exist_ok=True)
            (golden_dir / name).write_text(text, encoding="utf-8")
    expected = tree(golden_dir)
    assert sorted(actual) == sorted(expected)
    for name in expected:
        assert actual[name] == expected[name], f"{name} differs from {golden_dir / name}"


# -- network namespaces ------------------------------------------------------

_counter = 0


@contextmanager
def netns() -> Iterator[str]:
    """A fresh, empty network namespace (only lo, down), removed on exit, pass or fail."""
    from pyroute2 import netns as pnetns

    global _counter
    _counter += 1
    name = f"hqhost-{os.getpid()}-{_counter}"
    pnetns.create(name)
    try:
        yield name
    finally:
        pnetns.remove(name)


def ipr(name: str):
    from pyroute2 import IPRoute

    return IPRoute(netns=name)


def add_veth(ns: str, ifname: str, address: str | None, up: bool = True) -> None:
    """A veth pair with both ends inside `ns`: `ifname` gets the address, its peer keeps carrier up."""
    with ipr(ns) as ip:
        ip.link("add", ifname=ifname, kind="veth", peer={"ifname": f"{ifname}p"})
        idx = ip.link_lookup(ifname=ifname)[0]
        peer = ip.link_lookup(ifname=f"{ifname}p")[0]
        lo = ip.link_lookup(ifname="lo")[0]
        ip.link("set", index=lo, state="up")
        ip.link("set", index=peer, state="up")
        if up:
            ip.link("set", index=idx, state="up")
        if address:
            iface = ipaddress.IPv4Interface(address)
            ip.addr("add", index=idx, address=str(iface.ip), prefixlen=iface.network.prefixlen)


def add_address(ns: str, ifname: str, address: str) -> None:
    iface = ipaddress.IPv4Interface(address)
    with ipr(ns) as ip:
        idx = ip.link_lookup(ifname=ifname)[0]
        ip.addr("add", index=idx, address=str(iface.ip), prefixlen=iface.network.prefixlen)


def set_sysctls(ns: str, values: dict[str, str]) -> None:
    """Write sysctls inside the namespace (only per-namespace keys are visible there)."""
    for key, value in values.items():
        path = "/proc/sys/" + key.replace(".", "/")
        subprocess.run(["ip", "netns", "exec", ns, "sh", "-c", 'printf "%s\n" "$2" > "$1"', "sh", path, value],
                       check=True)


NO_SYSCTL = shutil.which("sysctl") is None
NO_SYSCTL_REASON = "sysctl(8) is not installed (apt-get install procps)"


def in_netns(ns: str, argv: list[str], timeout: float = 20) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", "netns", "exec", ns, *argv], capture_output=True, text=True,
                          timeout=timeout, cwd=REPO)


def ops_in_netns(ns: str, *args: str) -> subprocess.CompletedProcess:
    """`python -m haqueue ops ARGS` as a separate process inside the namespace."""
    return in_netns(ns, [sys.executable, "-m", "haqueue", "ops", *args])


class NetnsProcess:
    """A process started inside a namespace; stopped by its PID."""

    def __init__(self, ns: str, argv: list[str]) -> None:
        self.proc = subprocess.Popen(["ip", "netns", "exec", ns, *argv], stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, cwd=REPO)

    def readline(self, timeout: float = 10) -> str:
        """The first line of output (select() cannot see data already in Python's buffer,
        so this is only for processes that print one line and then nothing)."""
        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ)
        try:
            if not sel.select(timeout):
                raise TimeoutError(f"no output from {self.proc.args} within {timeout}s")
            return self.proc.stdout.readline()
        finally:
            sel.close()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.proc.stdout.close()


_ADMIN_SERVER = (
    "import http.server, sys\n"
    "status = int(sys.argv[2])\n"
    "class H(http.server.BaseHTTPRequestHandler):\n"
    "    def do_GET(self):\n"
    "        code = status if self.path == '/leader' else 404\n"
    "        self.send_response(code); self.send_header('Content-Length', '0'); self.end_headers()\n"
    "    def log_message(self, *a):\n"
    "        pass\n"
    "srv = http.server.ThreadingHTTPServer((sys.argv[1], 0), H)\n"
    "print(srv.server_address[1], flush=True)\n"
    "srv.serve_forever()\n"
)


@contextmanager
def admin_endpoint(ns: str, address: str, leader_status: int) -> Iterator[int]:
    """A stand-in for the node's admin HTTP server: GET /leader answers `leader_status`.

    Bound to port 0 inside the namespace; yields the port it got.
    """
    proc = NetnsProcess(ns, [sys.executable, "-c", _ADMIN_SERVER, address, str(leader_status)])
    try:
        line = proc.readline()
        yield int(line)
    finally:
        proc.stop()


@contextmanager
def keepalived(ns: str, workdir: Path) -> Iterator[int]:
    """Real keepalived running in the namespace with an empty configuration; yields its PID."""
    conf = workdir / "keepalived.conf"
    conf.write_text("global_defs {\n    router_id haqueue-test\n}\n")
    pidfile = workdir / "keepalived.pid"
    log = (workdir / "keepalived.log").open("w")
    # `ip netns exec` execs keepalived, so the child's PID is keepalived's.
    proc = subprocess.Popen(["ip", "netns", "exec", ns, "keepalived", "--dont-fork", "--log-console",
                             "--vrrp", "-f", str(conf), "-p", str(pidfile), "-r", str(workdir / "vrrp.pid")],
                            stdout=log, stderr=subprocess.STDOUT)
    try:
        # keepalived writes its pid file once it is up: wait for that, not for time.
        deadline = time.monotonic() + 10
        while not (pidfile.exists() and pidfile.read_text().strip() == str(proc.pid)):
            if proc.poll() is not None:
                raise RuntimeError(f"keepalived exited with {proc.returncode}: "
                                   f"{(workdir / 'keepalived.log').read_text()}")
            if time.monotonic() > deadline:
                raise TimeoutError("keepalived did not write its pid file within 10s")
            time.sleep(0.02)
        yield proc.pid
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        log.close()
