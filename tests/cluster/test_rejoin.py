"""A follower cut off by a real network partition rejoins without deposing the leader.

Runs `scripts/measure-failover --rejoin`, which builds a network-namespace lab
(one namespace per node, a bridge in a switch namespace; all deleted at the
end), cuts a follower's link under a put load, heals it, and reports whether
the leader's term changed and how many client connections were dropped.
Without pre-vote in pysyncobj every heal deposed the leader and dropped all
clients (docs/pysyncobj.md D9).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "measure-failover"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.root,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root to create network namespaces"),
    pytest.mark.skipif(shutil.which("ip") is None, reason="needs iproute2's ip"),
]


def test_follower_healed_after_a_partition_rejoins_without_deposing_the_leader(tmp_path):
    proc = subprocess.Popen(
        [sys.executable, str(SCRIPT), "--rejoin", "2", "--partition", "1.5", "--settle", "0.5",
         "--producers", "2", "--dir", str(tmp_path / "lab"), "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        out, err = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.terminate()  # the script stops its nodes and deletes its namespaces
            proc.communicate(timeout=40)
    assert proc.returncode == 0, err[-2000:]
    report = json.loads(out)
    assert report["heals"] == 2
    assert [(r["deposed"], r["clients_dropped"]) for r in report["rounds"]] == [(False, 0), (False, 0)], report
    assert report["put_gap_after_heal"]["max"] < 0.5
