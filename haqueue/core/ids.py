"""IdState: the id service's deterministic state machine (issue 15, exact mode).

Per (rule, app) it keeps the cycle the counter is in, the highest value handed
out in it (`high`) and the latest time it was used; `reserve` hands out the
next `n` values. Everything is integer arithmetic on the entry's arguments
and its stamp (the leader's wall clock, I2): the same log gives the same
counters on every node, and no clock or I/O is read here. The id string is
not state: the leader renders it from the values and the time a reservation
returns (idrules.IdRule.render), so the date in an id and the cycle its
counter belongs to always come from the same instant (id_server took them
from two clock readings, a second apart at a boundary: shared/id-service.md §1.7).

What keeps an id from ever coming round twice (id_server's ways of repeating
one, each closed):
- time never goes back per key: `now = max(stamp, last)`, so a new leader
  with a slow clock cannot return to an earlier cycle;
- a counter never wraps inside a cycle: past max_counter the answer is
  EXHAUSTED until the next cycle;
- the high-water mark is part of the replicated state, so every reservation
  a reply reported is in the log (reply after commit, I1): no asynchronous
  save to lose, nothing to restore from a lagging replica;
- keys are (rule, app) pairs, never a joined string.

`step` and `offset` divide one id space between independent clusters, as
id_server's nodes divided it: every value v has v ≡ offset (mod step).
"""

from __future__ import annotations

import pickle

from haqueue.core.idrules import IdRule, RuleError, seed_rules
from haqueue.core.results import BAD_ARGUMENTS, TOO_MANY_APPS, UNKNOWN_RULE, Tag

IDS_FORMAT_VERSION = 1
MAX_APPS_PER_RULE = 10_000
MAX_RESERVE = 1_000  # values one reservation may take


_CYCLE, _HIGH, _LAST = 0, 1, 2  # a counter: [cycle, highest value handed out, last time (ms)]


class IdState:
    def __init__(self, rules: tuple[IdRule, ...] | None = None, *, step: int = 1, offset: int = 0,
                 max_apps_per_rule: int = MAX_APPS_PER_RULE) -> None:
        if step < 1 or not 0 <= offset < step:
            raise RuleError(f"id service: needs step >= 1 and 0 <= offset < step (got {step}, {offset})")
        self.rules: dict[str, IdRule] = {r.name: r for r in (seed_rules() if rules is None else rules)}
        self.step = step
        self.offset = offset
        self.max_apps_per_rule = max_apps_per_rule
        self.counters: dict[tuple[str, str], list[int]] = {}
        self.apps: dict[str, int] = {}  # keys per rule, for the cap

    def first_value(self, rule: IdRule) -> int:
        """The smallest v >= min_counter with v ≡ offset (mod step)."""
        return rule.min_counter + (self.offset - rule.min_counter) % self.step

    # ------------------------------------------------------------------ apply
    def reserve(self, rule_name: str, app: str, n: int, stamp: int) -> tuple:
        """Hand out up to n values: (RESERVED, first, count, step, now_ms),
        (EXHAUSTED, cycle_end_ms), UNKNOWN_RULE, TOO_MANY_APPS or BAD_ARGUMENTS (core/results.py)."""
        if (type(rule_name) is not str or type(app) is not str or type(n) is not int
                or type(stamp) is not int or not 1 <= n <= MAX_RESERVE):
            return BAD_ARGUMENTS
        rule = self.rules.get(rule_name)
        if rule is None:
            return UNKNOWN_RULE
        key = (rule_name, app)
        counter = self.counters.get(key)
        if counter is None:
            if self.apps.get(rule_name, 0) >= self.max_apps_per_rule:
                return TOO_MANY_APPS
            self.apps[rule_name] = self.apps.get(rule_name, 0) + 1
            counter = self.counters[key] = [rule.cycle(stamp), self.first_value(rule) - self.step, stamp]
        now = counter[_LAST] = max(stamp, counter[_LAST])
        cycle = rule.cycle(now)
        if cycle != counter[_CYCLE]:
            counter[_CYCLE] = cycle
            counter[_HIGH] = self.first_value(rule) - self.step
        step = self.step
        available = (rule.max_counter - counter[_HIGH]) // step
        if available <= 0:
            return (Tag.EXHAUSTED, rule.cycle_end_ms(cycle))
        count = min(n, available)
        first = counter[_HIGH] + step
        counter[_HIGH] += count * step
        return (Tag.RESERVED, first, count, step, now)

    # ------------------------------------------------------------------ reads
    def monitor(self, rule_name: str, app: str) -> dict | None:
        """What `monitor` reports for a key: None if it has no counter."""
        counter = self.counters.get((rule_name, app))
        rule = self.rules.get(rule_name)
        if counter is None or rule is None:
            return None
        high = counter[_HIGH]
        return {
            "counter": max(high, self.first_value(rule) - self.step),
            "node_offset": self.offset,
            "mode": "exact",
            "remaining": max(0, (rule.max_counter - high) // self.step),
            "cycle_end_ms": rule.cycle_end_ms(counter[_CYCLE]),
        }

    # ---------------------------------------------------------------- records
    def to_records(self) -> tuple:
        rules = tuple((r.name, r.format, r.min_counter, r.max_counter, r.reset_seconds, r.utc_offset,
                       r.salt_max_len) for r in sorted(self.rules.values(), key=lambda r: r.name))
        counters = tuple((rule, app, *values) for (rule, app), values in sorted(self.counters.items()))
        return (IDS_FORMAT_VERSION, self.step, self.offset, self.max_apps_per_rule, rules, counters)

    @classmethod
    def from_records(cls, records: tuple) -> "IdState":
        version, step, offset, max_apps, rules, counters = records
        if version != IDS_FORMAT_VERSION:
            raise ValueError(f"id state format {version}: this node reads {IDS_FORMAT_VERSION}")
        state = cls(tuple(IdRule(*fields) for fields in rules), step=step, offset=offset,
                    max_apps_per_rule=max_apps)
        for rule, app, cycle, high, last in counters:
            state.counters[(rule, app)] = [cycle, high, last]
            state.apps[rule] = state.apps.get(rule, 0) + 1
        return state

    def digest(self) -> str:
        import hashlib  # here: a node's start has no use for it (2 ms)

        return hashlib.sha256(pickle.dumps(self.to_records(), protocol=5)).hexdigest()
