"""Clients in other languages drive a full job lifecycle: beanstalkd first, then haqueue.

Each client's script runs against real beanstalkd 1.12 too, so a failure on haqueue is a
difference between the servers, not a script that expects the wrong thing. Clients come
from Debian packages that scripts/setup installs (CI runs it); a machine without them skips
with the reason, unless HAQUEUE_REQUIRE_CLIENTS=1 makes that a failure.

- Ruby: beaneater 1.1.1 (ruby-beaneater), against a single node and through a 3-node
  loopback cluster's VIP: put with priority and delay, reserve, touch,
  release, bury, peek-buried, kick, delete, the delay's lower bound, pause-tube, stats,
  stats-job, stats-tube, list-tubes, reserve-with-timeout 0.
- PHP: pheanstalk 4.0.4 (php-pda-pheanstalk, with php-cli), against a single node: the
  same lifecycle through its typed API.
- Node.js: node-beanstalk 1.6.7 (npm, pinned with its dependencies in node/package-lock.json;
  scripts/setup runs `npm ci` there, with Debian's nodejs and npm), against a single node and
  through a 3-node loopback cluster's VIP: the Ruby lifecycle plus ignore and
  list-tubes-watched, peek-ready/-delayed, kick-job, reserve-job, release with a delay, a
  reserve waiting on one connection answered by a put on another, list-tube-used, stats-tube
  of a missing tube; stats answers are parsed by the client's YAML parser (js-yaml).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

from tests.cluster.running import running_cluster
from tests.support.servers import beanstalkd, haqueue

HERE = Path(__file__).parent


def ruby_with_beaneater() -> str | None:
    ruby = shutil.which("ruby")
    if ruby is None:
        return None
    probe = subprocess.run([ruby, "-e", "require 'beaneater'"], capture_output=True, timeout=30)
    return ruby if probe.returncode == 0 else None


@pytest.fixture(scope="module")
def ruby() -> str:
    return required(ruby_with_beaneater(), "ruby with beaneater (ruby-beaneater)")


def php_with_pheanstalk() -> str | None:
    php = shutil.which("php")
    if php is None:
        return None
    probe = subprocess.run([php, "-r", "require_once 'Pheanstalk/autoload.php';"], capture_output=True,
                           timeout=30)
    return php if probe.returncode == 0 else None


def required(found: str | None, what: str) -> str:
    if found is None:
        if os.environ.get("HAQUEUE_REQUIRE_CLIENTS"):
            pytest.fail(f"{what} is required (scripts/setup installs it)")
        pytest.skip(f"{what} is not installed (scripts/setup installs it)")
    return found


@pytest.fixture(scope="module")
def php() -> str:
    return required(php_with_pheanstalk(), "php with pheanstalk (php-cli, php-pda-pheanstalk)")


NODE_CLIENT = HERE / "node"


def node_with_node_beanstalk() -> str | None:
    node = shutil.which("node")
    if node is None:
        return None
    probe = subprocess.run([node, "-e", "require.resolve('node-beanstalk')"], cwd=NODE_CLIENT,
                           capture_output=True, timeout=30)
    return node if probe.returncode == 0 else None


@pytest.fixture(scope="module")
def node() -> str:
    return required(node_with_node_beanstalk(),
                    "node with node-beanstalk (nodejs, npm; `npm ci` in tests/clients/node)")


def assert_lifecycle_passes(interpreter: str, script: str, host: str, port: int) -> None:
    result = subprocess.run([interpreter, str(HERE / script), f"{host}:{port}"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip().endswith("lifecycle done")


@pytest.mark.parametrize("start", [beanstalkd, haqueue], ids=["beanstalkd", "haqueue"])
def test_ruby_beaneater_drives_a_full_lifecycle(ruby, start):
    with start() as server:
        assert_lifecycle_passes(ruby, "beaneater_lifecycle.rb", server.host, server.port)


def wait_accepting(host: str, port: int, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection((host, port), timeout=0.5).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)  # polling the VIP listener, bounded by the deadline


def assert_lifecycle_passes_through_a_clusters_vip(interpreter: str, script: str,
                                                   workdir: Path) -> None:
    with running_cluster(workdir) as cluster:
        vip, port = cluster.spec.vip_address, cluster.spec.nodes[0].client_port
        wait_accepting(vip, port)
        assert_lifecycle_passes(interpreter, script, vip, port)


def test_ruby_beaneater_drives_a_full_lifecycle_through_a_clusters_vip(ruby, tmp_path):
    assert_lifecycle_passes_through_a_clusters_vip(ruby, "beaneater_lifecycle.rb", tmp_path)


@pytest.mark.parametrize("start", [beanstalkd, haqueue], ids=["beanstalkd", "haqueue"])
def test_php_pheanstalk_drives_a_full_lifecycle(php, start):
    with start() as server:
        assert_lifecycle_passes(php, "pheanstalk_lifecycle.php", server.host, server.port)


@pytest.mark.parametrize("start", [beanstalkd, haqueue], ids=["beanstalkd", "haqueue"])
def test_node_beanstalk_drives_a_full_lifecycle(node, start):
    with start() as server:
        assert_lifecycle_passes(node, "node/lifecycle.js", server.host, server.port)


def test_node_beanstalk_drives_a_full_lifecycle_through_a_clusters_vip(node, tmp_path):
    assert_lifecycle_passes_through_a_clusters_vip(node, "node/lifecycle.js", tmp_path)
