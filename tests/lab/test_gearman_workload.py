"""The lab's Gearman workload (haqueue/lab/gearmanworkload.py) against real gearmand on loopback:
its history, judged by the queue's checker, is clean, and every submitted job was worked."""

from __future__ import annotations

import subprocess

from haqueue.lab.lab import wait_for
from tests.support.gearman import completed, drain_and_check, gearmand, lab_workload


def test_the_gearman_workload_records_a_history_the_queue_checker_passes(tmp_path):
    history, drained = tmp_path / "history.jsonl", tmp_path / "drain.jsonl"
    with gearmand() as server:
        run = subprocess.Popen(lab_workload("run", server.host, server.port, history,
                                            "--submit-rate", "200", "--work-rate", "100"))
        try:
            # Submits outpace the workers, so the drain has work left to do.
            assert wait_for(lambda: completed(history) >= 30, timeout=30)
        finally:
            run.terminate()
            assert run.wait(timeout=15) == 0
        result = drain_and_check(server.host, server.port, history, drained)
    counts = result["counts"]
    assert result["ok"], result["examples"]
    assert counts["puts_ok"] >= 30 and counts["lost"] == 0 and counts["remaining"] == 0
    assert counts["drained"] > 0
    assert counts["deliveries"] == counts["puts_ok"] + counts["puts_unknown_landed"]
