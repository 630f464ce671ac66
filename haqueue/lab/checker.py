"""Check a queue history, in the manner of Jepsen's total-queue checker.

Input: the workload's events (workload.py documents them) — the run's and the
drain's — plus the chaos runner's faults ({"t", "name", ...}). Pure: no I/O,
no clock; the same history always gives the same verdict.

What is counted (a job is identified by its put's unique body):
- lost: an acknowledged put (ok) whose job was never delivered, during the
  run or by the final drain.
- unexpected: a delivery of a body no put ever sent, or with an id other than
  the one its acknowledged put returned.
- duplicated: a job delivered more than once. Allowed, and counted by cause,
  when the earlier holder's reservation ended without a delete: its
  connection died (orphan release, docs/design.md I5) or its time-to-run passed
  (timeout). Anything else — delivered again after an acknowledged delete —
  is `duplicated_unexplained`, a violation.
- double reservation: two reservations of one job certainly live at once.
  A reservation is certainly live from its reserve's reply until the
  invocation of the delete that succeeded (or, without such a delete, until
  the reply of the last successful operation on the same connection). Two
  such intervals of one job on different connections that overlap: violation.
- indeterminate puts (`unknown`): landed when their body was delivered.
- drained: deliveries by the final drain; remaining: the server's job counts
  after it (all zero when the queue was emptied).

Failover, per fault: from the first failed operation at or after the fault
(connection errors and timeouts; a reserve that found the queue empty is not
a failure) to the first put acknowledged after that failure. Where nothing
failed the fault cost no availability (failover 0). Also the number of failed
operations and the longest gap between two acknowledged puts in the fault's
window (from the fault to the next one).

Client-visible gap: the longest time the workload got no acknowledged answer
(an `ok` of any operation: put, reserve or delete) through the VIP, over the
whole run and per fault (from the fault to the next one); it is what a client
of the service would call an outage, whatever Raft or keepalived were doing.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field

VIOLATIONS = ("lost", "unexpected", "double_reservations", "duplicated_unexplained")


@dataclass
class Op:
    id: int
    f: str
    worker: str
    invoke: float
    value: object = None
    type: str = "unknown"  # ok | fail | unknown (never completed counts as unknown)
    done: float | None = None
    conn: int | None = None
    result: dict = field(default_factory=dict)


@dataclass
class Delivery:
    body: str
    job_id: int
    conn: tuple[str, int]
    at: float  # the reserve's reply
    live_until: float  # certainly reserved until here
    deleted: float | None = None  # invocation of the delete that succeeded


def pair_ops(events: list[dict]) -> list[Op]:
    """Match each invoke with its completion (by op id); incomplete ones stay unknown."""
    ops: dict[tuple[str, int], Op] = {}
    for e in events:
        kind = e.get("type")
        if kind == "invoke":
            ops[(e["w"], e["i"])] = Op(id=e["i"], f=e["f"], worker=e["w"], invoke=e["t"], value=e.get("v"))
        elif kind in ("ok", "fail", "unknown") and (e.get("w"), e.get("i")) in ops:
            op = ops[(e["w"], e["i"])]
            op.type, op.done, op.conn = kind, e["t"], e.get("c")
            op.result = {k: v for k, v in e.items() if k not in ("type", "f", "v", "w", "c", "i", "t")}
    return sorted(ops.values(), key=lambda o: o.invoke)


def _deliveries(ops: list[Op]) -> list[Delivery]:
    by_conn: dict[tuple[str, int], list[Op]] = defaultdict(list)
    for op in ops:
        if op.conn is not None:
            by_conn[(op.worker, op.conn)].append(op)
    deliveries = []
    for conn, conn_ops in by_conn.items():
        conn_ops.sort(key=lambda o: o.invoke)
        for k, op in enumerate(conn_ops):
            if op.f != "reserve" or op.type != "ok":
                continue
            d = Delivery(body=op.result.get("body"), job_id=op.result.get("id"), conn=conn, at=op.done,
                         live_until=op.done)
            later = [o for o in conn_ops[k + 1:] if o.f == "delete" and o.value == d.job_id]
            deleted = next((o for o in later if o.type == "ok"), None)
            if deleted is not None:
                d.deleted = deleted.invoke
                d.live_until = deleted.invoke
            else:
                # Still held while the connection answered (TTR aside: see
                # workload.TTR), up to a delete of it that failed.
                gave_up = next((o.invoke for o in later if o.type == "fail"), None)
                following = [o.done for o in conn_ops[k + 1:] if o.type == "ok"
                             and (gave_up is None or o.done <= gave_up)]
                d.live_until = max([d.at, *following])
            deliveries.append(d)
    deliveries.sort(key=lambda d: d.at)
    return deliveries


def check(events: list[dict], faults: list[dict] | None = None, ttr: float | None = None) -> dict:
    """The verdict on a history: counts, examples and failover times."""
    ops = pair_ops(events)
    puts: dict[str, Op] = {}
    for op in ops:
        if op.f == "put":
            puts[op.value] = op
    deliveries = _deliveries(ops)
    by_body: dict[str, list[Delivery]] = defaultdict(list)
    for d in deliveries:
        by_body[d.body].append(d)

    unexpected = []
    for d in deliveries:
        put = puts.get(d.body)
        if put is None or put.type == "fail":
            unexpected.append(d.body)
        elif put.type == "ok" and put.result.get("id") != d.job_id:
            unexpected.append(d.body)
    acknowledged = [b for b, op in puts.items() if op.type == "ok"]
    lost = sorted(b for b in acknowledged if b not in by_body)
    unknown = [b for b, op in puts.items() if op.type == "unknown"]
    unknown_landed = sum(1 for b in unknown if b in by_body)

    dup = {"after_orphan": 0, "after_timeout": 0, "unexplained": 0}
    dup_examples = []
    double = []
    for body, ds in by_body.items():
        for i, d in enumerate(ds):
            for earlier in ds[:i]:
                if earlier.conn != d.conn and d.at <= earlier.live_until and earlier.at <= d.live_until:
                    double.append({"body": body, "job": d.job_id, "first": list(earlier.conn),
                                   "second": list(d.conn), "at": d.at})
            if i == 0:
                continue
            prev = ds[i - 1]
            if prev.deleted is not None and prev.deleted <= d.at:
                dup["unexplained"] += 1
                dup_examples.append(body)
            elif ttr is not None and d.at - prev.at >= ttr:
                dup["after_timeout"] += 1
            else:
                dup["after_orphan"] += 1

    drained = sum(1 for d in deliveries if d.conn[0].startswith("d"))
    remaining = next((e.get("v") for e in reversed(events) if e.get("type") == "remaining"), None)
    counts = {
        "operations": len(ops),
        "puts": len(puts),
        "puts_ok": len(acknowledged),
        "puts_failed": sum(1 for op in puts.values() if op.type == "fail"),
        "puts_unknown": len(unknown),
        "puts_unknown_landed": unknown_landed,
        "deliveries": len(deliveries),
        "lost": len(lost),
        "unexpected": len(unexpected),
        "duplicated": sum(dup.values()),
        "duplicated_after_orphan": dup["after_orphan"],
        "duplicated_after_timeout": dup["after_timeout"],
        "duplicated_unexplained": dup["unexplained"],
        "double_reservations": len(double),
        "drained": drained,
        "remaining": sum(remaining.values()) if isinstance(remaining, dict) else None,
    }
    result = {
        "counts": counts,
        "ok": all(counts[k] == 0 for k in VIOLATIONS),
        "examples": {"lost": lost[:10], "unexpected": unexpected[:10], "double_reservations": double[:10],
                     "duplicated_unexplained": dup_examples[:10]},
    }
    if faults is not None:
        result["faults"] = failovers(ops, faults)
        result["failover"] = summary([f["failover_s"] for f in result["faults"] if f["failover_s"] is not None])
        run_ops = [op for op in ops if not op.worker.startswith("d")]  # the drain is not the run
        result["client_gap"], per_fault = client_gaps(run_ops, faults)
        for fault, gap in zip(sorted(result["faults"], key=lambda f: f["t"]), per_fault):
            fault["client_gap_s"] = gap
    return result


def _is_failure(op: Op) -> bool:
    """The service failed this operation (I/O); an error reply from a serving leader is not that."""
    return op.type == "unknown" or (op.type == "fail" and bool(op.result.get("io")))


def failovers(ops: list[Op], faults: list[dict], acked: str = "put", failed=_is_failure) -> list[dict]:
    """Per fault: failover seconds (first failure -> first acknowledged `acked` op after it), longest gap.

    The id checker (idchecker.py) measures its gets the same way, with its own idea of a failure.
    """
    faults = sorted(faults, key=lambda f: f["t"])
    oks = sorted(op.done for op in ops if op.f == acked and op.type == "ok")
    failures = sorted((op for op in ops if failed(op) and op.done is not None), key=lambda o: o.done)
    out = []
    for i, fault in enumerate(faults):
        start = fault["t"]
        end = faults[i + 1]["t"] if i + 1 < len(faults) else math.inf
        in_window = [op for op in failures if start <= op.done < end]
        first = in_window[0] if in_window else None
        failover = None
        if first is None:
            failover = 0.0
        else:
            began = max(start, first.invoke)
            recovered = next((t for t in oks if t > first.done), None)
            if recovered is not None:
                failover = round(recovered - began, 4)
        window = [start] + [t for t in oks if start <= t < end]
        gaps = [b - a for a, b in zip(window, window[1:])]
        out.append({**fault, "failover_s": failover, "failed_ops": len(in_window),
                    f"longest_{acked}_gap_s": round(max(gaps, default=0.0), 4)})
    return out


def answer_gap(ops: list[Op], start: float | None = None, end: float | None = None) -> dict:
    """The longest stretch in [start, end] with no acknowledged answer: seconds, and when.

    Bounded by the first and last answers when start/end are None; a stretch
    that runs into `end` counts up to `end` (an outage the run ended in)."""
    oks = sorted(op.done for op in ops if op.type == "ok" and op.done is not None)
    if start is None:
        start = oks[0] if oks else None
    if end is None:
        end = oks[-1] if oks else None
    if start is None or end is None or end <= start:
        return {"gap_s": 0.0, "from": start, "to": start}
    marks = [start] + [t for t in oks if start < t < end] + [end]
    best = max(zip(marks, marks[1:]), key=lambda ab: ab[1] - ab[0])
    return {"gap_s": round(best[1] - best[0], 4), "from": round(best[0], 6), "to": round(best[1], 6)}


def client_gaps(ops: list[Op], faults: list[dict]) -> tuple[dict, list[float]]:
    """The run's longest answer gap (with the fault it began under, if any) and each fault's."""
    run = answer_gap(ops)
    faults = sorted(faults, key=lambda f: f["t"])
    during = [f for f in faults if run["from"] is not None and f["t"] <= run["from"]]
    run["fault"] = during[-1]["name"] if during else None
    last = max((op.done for op in ops if op.type == "ok" and op.done is not None), default=None)
    per_fault = []
    for i, fault in enumerate(faults):
        end = faults[i + 1]["t"] if i + 1 < len(faults) else last
        per_fault.append(answer_gap(ops, fault["t"], end)["gap_s"] if end is not None else 0.0)
    return run, per_fault


def percentile(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..100) of values; None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def summary(values: list[float]) -> dict:
    return {
        "n": len(values),
        "median": percentile(values, 50),
        "p99": percentile(values, 99),
        "max": max(values) if values else None,
    }
