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
