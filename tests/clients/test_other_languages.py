"""Clients in other languages drive a full job lifecycle: beanstalkd first, then haqueue.

Each client's script runs against real beanstalkd 1.12 too, so a failure on haqueue is a
difference between the servers, not a script that expects the wrong thing. Clients come
from Debian packages that scripts/setup installs (CI runs it); a machine without them skips
with the reason, unless HAQUEUE_REQUIRE_CLIENTS=1 makes that a failure.

- Ruby: beaneater 1.1.1 (ruby-beaneater), against a single node and through a 3-node
  loopback cluster's VIP: put with priority and delay, reserve, touch,
  release, bury, peek-buried, kick, delete, the delay's lower bound, pause-tube, stats,
  stats-job, stats-tube, list-tubes, reserve-with-timeout 0.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path
from types import SimpleNamespace

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
    found = ruby_with_beaneater()
    if found is None:
        if os.environ.get("HAQUEUE_REQUIRE_CLIENTS"):
            pytest.fail("ruby with beaneater is required (apt-get install ruby-beaneater)")
        pytest.skip("ruby-beaneater is not installed (scripts/setup installs it)")
    return found


def run_lifecycle(ruby: str, server) -> subprocess.CompletedProcess:
    return subprocess.run([ruby, str(HERE / "beaneater_lifecycle.rb"), f"{server.host}:{server.port}"],
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("start", [beanstalkd, haqueue], ids=["beanstalkd", "haqueue"])
def test_ruby_beaneater_drives_a_full_lifecycle(ruby, start):
    with start() as server:
        result = run_lifecycle(ruby, server)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip().endswith("lifecycle done")


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


def test_ruby_beaneater_drives_a_full_lifecycle_through_a_clusters_vip(ruby, tmp_path):
    with running_cluster(tmp_path) as cluster:
        vip, port = cluster.spec.vip_address, cluster.spec.nodes[0].client_port
        wait_accepting(vip, port)
        result = run_lifecycle(ruby, SimpleNamespace(host=vip, port=port))
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip().endswith("lifecycle done")
