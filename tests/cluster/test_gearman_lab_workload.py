"""The lab's Gearman workload against a real three-node haqueue, its leader killed mid-run.

The chaos lab (root, namespaces) runs haqueue/lab/gearmanworkload.py through the VIP
and judges its history with the queue's checker. This runs the same workload and the
same checker on loopback, without root: submitters and workers through the VIP
(127.0.0.100) while the leader is SIGKILLed, then a drain. The checker must find
nothing lost and no job assigned to two live workers.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from haqueue.lab import checker
from haqueue.local_cluster import free_port_on_all

VIP = "127.0.0.100"


def workload(mode: str, port: int, history: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "haqueue.lab.gearmanworkload", mode, "--host", VIP, "--port", str(port),
            "--history", str(history), *extra]


def count(history: Path, text: str) -> int:
    return history.read_text().count(text) if history.exists() else 0


def wait_until(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_the_lab_gearman_workload_loses_nothing_across_a_leader_kill(make_cluster, tmp_path):
    port = free_port_on_all(["127.0.0.11", "127.0.0.12", "127.0.0.13", VIP], 33000 - 1000)
    cluster = make_cluster(["-f0", "--gearman-port", str(port)])
    old = cluster.leader()
    history, drained = tmp_path / "history.jsonl", tmp_path / "drain.jsonl"
    run = subprocess.Popen(workload("run", port, history, "--submit-rate", "100", "--work-rate", "60"))
    try:
        wait_until(lambda: count(history, '"type":"ok","f":"delete"') >= 20, 30, "work before the kill")
        cluster.kill_node(old.id)
        before = count(history, '"type":"ok","f":"delete"')
        wait_until(lambda: count(history, '"type":"ok","f":"delete"') >= before + 20, 40,
                   "work on the new leader")
    finally:
        run.terminate()
        assert run.wait(timeout=30) == 0
    done = subprocess.run(workload("drain", port, drained), capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    events = [json.loads(line) for path in (history, drained) for line in path.read_text().splitlines()]
    result = checker.check(events)
    counts = result["counts"]
    assert result["ok"], result["examples"]
    assert counts["lost"] == 0 and counts["remaining"] == 0
    assert counts["puts_ok"] >= 40, counts
    assert counts["double_reservations"] == 0 and counts["duplicated_unexplained"] == 0, counts
