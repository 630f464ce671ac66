"""Id rules: what an id looks like, checked so that distinct counters give distinct ids.

A rule is id_server's four Lua functions made declarative (docs/id-service.md,
"Rules"): the counter's range, how often it starts again, in which time zone, and
a format template such as "{y1}{month:02}{day:02}{counter:04}" (the seed's
`o2o` rule: counter 1 on 2015-05-14 renders "505140001").

Templates are parsed by a small tokenizer, never by `str.format`, so attribute
or index syntax ({0.__class__}) cannot reach an object. Validation makes
rendering injective, which is what keeps ids unique once counters are:
1. `{counter:0N}` appears exactly once, fixed width, N at least the digits of
   max_counter (else "1|23" and "12|3" collide);
2. at most one variable-width field (`salt`), and the rule then bounds it;
3. a counter that starts again (reset_seconds > 0) needs time fields that tell
   consecutive cycles apart: checked by rendering the time part of 1,000
   consecutive cycles and requiring them distinct, and their horizon (how long
   until the time part repeats: y1 10 years, yy 100) at least one cycle;
4. 0 <= min_counter < max_counter < 2**63, and an id is at most 64 characters.

A rule also says how its ids are handed out (core/ids.py, server/ids/udp.py):
`exact`, one committed reservation per id, or `segment`, blocks of `segment`
values committed ahead and served from the leader's memory.

Time zones are fixed UTC offsets ("+08:00"), not zone names: the cycle an id
belongs to is computed on every node when an entry is applied, and a zone
name's rules come from each host's tz database, which may differ between
nodes (a diverged state) and moves with daylight saving (cycles of 23 and 25
hours). id_server used the host's zone; a fixed offset is what its rules meant.

Pure: no clock, no I/O; `now_ms` is always an argument.
"""

from __future__ import annotations

import functools
import re
from dataclasses import InitVar, astuple, dataclass
from typing import NamedTuple

MAX_ID_LENGTH = 64
MAX_COUNTER = 2**63 - 1
EXACT, SEGMENT = "exact", "segment"  # how a rule hands out its ids (docs/id-service.md)
MODES = (EXACT, SEGMENT)
MAX_SEGMENT = 100_000  # values per block: a failover wastes up to two blocks per key
DEFAULT_SEGMENT = 1_000
SAMPLE_CYCLES = 1000
# A fixed reference for the sampled cycles of check 3 (any instant works: the
# check is about the template, not about today).
_SAMPLE_FROM_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z

class Civil(NamedTuple):
    """A moment's calendar fields at a fixed UTC offset."""

    year: int
    month: int
    day: int
    hour: int
    minute: int
    second: int
    yday: int


