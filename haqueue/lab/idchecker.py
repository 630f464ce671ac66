"""Check an id history (idworkload.py): no id handed out twice, ids increase in real time.

Pure, like checker.py: the same history and faults always give the same verdict.

- duplicates: one id acknowledged (code 0) to two requests of the same
  rule and app. The violation id_server's designs allow and haqueue's must not.
- monotonicity violations: two acknowledged requests A and B of one rule and
  app where A's reply came before B was sent, yet B's id is not greater.
  Both modes promise this (docs/id-service.md): exact mode commits each id in
  log order; segment mode serves blocks in order and a new leader starts past
  every block ever committed, and only the leader with a valid lease serves.
  So the check is real-time order (linearizability of a counter), not just
  per client.
- failover, per fault: from the first request that failed at or after the
  fault (no reply, or an error reply such as not_leader) to the first id
  acknowledged after it, as checker.failovers measures puts.
"""

from __future__ import annotations

from collections import defaultdict

from haqueue.lab.checker import Op, failovers, pair_ops, summary

VIOLATIONS = ("duplicates", "monotonicity_violations")
EXAMPLES = 5


def _unavailable(op: Op) -> bool:
    # Every error reply in the lab's workload means "not served now" (not_leader,
    # outcome unknown); a bad request would be the workload's own bug.
    return op.type in ("unknown", "fail")


def check(events: list[dict], faults: list[dict] | None = None) -> dict:
    ops = [op for op in pair_ops(events) if op.f == "get"]
    acked = [op for op in ops if op.type == "ok"]
    by_key: dict[str, list[Op]] = defaultdict(list)
    for op in acked:
        by_key[op.value].append(op)
    duplicates, out_of_order = [], []
    for key, got in by_key.items():
        seen: dict[int, Op] = {}
        for op in got:
            value = int(op.result["id"])
            if value in seen:
                duplicates.append({"key": key, "id": op.result["id"], "workers": [seen[value].worker, op.worker]})
            seen[value] = op
        out_of_order += _real_time_order(key, got)
    result = {
        "requests": len(ops),
        "acknowledged": len(acked),
        "failed": sum(op.type == "fail" for op in ops),
        "unknown": sum(op.type == "unknown" for op in ops),
        "duplicates": len(duplicates),
        "monotonicity_violations": len(out_of_order),
        "examples": {"duplicates": duplicates[:EXAMPLES], "monotonicity": out_of_order[:EXAMPLES]},
    }
    result["ok"] = all(result[name] == 0 for name in VIOLATIONS) and bool(acked)
    if faults:
        result["faults"] = failovers(ops, faults, acked="get", failed=_unavailable)
        result["failover"] = summary([f["failover_s"] for f in result["faults"] if f["failover_s"] is not None])
    return result


def _real_time_order(key: str, acked: list[Op]) -> list[dict]:
    """Pairs (A, B) with A.done < B.invoke and id(B) <= id(A).

    Sweep the requests by invocation, keeping the greatest id of those already
    answered: B violates when that greatest id is not below B's. O(n log n).
    """
    by_done = sorted(acked, key=lambda op: op.done)
    found, best, best_op, i = [], None, None, 0
    for op in sorted(acked, key=lambda op: op.invoke):
        while i < len(by_done) and by_done[i].done < op.invoke:
            value = int(by_done[i].result["id"])
            if best is None or value > best:
                best, best_op = value, by_done[i]
            i += 1
        if best is not None and int(op.result["id"]) <= best:
            found.append({"key": key, "earlier": best_op.result["id"], "earlier_done": best_op.done,
                          "later": op.result["id"], "later_invoked": op.invoke})
    return found
