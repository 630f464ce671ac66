"""IdState: the id service's deterministic state machine (issue 15).

Per (rule, app) it keeps the cycle the counter is in, the highest value handed
out in it (`high`) and the latest time it was used; `reserve` hands out the
next `n` values. Everything is integer arithmetic on the entry's arguments
and its stamp (the leader's wall clock, I2): the same log gives the same
counters on every node, and no clock or I/O is read here. The id string is
not state: the leader renders it from the values and the time a reservation
returns (idrules.IdRule.render), so the date in an id and the cycle its
counter belongs to always come from the same instant (id_server took them
from two clock readings, a second apart at a boundary: docs/id-service.md,
"What id_server did, and what is closed here").

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

The rules in force are replicated too: ID_SET_RULES replaces the whole set,
all or nothing (`set_rules`), so every node renders and checks with the same
rules whatever its own cluster file says. A rule change that could make an
id come round again is refused, in apply as on the leader before it
proposes (`rule_change_problem`): once a rule has counters, its format,
min_counter, reset period, time zone and salt length are fixed (a different
cycle length or zone maps "now" to another cycle and restarts counters; a
different format renders old counters anew). max_counter, mode and segment
may change. A rule removed while it has counters is kept aside (`retired`)
with its counters, so adding it back is checked against what it was.

`step` and `offset` divide one id space between independent clusters, as
id_server's nodes divided it: every value v has v ≡ offset (mod step).
"""

from __future__ import annotations

import pickle

from haqueue.core.idrules import MAX_SEGMENT, IdRule, RuleError, seed_rules
from haqueue.core.results import BAD_ARGUMENTS, DONE, TOO_MANY_APPS, UNKNOWN_RULE, Tag

# The ids section of a snapshot has its own version, so that its shape can
# change without a new snapshot format (state.py): 1, rules of 7 fields and no
# retired rules; 2, rules with mode and segment, and the retired rules.
IDS_FORMAT_VERSION = 2
MAX_APPS_PER_RULE = 10_000
MAX_RESERVE = MAX_SEGMENT  # values one reservation may take (a segment-mode block)
MAX_RULES = 1_000
# Fields of a rule that may not change once it has counters (see the module docstring).
_FIXED_FIELDS = ("format", "min_counter", "reset_seconds", "utc_offset", "salt_max_len")
_RECORD_TYPES = (str, str, int, int, int, int, int, str, int)


def rule_from_record(record) -> IdRule:
    """An IdRule from its plain record (IdRule.to_record), RuleError if it is not one."""
    if type(record) not in (tuple, list) or len(record) != len(_RECORD_TYPES) or any(
            type(value) is not kind for value, kind in zip(record, _RECORD_TYPES)):
        raise RuleError(f"not an id rule record: {record!r:.200}")
    return IdRule(*record)


_CYCLE, _HIGH, _LAST = 0, 1, 2  # a counter: [cycle, highest value handed out, last time (ms)]


def wanted_rule_records(file_rules: tuple[IdRule, ...] = ()) -> tuple:
    """The rule set a leader wants in force: the built-in rules, with the cluster
    file's rules added (one of the same name replaces the built-in), as
    records sorted by name, comparable with IdState.rule_records()."""
    rules = {r.name: r for r in seed_rules()}
    rules.update((r.name, r) for r in file_rules)
    return tuple(r.to_record() for _, r in sorted(rules.items()))


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
        self.retired: dict[str, IdRule] = {}  # removed rules that have counters, as they were

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

    def set_rules(self, records) -> tuple:
        """ID_SET_RULES: the whole rule set, all or nothing. DONE, or
        (RULES_REFUSED, one line) with nothing changed. Never raises."""
        try:
            if type(records) not in (tuple, list) or len(records) > MAX_RULES:
                raise RuleError(f"id rules: expected a list of at most {MAX_RULES} rule records")
            rules = [rule_from_record(record) for record in records]
        except RuleError as exc:
            return (Tag.RULES_REFUSED, str(exc))
        except Exception as exc:  # a record a validator did not expect: refused, never raised
            return (Tag.RULES_REFUSED, f"id rules: unusable record ({type(exc).__name__})")
        problem = self.rule_change_problem(rules)
        if problem is not None:
            return (Tag.RULES_REFUSED, problem)
        new = {rule.name: rule for rule in rules}
        for name, rule in self.rules.items():
            if name not in new and self.apps.get(name):
                self.retired[name] = rule
        for name in new:
            self.retired.pop(name, None)
        self.rules = new
        return DONE

    def rule_change_problem(self, rules: list[IdRule] | tuple[IdRule, ...]) -> str | None:
        """Why this rule set cannot replace the current one (one line), or None."""
        seen = set()
        for rule in rules:
            if rule.name in seen:
                return f"id rule {rule.name!r}: defined twice"
            seen.add(rule.name)
            if not self.apps.get(rule.name):
                continue  # no counters yet: anything valid goes
            old = self.rules.get(rule.name) or self.retired.get(rule.name)
            if old is None:
                continue
            for field in _FIXED_FIELDS:
                if getattr(old, field) != getattr(rule, field):
                    return (f"id rule {rule.name!r}: {field} cannot change once the rule has counters "
                            f"({getattr(old, field)!r} -> {getattr(rule, field)!r}): ids could repeat; "
                            f"add a rule with a new name instead")
        return None

    def rule_records(self) -> tuple:
        """The rules in force as plain records, sorted by name (what ID_SET_RULES carries)."""
        return tuple(r.to_record() for r in sorted(self.rules.values(), key=lambda r: r.name))

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
            "mode": rule.mode,
            "remaining": max(0, (rule.max_counter - high) // self.step),
            "cycle_end_ms": rule.cycle_end_ms(counter[_CYCLE]),
        }

    # ---------------------------------------------------------------- records
    def to_records(self) -> tuple:
        counters = tuple((rule, app, *values) for (rule, app), values in sorted(self.counters.items()))
        retired = tuple(r.to_record() for _, r in sorted(self.retired.items()))
        return (IDS_FORMAT_VERSION, self.step, self.offset, self.max_apps_per_rule, self.rule_records(),
                counters, retired)

    @classmethod
    def from_records(cls, records: tuple) -> "IdState":
        version = records[0]
        if version == 1:  # before rules had modes; no retired rules
            _, step, offset, max_apps, rules, counters = records
            retired = ()
        elif version == IDS_FORMAT_VERSION:
            _, step, offset, max_apps, rules, counters, retired = records
        else:
            raise ValueError(f"id state format {version}: this node reads 1..{IDS_FORMAT_VERSION}")
        state = cls(tuple(IdRule(*fields) for fields in rules), step=step, offset=offset,
                    max_apps_per_rule=max_apps)
        state.retired = {fields[0]: IdRule(*fields) for fields in retired}
        for rule, app, cycle, high, last in counters:
            state.counters[(rule, app)] = [cycle, high, last]
            state.apps[rule] = state.apps.get(rule, 0) + 1
        return state

    def digest(self) -> str:
        import hashlib  # here: a node's start has no use for it (2 ms)

        return hashlib.sha256(pickle.dumps(self.to_records(), protocol=5)).hexdigest()