def civil(unix: int, utc_offset: int) -> Civil:
    """Calendar fields of unix time `unix` (s) at `utc_offset` (s east), by integer
    arithmetic (H. Hinnant's days-to-civil; proleptic Gregorian): no datetime, so
    the core reads no clock even by accident (tests/core/test_purity.py)."""
    local = unix + utc_offset
    days, seconds = divmod(local, 86400)
    z = days + 719468
    era = z // 146097
    doe = z - era * 146097
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    day = doy - (153 * mp + 2) // 5 + 1
    month = mp + 3 if mp < 10 else mp - 9
    year = yoe + era * 400 + (month <= 2)
    leap = year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
    yday = _DAYS_BEFORE_MONTH[month] + day + (1 if leap and month > 2 else 0)
    return Civil(year, month, day, seconds // 3600, seconds % 3600 // 60, seconds % 60, yday)


_DAYS_BEFORE_MONTH = (0, 0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334)

# Field name -> how it renders from the calendar fields (and the unix time in s).
_TIME_FIELDS = {
    "year": lambda t, unix: t.year,
    "yy": lambda t, unix: t.year % 100,
    "y1": lambda t, unix: t.year % 10,
    "month": lambda t, unix: t.month,
    "day": lambda t, unix: t.day,
    "hour": lambda t, unix: t.hour,
    "minute": lambda t, unix: t.minute,
    "second": lambda t, unix: t.second,
    "yday": lambda t, unix: t.yday,
    "unix": lambda t, unix: unix,
}
# How long until a template's time part repeats, by its coarsest year field (years).
_HORIZON_YEARS = {"y1": 10, "yy": 100}
# The most digits each time field renders (unix: until the year 2286).
_WIDEST = {"year": 4, "yy": 2, "y1": 1, "month": 2, "day": 2, "hour": 2, "minute": 2, "second": 2,
           "yday": 3, "unix": 10}
_NATURALLY_FIXED = {"y1", "year"}  # one width for every value (years 1000-9999)
_FIELD = re.compile(r"\{([a-z0-9]+)(?::0(\d+))?\}")
_OFFSET = re.compile(r"([+-])(\d\d):(\d\d)$")


class RuleError(ValueError):
    """A rule that cannot be used; str() is one line naming the rule and the problem."""


@dataclass(frozen=True)
class Field:
    name: str
    width: int  # 0: as many digits as it takes (or the salt as given)


Token = str | Field


def parse_template(template: str) -> tuple[Token, ...]:
    """Literal text and {name} / {name:0N} fields; anything else in braces is an error."""
    tokens: list[Token] = []
    pos = 0
    for match in _FIELD.finditer(template):
        literal = template[pos:match.start()]
        if "{" in literal or "}" in literal:
            raise ValueError(f"stray brace in {literal!r}")
        if literal:
            tokens.append(literal)
        name, width = match.group(1), match.group(2)
        if name != "counter" and name != "salt" and name not in _TIME_FIELDS:
            raise ValueError(f"unknown field {{{name}}}")
        if name == "salt" and width:
            raise ValueError("{salt} takes no width")
        tokens.append(Field(name, int(width) if width else 0))
        pos = match.end()
    literal = template[pos:]
    if "{" in literal or "}" in literal:
        raise ValueError(f"stray brace in {literal!r}")
    if literal:
        tokens.append(literal)
    return tuple(tokens)


def parse_offset(text: str) -> int:
    """'+08:00' -> 28800 (seconds east of UTC)."""
    match = _OFFSET.match(text)
    if not match or int(match.group(3)) >= 60 or int(match.group(2)) > 14:
        raise ValueError(f"timezone {text!r}: expected a fixed offset such as +08:00 (zone names "
                         f"are refused: each host's tz database could place a cycle differently)")
    seconds = int(match.group(2)) * 3600 + int(match.group(3)) * 60
    return seconds if match.group(1) == "+" else -seconds


@dataclass(frozen=True)
class IdRule:
    name: str
    format: str
    min_counter: int = 0
    max_counter: int = MAX_COUNTER
    reset_seconds: int = 0  # 0: the counter never starts again
    utc_offset: int = 0  # seconds east of UTC
    salt_max_len: int = 0  # 0: the format has no {salt}
    mode: str = "exact"  # or "segment"
    segment: int = 0  # values per block in segment mode; 0 in exact mode
    # Only for the built-in rules (seed_rules): parse the format, skip the checks.
    trusted: InitVar[bool] = False

    def __post_init__(self, trusted: bool) -> None:
        # Validation renders 2,000 sampled instants for a rule that resets;
        # every node validates each ID_SET_RULES entry, and a leader each file
        # rule, so the same rule is validated once per process. The built-in
        # rules are not validated at start at all (a test checks them).
        tokens = parse_template(self.format) if trusted else _validated_cached(self)
        object.__setattr__(self, "tokens", tokens)
        # Whether rendering needs the calendar (most of a time-free id's cost).
        object.__setattr__(self, "timed", any(type(t) is Field and t.name in _TIME_FIELDS for t in tokens))

    def checked(self) -> IdRule:
        """This rule again, through every check (RuleError if one fails)."""
        return IdRule(*astuple(self))

    # -------------------------------------------------------------- cycles
    def cycle(self, now_ms: int) -> int:
        """Which cycle `now_ms` falls in (always 0 for a counter that never resets)."""
        if not self.reset_seconds:
            return 0
        return (now_ms + self.utc_offset * 1000) // (self.reset_seconds * 1000)

    def cycle_end_ms(self, cycle: int) -> int | None:
        if not self.reset_seconds:
            return None
        return (cycle + 1) * self.reset_seconds * 1000 - self.utc_offset * 1000

    # ----------------------------------------------------------- rendering
    def render(self, counter: int, now_ms: int, salt: str = "") -> str:
        unix = now_ms // 1000
        moment = civil(unix, self.utc_offset) if self.timed else None
        out = []
        for token in self.tokens:
            if type(token) is str:
                out.append(token)
            elif token.name == "counter":
                out.append(f"{counter:0{token.width}d}")
            elif token.name == "salt":
                out.append(salt)
            else:
                out.append(f"{_TIME_FIELDS[token.name](moment, unix):0{token.width}d}")
        return "".join(out)

    def to_record(self) -> tuple:
        """Plain values, in field order: IdRule(*record) makes it again (a log
        entry or a snapshot holds records, never objects)."""
        return (self.name, self.format, self.min_counter, self.max_counter, self.reset_seconds,
                self.utc_offset, self.salt_max_len, self.mode, self.segment)

    def horizon_years(self) -> int | None:
        """Years until the time part repeats; None: never (a full year or unix time)."""
        return _horizon_years(self.tokens)


def _time_part(tokens: tuple[Token, ...], utc_offset: int, now_ms: int) -> str:
    """An id's time fields alone (what tells cycles apart)."""
    unix = now_ms // 1000
    moment = civil(unix, utc_offset)
    return "|".join(f"{_TIME_FIELDS[t.name](moment, unix)}" for t in tokens
                    if type(t) is Field and t.name in _TIME_FIELDS)


def _horizon_years(tokens: tuple[Token, ...]) -> int | None:
    names = {t.name for t in tokens if type(t) is Field}
    if "year" in names or "unix" in names:
        return None
    horizons = [_HORIZON_YEARS[n] for n in names if n in _HORIZON_YEARS]
    return max(horizons) if horizons else 1


@functools.lru_cache(maxsize=256)
def _validated_cached(rule: IdRule) -> tuple[Token, ...]:
    return _validated(rule)  # a RuleError is not cached: raised again each time


def _validated(rule: IdRule) -> tuple[Token, ...]:
    def fail(problem: str) -> RuleError:
        return RuleError(f"id rule {rule.name!r}: {problem}")

    if not rule.name or len(rule.name.encode()) > 64:
        raise fail("a name of 1 to 64 bytes is needed")
    if not 0 <= rule.min_counter < rule.max_counter <= MAX_COUNTER:
        raise fail(f"needs 0 <= min_counter < max_counter < 2**63 (got {rule.min_counter}, {rule.max_counter})")
    if rule.reset_seconds < 0:
        raise fail("reset_seconds cannot be negative")
    if rule.mode not in MODES:
        raise fail(f"mode {rule.mode!r} is not one of {', '.join(MODES)}")
    if rule.mode == SEGMENT and not 1 <= rule.segment <= MAX_SEGMENT:
        raise fail(f"segment {rule.segment} is out of range 1..{MAX_SEGMENT}")
    if rule.mode == EXACT and rule.segment:
        raise fail("segment is for mode = \"segment\" only")
    try:
        tokens = parse_template(rule.format)
    except ValueError as exc:
        raise fail(f"format {rule.format!r}: {exc}") from None
    fields = [t for t in tokens if type(t) is Field]
    counters = [f for f in fields if f.name == "counter"]
    if len(counters) != 1:
        raise fail(f"format {rule.format!r}: needs {{counter:0N}} exactly once")
    digits = len(str(rule.max_counter))
    if counters[0].width < digits:
        raise fail(f"format {rule.format!r}: {{counter}} needs a fixed width of at least {digits} "
                   f"({{counter:0{digits}}}) so that ids of different counters never collide")
    salts = [f for f in fields if f.name == "salt"]
    if len(salts) > 1:
        raise fail(f"format {rule.format!r}: {{salt}} may appear once")
    if salts and rule.salt_max_len <= 0:
        raise fail("a format with {salt} needs salt_max_len")
    for field in fields:
        # Every field but the salt renders at one width, or a neighbour's digits
        # could shift into it: {y1} and {year} always do; the others need {x:0N}.
        widest = _WIDEST.get(field.name)
        if widest is not None and field.width < widest and field.name not in _NATURALLY_FIXED:
            raise fail(f"format {rule.format!r}: {{{field.name}}} needs a fixed width, "
                       f"{{{field.name}:0{widest}}}")
    time_fields = [f for f in fields if f.name in _TIME_FIELDS]
    if rule.reset_seconds:
        if not time_fields:
            raise fail("a counter that resets needs time fields in the format, or ids repeat each cycle")
        period_ms = rule.reset_seconds * 1000
        first = (_SAMPLE_FROM_MS + rule.utc_offset * 1000) // period_ms
        seen: dict[str, int] = {}
        for cycle in range(first, first + SAMPLE_CYCLES):
            start = cycle * period_ms - rule.utc_offset * 1000
            for moment in (start, start + period_ms - 1):  # a cycle's first and last ms
                part = _time_part(tokens, rule.utc_offset, moment)
                if seen.setdefault(part, cycle) != cycle:
                    raise fail(f"format {rule.format!r}: its time fields render the same for two "
                               f"cycles of {rule.reset_seconds} s ({part!r}); add finer fields")
        horizon = _horizon_years(tokens)
        if horizon is not None and horizon * 365 * 86400 < rule.reset_seconds:
            raise fail(f"format {rule.format!r}: its time fields repeat after {horizon} year(s), "
                       f"within one cycle")
    longest = sum(len(t) if type(t) is str else
                  rule.salt_max_len if t.name == "salt" else max(t.width, _WIDEST.get(t.name, 0))
                  for t in tokens)
    if longest > MAX_ID_LENGTH:
        raise fail(f"format {rule.format!r}: ids could be {longest} characters (at most {MAX_ID_LENGTH})")
    return tokens


@functools.cache
def seed_rules() -> tuple[IdRule, ...]:
    """The built-in rules: the seed's `o2o` example and a plain increasing `counter`.

    Built once, and trusted rather than checked: checking a rule that resets renders
    2,000 sampled instants (7 ms, in the way of a node's first reply, since every
    QueueState starts with these rules). They are constants, and
    tests/core/test_ids.py puts each through every check (IdRule.checked)."""
    return (
        IdRule("o2o", "{y1}{month:02}{day:02}{counter:04}", min_counter=0, max_counter=9999,
               reset_seconds=86400, utc_offset=8 * 3600, trusted=True),
        IdRule("counter", "{counter:019}", trusted=True),
    )
