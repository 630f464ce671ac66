"""The id service's rules and state machine (haqueue/core/idrules.py, ids.py): pure, no clock.

Golden cases come from seed 004 (id_server's README and its o2o rule); the property
tests drive random reservations with stamps that jump, stall and run backwards (a new
leader with a slow clock) and check that no id ever comes round twice.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from haqueue.core.idrules import IdRule, RuleError, parse_offset, parse_template, seed_rules
from haqueue.core.ids import BAD_ARGUMENTS, TOO_MANY_APPS, UNKNOWN_RULE, IdState

PLUS8 = timezone(timedelta(hours=8))


def ms(*args, tz=PLUS8) -> int:
    return int(datetime(*args, tzinfo=tz).timestamp() * 1000)


MAY14 = ms(2015, 5, 14, 9, 30)


def issue(state: IdState, rule: str, app: str, stamp: int, salt: str = "") -> str:
    result = state.reserve(rule, app, 1, stamp)
    assert result[0] == "RESERVED", result
    _, first, count, _step, now = result
    return state.rules[rule].render(first, now, salt)


# ---------------------------------------------------------------- the seed's example
def test_the_seed_o2o_rule_with_node_offset_1_gives_505140001_then_3():
    # id_server's README: step 2, this node's offset 1; get -> "505140001";
    # monitor -> {"counter": 3, "node_offset": 1} after two gets.
    state = IdState(step=2, offset=1)
    assert issue(state, "o2o", "test", MAY14) == "505140001"
    assert issue(state, "o2o", "test", MAY14 + 1) == "505140003"
    report = state.monitor("o2o", "test")
    assert (report["counter"], report["node_offset"]) == (3, 1)


def test_o2o_starts_again_at_local_midnight_and_keys_are_rule_and_app():
    state = IdState()
    assert issue(state, "o2o", "test", MAY14) == "505140000"
    assert issue(state, "o2o", "other", MAY14) == "505140000"  # unique per (rule, app) only, as id_server
    assert issue(state, "o2o", "test", ms(2015, 5, 14, 23, 59, 59)) == "505140001"
    assert issue(state, "o2o", "test", ms(2015, 5, 15, 0, 0, 0)) == "505150000"


def test_a_full_cycle_answers_exhausted_until_the_next_one_and_never_wraps():
    state = IdState((IdRule("tiny", "{yy:02}{month:02}{day:02}{counter:01}", max_counter=2,
                            reset_seconds=86400, utc_offset=8 * 3600),))
    ids = [issue(state, "tiny", "a", MAY14 + n) for n in range(3)]
    assert ids == ["1505140", "1505141", "1505142"]
    midnight = ms(2015, 5, 15)
    assert state.reserve("tiny", "a", 1, MAY14 + 10) == ("EXHAUSTED", midnight)
    assert issue(state, "tiny", "a", midnight) == "1505150"


def test_a_stamp_that_goes_back_never_returns_to_an_earlier_cycle():
    # A new leader whose clock is a day behind: the key's time stays where it was.
    state = IdState()
    assert issue(state, "o2o", "k", ms(2015, 5, 15, 0, 0, 1)) == "505150000"
    assert issue(state, "o2o", "k", ms(2015, 5, 14, 12, 0)) == "505150001"


def test_reservations_take_several_values_up_to_what_is_left():
    state = IdState((IdRule("r", "{counter:02}", max_counter=10),), step=3, offset=2)
    assert state.reserve("r", "a", 2, 0) == ("RESERVED", 2, 2, 3, 0)  # 2, 5
    assert state.reserve("r", "a", 5, 1) == ("RESERVED", 8, 1, 3, 1)  # 8 (11 > max)
    assert state.reserve("r", "a", 1, 2) == ("EXHAUSTED", None)


def test_unknown_rules_bad_arguments_and_the_per_rule_key_cap():
    state = IdState(max_apps_per_rule=2)
    assert state.reserve("nope", "a", 1, 0) == UNKNOWN_RULE
    assert state.reserve("counter", "a", 0, 0) == BAD_ARGUMENTS
    assert state.reserve("counter", b"a", 1, 0) == BAD_ARGUMENTS
    assert state.reserve("counter", "a", 1, 0)[0] == "RESERVED"
    assert state.reserve("counter", "b", 1, 0)[0] == "RESERVED"
    assert state.reserve("counter", "c", 1, 0) == TOO_MANY_APPS
    assert state.reserve("counter", "a", 1, 1)[0] == "RESERVED"  # known keys go on


def test_state_round_trips_through_its_records_with_the_same_digest():
    state = IdState(step=2, offset=1)
    for n in range(5):
        state.reserve("o2o", f"app{n % 2}", 1, MAY14 + n)
    again = IdState.from_records(state.to_records())
    assert again.digest() == state.digest()
    assert again.reserve("o2o", "app0", 1, MAY14 + 9) == state.reserve("o2o", "app0", 1, MAY14 + 9)


# ---------------------------------------------------------------- rules
@pytest.mark.parametrize("fmt, reset, message", [
    ("{counter:03}", 0, "needs a fixed width of at least 4"),
    ("{counter:04}{counter:04}", 0, "exactly once"),
    ("{month}{counter:04}", 0, "{month} needs a fixed width, {month:02}"),
    ("{month:02}{counter:04}", 86400, "render the same for two cycles"),
    ("{hour:02}{counter:04}", 86400, "render the same for two cycles"),
    ("{yy:02}{month:02}{day:02}{counter:04}", 3600, "render the same for two cycles"),
    ("{counter:04}", 60, "needs time fields"),
    ("{0.__class__}{counter:04}", 0, "stray brace"),
    ("{counter.real}", 0, "stray brace"),
    ("{nope:02}{counter:04}", 0, "unknown field {nope}"),
    ("{salt}{counter:04}", 0, "needs salt_max_len"),
    ("x" * 61 + "{counter:04}", 0, "could be 65 characters"),
])
def test_a_template_that_could_repeat_an_id_is_refused_with_one_line_naming_it(fmt, reset, message):
    with pytest.raises(RuleError) as caught:
        IdRule("r", fmt, max_counter=9999, reset_seconds=reset)
    assert str(caught.value).startswith("id rule 'r': ") and message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_templates_that_tell_cycles_apart_are_accepted():
    IdRule("hourly", "{yy:02}{month:02}{day:02}{hour:02}{counter:04}", max_counter=9999, reset_seconds=3600)
    IdRule("daily-yday", "{year}{yday:03}{counter:06}", max_counter=999999, reset_seconds=86400)
    IdRule("salted", "O{salt}{yy:02}{month:02}{day:02}{counter:06}", max_counter=999999,
           reset_seconds=86400, salt_max_len=8)
    assert [r.name for r in seed_rules()] == ["o2o", "counter"]


def test_the_built_in_rules_pass_every_check_they_skip_at_start():
    for rule in seed_rules():
        assert rule.checked() == rule and rule.checked().tokens == rule.tokens


def test_a_rule_that_fails_a_check_fails_it_when_checked_again():
    untrusted = IdRule("o2o-daily", "{month:02}{day:02}{counter:04}", max_counter=9999, reset_seconds=86400,
                       trusted=True)  # month and day repeat every year: within 1,000 daily cycles
    with pytest.raises(RuleError, match="render the same for two cycles"):
        untrusted.checked()


def test_time_zones_are_fixed_offsets_only():
    assert parse_offset("+08:00") == 28800 and parse_offset("-03:30") == -12600
    for bad in ("Asia/Shanghai", "+8", "+08:60", "+15:00"):
        with pytest.raises(ValueError, match="fixed offset"):
            parse_offset(bad)


def test_the_template_tokenizer_gives_literals_and_fields():
    tokens = parse_template("O{salt}-{counter:06}")
    assert [t if isinstance(t, str) else (t.name, t.width) for t in tokens] == \
        ["O", ("salt", 0), "-", ("counter", 6)]


# ---------------------------------------------------------------- properties
DAY = 86_400_000
stamps = st.integers(min_value=MAY14 - 3 * DAY, max_value=MAY14 + 3 * DAY)
operations = st.lists(st.tuples(st.sampled_from(["o2o", "tiny", "counter"]), st.sampled_from(["a", "b"]),
                                st.integers(1, 4), stamps), max_size=80)


@settings(max_examples=150, deadline=None)
@given(operations, st.sampled_from([(1, 0), (2, 1), (3, 0)]))
def test_no_id_is_ever_issued_twice_per_key_whatever_the_stamps(ops, step_offset):
    step, offset = step_offset
    rules = seed_rules() + (IdRule("tiny", "{yy:02}{month:02}{day:02}{counter:02}", max_counter=7,
                                   reset_seconds=86400, utc_offset=8 * 3600),)
    state, replica = IdState(rules, step=step, offset=offset), IdState(rules, step=step, offset=offset)
    issued: dict[tuple[str, str], set[str]] = {}
    last_cycle: dict[tuple[str, str], int] = {}
    for rule_name, app, n, stamp in ops:
        result = state.reserve(rule_name, app, n, stamp)
        assert replica.reserve(rule_name, app, n, stamp) == result  # deterministic
        if result[0] != "RESERVED":
            assert result[0] == "EXHAUSTED"
            continue
        _, first, count, got_step, now = result
        rule = state.rules[rule_name]
        key = (rule_name, app)
        cycle = rule.cycle(now)
        assert cycle >= last_cycle.get(key, cycle)  # never back to an earlier cycle
        last_cycle[key] = cycle
        for k in range(count):
            value = first + k * got_step
            assert rule.min_counter <= value <= rule.max_counter and value % step == offset % step
            text = rule.render(value, now)
            assert text not in issued.setdefault(key, set()), (key, text)
            issued[key].add(text)
    assert state.digest() == replica.digest()


@given(st.integers(min_value=-2_000_000_000, max_value=9_000_000_000), st.integers(-14 * 3600, 14 * 3600))
def test_calendar_fields_agree_with_the_standard_library(unix, offset):
    from haqueue.core.idrules import civil

    moment = datetime.fromtimestamp(unix, timezone(timedelta(seconds=offset)))
    assert civil(unix, offset) == (moment.year, moment.month, moment.day, moment.hour, moment.minute,
                                   moment.second, moment.timetuple().tm_yday)


# ---------------------------------------------------------------- rule changes (ID_SET_RULES)
ORDERS = IdRule("orders", "O{yy:02}{month:02}{day:02}{counter:06}", max_counter=999_999, reset_seconds=86400,
                utc_offset=8 * 3600, mode="segment", segment=100)


def test_a_rule_set_replaces_the_rules_whole_and_round_trips_as_records():
    state = IdState()
    records = (ORDERS.to_record(),) + tuple(r.to_record() for r in seed_rules())
    assert state.set_rules(records) == ("OK",)
    assert sorted(state.rules) == ["counter", "o2o", "orders"]
    assert state.rules["orders"] == ORDERS and state.rules["orders"].mode == "segment"
    assert state.rule_records() == tuple(sorted(records))
    again = IdState.from_records(state.to_records())
    assert again.digest() == state.digest() and again.rules == state.rules


@pytest.mark.parametrize("records, message", [
    ((("x", "{counter:03}", 0, 9999, 0, 0, 0, "exact", 0),), "needs a fixed width of at least 4"),
    ((("x", "{counter:04}", 0, 9999, 0, 0, 0, "fast", 0),), "mode 'fast'"),
    ((("x", "{counter:04}", 0, 9999, 0, 0, 0, "segment", 0),), "segment 0 is out of range"),
    ((("x", "{counter:04}", 0, 9999, 0, 0, 0, "exact", 5),), "segment is for mode"),
    ((("x", "{counter:04}", 0, 9999, 0, 0, 0, "exact"),), "not an id rule record"),
    ((("x", b"{counter:04}", 0, 9999, 0, 0, 0, "exact", 0),), "not an id rule record"),
    ((("x", "{counter:04}", 0, True, 0, 0, 0, "exact", 0),), "not an id rule record"),
    ("not records", "expected a list"),
    (None, "expected a list"),
    ((("x", "{counter:04}", 0, 9999, 0, 0, 0, "exact", 0),) * 2, "defined twice"),
])
def test_a_rule_set_that_could_repeat_ids_or_is_malformed_is_refused_whole(records, message):
    state = IdState()
    before = state.digest()
    result = state.set_rules(records)
    assert result[0] == "RULES_REFUSED" and message in result[1], result
    assert "\n" not in result[1]
    assert state.digest() == before  # nothing changed


@pytest.mark.parametrize("field, value", [("format", "P{yy:02}{month:02}{day:02}{counter:06}"),
                                          ("min_counter", 1), ("reset_seconds", 3600 * 24 * 2),
                                          ("utc_offset", 0)])
def test_a_rule_with_counters_keeps_what_decides_its_ids(field, value):
    import dataclasses

    state = IdState((ORDERS,))
    changed = dataclasses.replace(ORDERS, **{field: value}).to_record()
    assert state.set_rules((changed,)) == ("OK",)  # no counters yet: any valid rule goes
    state = IdState((ORDERS,))
    state.reserve("orders", "a", 1, MAY14)
    result = state.set_rules((changed,))
    assert result[0] == "RULES_REFUSED" and f"{field} cannot change" in result[1]


def test_max_counter_mode_and_segment_may_change_and_a_removed_rule_keeps_its_counters():
    import dataclasses

    state = IdState((ORDERS,))
    assert state.reserve("orders", "a", 5, MAY14)[1:3] == (0, 5)
    assert state.set_rules((dataclasses.replace(ORDERS, max_counter=999, mode="exact",
                                                segment=0).to_record(),)) == ("OK",)
    assert state.reserve("orders", "a", 1, MAY14)[1] == 5
    # Removed: unknown, but its counters stay, and so does what it was.
    assert state.set_rules(()) == ("OK",)
    assert state.reserve("orders", "a", 1, MAY14) == UNKNOWN_RULE
    assert "orders" in state.retired
    again = IdState.from_records(state.to_records())
    assert again.digest() == state.digest()
    bad = dataclasses.replace(ORDERS, utc_offset=0).to_record()
    assert again.set_rules((bad,))[0] == "RULES_REFUSED"
    assert again.set_rules((ORDERS.to_record(),)) == ("OK",)
    assert again.reserve("orders", "a", 1, MAY14)[1] == 6  # it goes on, never back to 0
    assert not again.retired


def test_a_version_1_ids_section_is_still_read():
    state = IdState(step=2, offset=1)
    state.reserve("o2o", "a", 3, MAY14)
    _, step, offset, max_apps, rules, counters, _retired = state.to_records()
    v1_rules = tuple(record[:7] for record in rules)  # before modes
    restored = IdState.from_records((1, step, offset, max_apps, v1_rules, counters))
    assert restored.digest() == state.digest()
    assert all(r.mode == "exact" for r in restored.rules.values())


# ---------------------------------------------------------------- the log, replayed
def _log_steps():
    from haqueue.core import commands as C

    keys = st.sampled_from([("o2o", "a"), ("counter", "a"), ("daily", "a"), ("daily", "b"), ("gone", "a")])
    reserve = st.builds(lambda key, n: (C.ID_RESERVE, key[0], key[1], n), keys, st.integers(1, 5))
    rules = st.sampled_from(["base", "more", "segment", "without_daily"]).map(lambda name: (C.ID_SET_RULES, name))
    jump = st.one_of(st.integers(-DAY, DAY), st.sampled_from([-1, 1, DAY, -DAY, 7 * DAY]))
    entry = st.tuples(jump, st.lists(st.one_of(reserve, reserve, reserve, rules), min_size=1, max_size=4))
    return st.lists(st.one_of(entry, entry, entry, st.just("restart")), max_size=40)


DAILY = IdRule("daily", "{yy:02}{month:02}{day:02}{counter:02}", max_counter=9, reset_seconds=86400,
               utc_offset=8 * 3600)
RULE_SETS = {
    "base": (DAILY,),
    "more": (IdRule("daily", DAILY.format, max_counter=99, reset_seconds=86400, utc_offset=8 * 3600),
             IdRule("gone", "G{counter:04}", max_counter=9999)),
    "segment": (IdRule("daily", DAILY.format, max_counter=99, reset_seconds=86400, utc_offset=8 * 3600,
                       mode="segment", segment=3),),
    "without_daily": (IdRule("gone", "G{counter:04}", max_counter=9999),),
}


@settings(max_examples=100, deadline=None)
@given(_log_steps())
def test_a_log_of_reservations_rule_changes_restarts_and_clock_steps_never_repeats_an_id(steps):
    """QueueState applies random entries (reservations, rule changes that are
    accepted or refused, stamps that jump and run back); all nodes restart from
    a snapshot now and then. Per key no id twice, (cycle, counter) only going
    up in log order, and a replay of the whole log from scratch, like a replay
    of the tail after the last snapshot, gives the same digest."""
    from haqueue.core import commands as C
    from haqueue.core.ids import wanted_rule_records
    from haqueue.core.state import QueueState

    state = QueueState()
    log: list[tuple[int, list]] = []
    snapshot, since_snapshot = state.serialize(), 0
    stamp = MAY14
    issued: dict[tuple[str, str], list[tuple[int, int]]] = {}
    texts: dict[tuple[str, str], set[str]] = {}
    for step in steps:
        if step == "restart":
            state = QueueState.deserialize(state.serialize())
            snapshot, since_snapshot = state.serialize(), len(log)
            continue
        jump, commands = step
        stamp += jump
        commands = [(C.ID_SET_RULES, wanted_rule_records(RULE_SETS[c[1]])) if c[0] == C.ID_SET_RULES else c
                    for c in commands]
        log.append((stamp, commands))
        results = state.apply_batch(stamp, commands).results
        for command, result in zip(commands, results):
            assert result[0] in ("RESERVED", "EXHAUSTED", "UNKNOWN_RULE", "OK", "RULES_REFUSED"), result
            if result[0] != "RESERVED":
                continue
            _, rule_name, app, _n = command
            _, first, count, step_, now = result
            # (A later command of the entry may have removed the rule; its
            # definition is kept aside with its counters.)
            rule = state.ids.rules.get(rule_name) or state.ids.retired[rule_name]
            key = (rule_name, app)
            for value in range(first, first + count * step_, step_):
                mark = (rule.cycle(now), value)
                assert not issued.get(key) or issued[key][-1] < mark, (key, issued[key][-1], mark)
                issued.setdefault(key, []).append(mark)
                text = rule.render(value, now)
                assert text not in texts.setdefault(key, set()), (key, text)
                texts[key].add(text)
    assert state.internal_errors == 0
    replay = QueueState()
    for stamp, commands in log:
        replay.apply_batch(stamp, commands)
    assert replay.digest() == state.digest()
    tail = QueueState.deserialize(snapshot)
    for stamp, commands in log[since_snapshot:]:
        tail.apply_batch(stamp, commands)
    assert tail.digest() == state.digest()
