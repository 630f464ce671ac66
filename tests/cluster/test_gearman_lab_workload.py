"""The lab's Gearman workload against a real three-node haqueue, its leader killed mid-run.

The chaos lab (root, namespaces) runs haqueue/lab/gearmanworkload.py through the VIP
and judges its history with the queue's checker. This runs the same workload and the
same checker on loopback, without root: submitters and workers through the VIP
(127.0.0.100) while the leader is SIGKILLed, then a drain. The checker must find
nothing lost and no job assigned to two live workers.
"""

from __future__ import annotations

import subprocess

from haqueue.lab.lab import wait_for
from haqueue.local_cluster import free_port_on_all
from tests.support.gearman import completed, drain_and_check, lab_workload

VIP = "127.0.0.100"


def test_the_lab_gearman_workload_loses_nothing_across_a_leader_kill(make_cluster, tmp_path):
    port = free_port_on_all(["127.0.0.11", "127.0.0.12", "127.0.0.13", VIP], 33000 - 1000)
    cluster = make_cluster(["-f0", "--gearman-port", str(port)])
    old = cluster.leader()
    history, drained = tmp_path / "history.jsonl", tmp_path / "drain.jsonl"
    run = subprocess.Popen(lab_workload("run", VIP, port, history, "--submit-rate", "100", "--work-rate", "60"))
    try:
        assert wait_for(lambda: completed(history) >= 20, 30), "no work before the kill"
        cluster.kill_node(old.id)
        before = completed(history)
        assert wait_for(lambda: completed(history) >= before + 20, 40), "no work on the new leader"
    finally:
        run.terminate()
        assert run.wait(timeout=30) == 0
    result = drain_and_check(VIP, port, history, drained)
    counts = result["counts"]
    assert result["ok"], result["examples"]
    assert counts["lost"] == 0 and counts["remaining"] == 0
    assert counts["puts_ok"] >= 40, counts
    assert counts["double_reservations"] == 0 and counts["duplicated_unexplained"] == 0, counts
