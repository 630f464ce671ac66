"""Removing the leader of a real cluster under a steady put load works at the first
command (issue 27): the leader holds new entries until a follower holds its whole log,
then hands off (replication/membership.py). Real `haqueue serve` processes, the real CLI."""

from __future__ import annotations

import subprocess
import sys

from haqueue import admin_client
from tests.cluster.clients import client_for
from tests.cluster.workload import Workload, check_contents

LEADER_TIMEOUT = 15.0


def test_removing_the_leader_under_a_put_load_succeeds_at_the_first_command(make_cluster):
    cluster = make_cluster(["-f0"])
    old = cluster.leader()
    work = Workload(cluster, producers=3, consumers=0).start()
    try:
        assert work.wait_for_puts(old.id, 200, timeout=15), "load never got going"
        done = subprocess.run([sys.executable, "-m", "haqueue", "cluster", "remove-node", "--config",
                               str(cluster.config_path), "--id", old.id, "--write"],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        assert f"removed {old.id}" in done.stdout
        events = admin_client.status(old.address, old.admin_port, 2.0)["events"]
        kinds = [e["event"] for e in events]
        assert "leadership_hand_off_started" in kinds and "leadership_hand_off" in kinds, kinds
        assert "leadership_hand_off_failed" not in kinds, kinds
        handed = next(e for e in events if e["event"] == "leadership_hand_off")
        assert handed["held_ms"] < 1000  # bounded by an election timeout (0.6 s)
        cluster.stop_node(old.id)
        new = cluster.leader(timeout=LEADER_TIMEOUT)
        assert new is not None and new.id != old.id
        assert work.wait_for_puts(new.id, 100, timeout=15), "load did not resume on the next leader"
    finally:
        ledger = work.stop()
    assert not ledger.errors, ledger.errors
    with client_for(cluster, new.id) as client:
        assert check_contents(ledger, client) == []
