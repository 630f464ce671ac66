"""The history checker on hand-written histories: each violation found, each allowed case allowed."""

from __future__ import annotations

from haqueue.lab import checker


class History:
    """Builds workload-shaped events; time advances by 0.01 s per event unless given."""

    def __init__(self) -> None:
        self.events: list[dict] = []
        self.t = 100.0
        self.next_op = 0

    def _at(self, t: float | None) -> float:
        self.t = t if t is not None else self.t + 0.01
        return self.t

    def invoke(self, f: str, worker: str, conn: int, value=None, t=None) -> int:
        self.next_op += 1
        self.events.append({"type": "invoke", "f": f, "v": value, "w": worker, "c": conn, "i": self.next_op,
                            "t": self._at(t)})
        return self.next_op

    def complete(self, op: int, kind: str, f: str, worker: str, conn: int, value=None, t=None, **extra) -> None:
        self.events.append({"type": kind, "f": f, "v": value, "w": worker, "c": conn, "i": op, "t": self._at(t),
                            **extra})

    def put(self, body: str, job_id: int | None, kind: str = "ok", worker: str = "p0", conn: int = 1) -> None:
        op = self.invoke("put", worker, conn, body)
        extra = {"id": job_id} if kind == "ok" else {"err": "reply: ConnectionResetError", "io": True}
        self.complete(op, kind, "put", worker, conn, body, **extra)

    def reserve(self, body: str, job_id: int, worker: str = "c0", conn: int = 1) -> None:
        op = self.invoke("reserve", worker, conn)
        self.complete(op, "ok", "reserve", worker, conn, id=job_id, body=body)

    def delete(self, job_id: int, kind: str = "ok", worker: str = "c0", conn: int = 1) -> None:
        op = self.invoke("delete", worker, conn, job_id)
        extra = {} if kind == "ok" else {"err": "reply: ConnectionResetError", "io": True}
        self.complete(op, kind, "delete", worker, conn, job_id, **extra)

    def take(self, body: str, job_id: int, worker: str = "c0", conn: int = 1) -> None:
        self.reserve(body, job_id, worker, conn)
        self.delete(job_id, worker=worker, conn=conn)

    def check(self, **kwargs) -> dict:
        return checker.check(self.events, **kwargs)


def test_clean_history_has_no_violations():
    h = History()
    h.put("a", 1)
    h.put("b", 2)
    h.take("a", 1)
    h.take("b", 2, worker="d1-0")
    result = h.check()
    assert result["ok"]
    counts = result["counts"]
    assert (counts["lost"], counts["unexpected"], counts["duplicated"], counts["double_reservations"]) == (0, 0, 0, 0)
    assert counts["drained"] == 1  # taken by a drain worker (d...)


def test_acknowledged_put_never_delivered_is_lost():
    h = History()
    h.put("a", 1)
    h.put("b", 2)
    h.take("a", 1)
    result = h.check()
    assert result["counts"]["lost"] == 1
    assert result["examples"]["lost"] == ["b"]
    assert not result["ok"]


def test_delivery_of_a_body_never_put_is_unexpected():
    h = History()
    h.put("a", 1)
    h.take("a", 1)
    h.take("ghost", 7)
    result = h.check()
    assert result["counts"]["unexpected"] == 1
    assert not result["ok"]


def test_delivery_under_another_id_than_the_put_acknowledged_is_unexpected():
    h = History()
    h.put("a", 1)
    h.take("a", 2)
    assert h.check()["counts"]["unexpected"] == 1


def test_delivery_of_a_failed_put_is_unexpected():
    h = History()
    op = h.invoke("put", "p0", 1, "a")
    h.complete(op, "fail", "put", "p0", 1, "a", err="connect: TimeoutError", io=True)
    h.take("a", 1)
    assert h.check()["counts"]["unexpected"] == 1


def test_unknown_put_that_landed_is_neither_lost_nor_unexpected():
    h = History()
    h.put("a", None, kind="unknown")
    h.take("a", 1)
    counts = h.check()["counts"]
    assert counts["puts_unknown"] == 1 and counts["puts_unknown_landed"] == 1
    assert counts["lost"] == 0 and counts["unexpected"] == 0


def test_unknown_put_that_did_not_land_is_not_lost():
    h = History()
    h.put("a", None, kind="unknown")
    result = h.check()
    assert result["counts"]["puts_unknown_landed"] == 0
    assert result["counts"]["lost"] == 0
    assert result["ok"]


def test_put_invoked_but_never_completed_counts_as_unknown():
    h = History()
    h.invoke("put", "p0", 1, "a")
    assert h.check()["counts"]["puts_unknown"] == 1


def test_redelivery_after_the_holders_connection_died_is_an_allowed_duplicate():
    h = History()
    h.put("a", 1)
    h.reserve("a", 1, worker="c0", conn=1)
    h.delete(1, kind="unknown", worker="c0", conn=1)  # connection broke: orphan released
    h.take("a", 1, worker="c1", conn=1)
    result = h.check()
    assert result["counts"]["duplicated"] == 1
    assert result["counts"]["duplicated_after_orphan"] == 1
    assert result["counts"]["double_reservations"] == 0
    assert result["ok"]


