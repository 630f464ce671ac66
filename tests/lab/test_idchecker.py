"""The id checker on hand-written histories (haqueue/lab/idchecker.py), and the id workload
against a real node on loopback: its history passes the checker, and the checker catches a
duplicate and an id out of real-time order."""

from __future__ import annotations

import json
import subprocess
import sys

from haqueue.lab import idchecker
from haqueue.lab.lab import wait_for
from tests.support.servers import free_udp_port, start_haqueue


class IdHistory:
    """Builds idworkload-shaped events at explicit times."""

    def __init__(self) -> None:
        self.events: list[dict] = []
        self.op = 0

    def get(self, worker: str, invoke: float, done: float, kind: str = "ok", value: int | None = None,
            key: str = "counter/lab") -> None:
        self.op += 1
        self.events.append({"type": "invoke", "f": "get", "v": key, "w": worker, "i": self.op, "t": invoke})
        extra = {"id": f"{value:019}"} if kind == "ok" else {"err": "not_leader" if kind == "fail" else "timeout"}
        self.events.append({"type": kind, "f": "get", "v": key, "w": worker, "i": self.op, "t": done, **extra})


def test_increasing_ids_pass_and_concurrent_requests_may_come_back_in_any_order():
    h = IdHistory()
    h.get("a", 1.0, 1.1, value=1)
    h.get("b", 1.05, 1.2, value=3)  # overlaps the next one: either order is fine
    h.get("a", 1.15, 1.3, value=2)
    h.get("a", 1.4, 1.5, value=7)  # gaps are allowed (an unanswered request wasted ids)
    result = idchecker.check(h.events)
    assert result["ok"], result
    assert (result["acknowledged"], result["duplicates"], result["monotonicity_violations"]) == (4, 0, 0)


def test_an_id_handed_out_twice_is_a_duplicate():
    h = IdHistory()
    h.get("a", 1.0, 1.1, value=5)
    h.get("b", 2.0, 2.1, value=5)
    result = idchecker.check(h.events)
    assert not result["ok"]
    assert result["duplicates"] == 1
    assert result["examples"]["duplicates"][0]["workers"] == ["a", "b"]


def test_a_smaller_id_after_a_larger_one_was_answered_breaks_real_time_order():
    h = IdHistory()
    h.get("a", 1.0, 1.1, value=10)
    h.get("b", 1.2, 1.3, value=9)  # asked after 10 was answered, to another client
    h.get("b", 1.4, 1.5, value=11, key="counter/other")  # another app counts apart
    result = idchecker.check(h.events)
    assert result["monotonicity_violations"] == 1 and not result["ok"]
    example = result["examples"]["monotonicity"][0]
    assert (int(example["earlier"]), int(example["later"])) == (10, 9)


def test_failover_runs_from_the_first_refused_request_to_the_next_id():
    h = IdHistory()
    h.get("a", 1.0, 1.1, value=1)
    h.get("a", 2.0, 2.5, kind="unknown")
    h.get("a", 2.5, 2.6, kind="fail")
    h.get("a", 2.6, 2.9, value=2)
    result = idchecker.check(h.events, faults=[{"t": 1.9, "name": "kill-leader", "node": "n1"}])
    assert result["ok"]
    fault = result["faults"][0]
    assert fault["failover_s"] == 0.9 and fault["failed_ops"] == 2
    assert result["failover"]["n"] == 1


def test_the_id_workload_against_a_real_node_records_a_history_the_checker_passes(tmp_path):
    port = free_udp_port()
    server = start_haqueue("--id-port", str(port), data_dir=str(tmp_path / "data"))
    history = tmp_path / "ids.jsonl"
    workload = subprocess.Popen([sys.executable, "-m", "haqueue.lab.idworkload", "--host", "127.0.0.1",
                                 "--port", str(port), "--history", str(history), "--clients", "3",
                                 "--rate", "200", "--rules", "counter"])
    try:
        def acknowledged() -> int:
            return history.read_text().count('"type":"ok"') if history.exists() else 0

        assert wait_for(lambda: acknowledged() >= 60, timeout=20)
    finally:
        workload.terminate()
        assert workload.wait(timeout=10) == 0
        server.stop()
    events = [json.loads(line) for line in history.read_text().splitlines()]
    result = idchecker.check(events)
    assert result["ok"], result
    assert result["acknowledged"] >= 60 and result["unknown"] == 0
    assert {e["w"] for e in events} == {"id0", "id1", "id2"}