def test_redelivery_after_time_to_run_is_a_timeout_duplicate():
    h = History()
    h.put("a", 1)
    h.reserve("a", 1, worker="c0")
    h.t += 200
    h.take("a", 1, worker="c1")
    result = h.check(ttr=120)
    assert result["counts"]["duplicated_after_timeout"] == 1
    assert result["ok"]


def test_redelivery_after_an_acknowledged_delete_is_an_unexplained_duplicate():
    h = History()
    h.put("a", 1)
    h.take("a", 1, worker="c0")
    h.take("a", 1, worker="c1")
    result = h.check()
    assert result["counts"]["duplicated_unexplained"] == 1
    assert not result["ok"]


def test_second_reservation_before_the_first_holder_deleted_is_a_double_reservation():
    h = History()
    h.put("a", 1)
    h.reserve("a", 1, worker="c0")
    h.reserve("a", 1, worker="c1")  # c0 still holds it: its delete below succeeds
    h.delete(1, worker="c0")
    h.delete(1, kind="fail", worker="c1")
    result = h.check()
    assert result["counts"]["double_reservations"] == 1
    assert result["examples"]["double_reservations"][0]["first"] == ["c0", 1]
    assert not result["ok"]


def test_second_reservation_while_the_first_holders_connection_still_answered_is_a_double_reservation():
    h = History()
    h.put("a", 1)
    h.put("b", 2)
    h.reserve("a", 1, worker="c0")
    h.reserve("a", 1, worker="c1")
    h.reserve("b", 2, worker="c0")  # c0's connection is alive after c1 got job 1
    assert h.check()["counts"]["double_reservations"] == 1


def test_failover_runs_from_the_first_failure_to_the_next_acknowledged_put():
    h = History()
    h.put("a", 1)  # t 100.02
    fault_t = h.t + 0.005
    op = h.invoke("put", "p0", 1, "b", t=100.10)
    h.complete(op, "unknown", "put", "p0", 1, "b", t=100.30, err="reply: ConnectionResetError", io=True)
    op = h.invoke("put", "p0", 2, "c", t=100.40)
    h.complete(op, "fail", "put", "p0", 2, "c", t=100.65, err="connect: TimeoutError", io=True)
    op = h.invoke("put", "p0", 3, "d", t=101.0)
    h.complete(op, "ok", "put", "p0", 3, "d", t=101.10, id=2)
    h.take("d", 2)
    result = h.check(faults=[{"t": fault_t, "name": "kill-leader", "node": "n1"}])
    (fault,) = result["faults"]
    assert abs(fault["failover_s"] - (101.10 - 100.10)) < 1e-9
    assert result["failover"]["n"] == 1


def test_fault_without_any_failed_operation_has_zero_failover():
    h = History()
    h.put("a", 1)
    fault_t = h.t
    op = h.invoke("reserve", "c0", 1)
    h.complete(op, "fail", "reserve", "c0", 1, err="TIMED_OUT")  # an empty queue is not an outage
    h.put("b", 2)
    h.take("a", 1)
    h.take("b", 2)
    (fault,) = h.check(faults=[{"t": fault_t, "name": "kill-keepalived", "node": "n1"}])["faults"]
    assert fault["failover_s"] == 0.0


def test_percentiles_are_nearest_rank():
    values = [float(v) for v in range(1, 101)]
    assert checker.percentile(values, 50) == 50.0
    assert checker.percentile(values, 99) == 99.0
    assert checker.summary(values)["max"] == 100.0
    assert checker.summary([]) == {"n": 0, "median": None, "p99": None, "max": None}


def test_the_client_visible_gap_is_the_longest_stretch_without_any_acknowledged_answer():
    h = History()
    h.put("a", 1)  # t 100.02
    h.reserve("a", 1, worker="c0")  # an acknowledged reserve is an answer too (t 100.04)
    h.put("b", None, kind="unknown")  # no answer: the gap goes on (t 100.06)
    op = h.invoke("delete", "c0", 1, 1, t=103.5)
    h.complete(op, "ok", "delete", "c0", 1, 1, t=103.5)  # the first answer after 100.04
    h.put("c", 3)  # t 103.51
    faults = [{"t": 100.05, "name": "kill-leader", "node": "n1"}, {"t": 103.505, "name": "eio-leader", "node": "n2"}]
    report = checker.check(h.events, faults)
    assert report["client_gap"]["gap_s"] == 3.46
    assert report["client_gap"]["fault"] is None  # it began before the kill
    kill, eio = report["faults"]
    assert kill["client_gap_s"] == 3.45 and eio["client_gap_s"] == 0.015  # to the last answer


def test_the_final_drain_is_not_part_of_the_client_visible_gap():
    h = History()
    h.put("a", 1)
    h.put("b", 2)
    op = h.invoke("reserve", "d1-0", 1, t=200.0)
    h.complete(op, "ok", "reserve", "d1-0", 1, id=1, body="a", t=200.0)
    report = checker.check(h.events, [])
    assert report["client_gap"]["gap_s"] == 0.02
