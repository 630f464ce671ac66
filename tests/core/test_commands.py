"""The log entry format: what encode_batch writes, decode_batch reads back."""

from __future__ import annotations

import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from haqueue.core import commands as C
from haqueue.core.state import _HANDLERS

from .helpers import bury, delete, kick, kick_job, pause, put, release, release_orphans, reserve, touch

EVERY_KIND = [
    (C.TICK,),
    put("default", 0, 0, 1000, b""),
    put("t-1", 2**32 - 1, 5000, 2**32 * 1000, b"\x00\r\n" * 100),
    reserve(1 << 32 | 5, "a", "b"),
    (C.RESERVE_JOB, 7, 2**63 - 1),
    delete(7, 1),
    release(7, 1, 3, 0),
    bury(7, 1, 9),
    touch(7, 1),
    kick(10, "default"),
    kick_job(4),
    pause("default", 0),
    (C.DROP_CONN, 7),
    release_orphans(1, 2),
    (C.RELEASE_ORPHANS, (1, 2), 3),
    (C.FORGET_TUBE, "t-1"),
]


def decoded(data: bytes) -> tuple[int, list[tuple]]:
    """decode_batch of `data` unpickled, not handed back from what encode_batch remembers."""
    C.forget_encoded()
    return C.decode_batch(data)


def test_a_batch_of_every_command_survives_encode_and_decode():
    stamp, commands = decoded(C.encode_batch(1_700_000_000_123, EVERY_KIND))
    assert stamp == 1_700_000_000_123
    assert commands == EVERY_KIND
    assert [type(c) for c in commands] == [tuple] * len(EVERY_KIND)


def test_an_empty_batch_survives_encode_and_decode():
    assert decoded(C.encode_batch(0, [])) == (0, [])


def test_encoding_is_deterministic():
    assert C.encode_batch(5, EVERY_KIND) == C.encode_batch(5, list(EVERY_KIND))


_arg = st.one_of(st.integers(min_value=-(2**64), max_value=2**64), st.text(max_size=20), st.binary(max_size=64))


@settings(max_examples=100, deadline=None)
@given(st.integers(min_value=0, max_value=2**62), st.lists(st.tuples(st.sampled_from(sorted(C.NAMES)), _arg, _arg)))
def test_any_batch_of_plain_values_round_trips(stamp, commands):
    assert decoded(C.encode_batch(stamp, commands)) == (stamp, commands)
    assert C.decode_batch(C.encode_batch(stamp, commands)) == (stamp, commands)  # remembered or not


def test_an_entry_of_another_version_is_refused():
    data = pickle.dumps((C.LOG_FORMAT_VERSION + 1, 5, [(C.TICK,)]), protocol=5)
    with pytest.raises(C.LogFormatError, match=f"version {C.LOG_FORMAT_VERSION + 1}"):
        C.decode_batch(data)


@pytest.mark.parametrize(
    "data",
    [b"", b"not a pickle", pickle.dumps(5), pickle.dumps((1, 2)), C.encode_batch(1, [(C.TICK,)])[:-3]],
    ids=["empty", "garbage", "not-a-tuple", "short-tuple", "truncated"],
)
def test_an_undecodable_entry_is_refused_with_log_format_error(data):
    with pytest.raises(C.LogFormatError):
        C.decode_batch(data)


def test_log_format_error_is_a_value_error():
    assert issubclass(C.LogFormatError, ValueError)


def test_opcodes_keep_their_numbers():
    # The log stores numbers: renumbering one replays old journals wrongly
    # (commands.py checklist, item 1). Add new opcodes; never change these.
    assert (C.TICK, C.PUT, C.RESERVE, C.RESERVE_JOB, C.DELETE, C.RELEASE, C.BURY, C.TOUCH, C.KICK,
            C.KICK_JOB, C.PAUSE_TUBE, C.DROP_CONN, C.RELEASE_ORPHANS, C.FORGET_TUBE) == tuple(range(14))
    assert C.ID_RESERVE == 14
    assert C.ID_SET_RULES == 15
    # Version 3 starts at 15: the id service owns 15-19, Gearman 20-39.
    assert (C.GM_SUBMIT, C.GM_GRAB, C.GM_WORK_STATUS, C.GM_FINISH, C.GM_DROP_CONN, C.GM_MAX_QUEUE) == \
        tuple(range(20, 26))
    # Version 4 starts at 40: Gearman as gearmand does it (issue 28).
    assert (C.GM_SUBMIT_KEEP, C.GM_REQUEUE) == (40, 41)
    # Version 5 starts at 42: bounded entries.
    assert C.DROP_CONN_SOME == 42
    assert C.LOG_FORMAT_VERSION == 5
    assert C.FIRST_OPCODE_OF_VERSION == {1: 0, 2: 14, 3: 15, 4: 40, 5: 42}


def test_an_entry_carries_the_lowest_version_that_knows_its_commands():
    # An upgraded leader's queue entries still apply on a node not yet upgraded.
    assert pickle.loads(C.encode_batch(5, [(C.TICK,), (C.PUT, "t", 0, 0, 1000, b"x")]))[0] == 1
    assert pickle.loads(C.encode_batch(5, [(C.TICK,), (C.ID_RESERVE, "o2o", "app", 1)]))[0] == 2
    rules = (C.ID_SET_RULES, ())
    assert pickle.loads(C.encode_batch(5, [rules, (C.TICK,), (C.ID_RESERVE, "o2o", "app", 1)]))[0] == 3
    assert pickle.loads(C.encode_batch(5, []))[0] == 1
    assert pickle.loads(C.encode_batch(5, [(C.GM_GRAB, 1, ("f",)), (C.ID_RESERVE, "o2o", "app", 1)]))[0] == 3
    assert C.decode_batch(C.encode_batch(5, [(C.ID_RESERVE, "o2o", "app", 1)])) == \
        (5, [(C.ID_RESERVE, "o2o", "app", 1)])


def test_every_opcode_has_a_name_and_a_handler():
    assert len(set(C.NAMES.values())) == len(C.NAMES)
    assert set(C.NAMES) == set(_HANDLERS)


class _Boom:
    def __reduce__(self):
        return (print, ("unpickling ran code",))


@pytest.mark.parametrize("payload", [[(C.TICK, _Boom())], _Boom()], ids=["in-a-command", "as-the-commands"])
def test_an_entry_that_names_a_function_is_refused_without_calling_it(payload, capsys):
    data = pickle.dumps((C.LOG_FORMAT_VERSION, 5, payload), protocol=5)
    with pytest.raises(C.LogFormatError, match="plain values only.*print"):
        C.decode_batch(data)
    assert capsys.readouterr().out == ""


# Decode once: the leader's own entries come back as the commands it encoded.
HOT = [put("default", 0, 0, 60_000, b"x" * 100), reserve(1 << 32 | 5, "default"), delete(1 << 32 | 5, 1)]


def test_an_entry_just_encoded_decodes_to_the_commands_it_was_made_of():
    C.forget_encoded()
    commands = list(HOT)
    data = C.encode_batch(7, commands)
    stamp, again = C.decode_batch(bytes(bytearray(data)))  # equal bytes, another object
    assert stamp == 7 and again is commands
    stamp, third = C.decode_batch(data)  # handed back once; then unpickled
    assert third == commands and third is not commands and [type(c) for c in third] == [tuple] * 3


def test_an_entry_of_other_commands_is_always_unpickled():
    C.forget_encoded()
    for commands in ([(C.ID_RESERVE, "o2o", "app", 1)], [(C.RELEASE_ORPHANS, (1, 2), 3)],
                     [put("default", 0, 0, 1000, b"x" * (300 << 10))]):  # too big to keep
        data = C.encode_batch(3, commands)
        stamp, again = C.decode_batch(data)
        assert (stamp, again) == (3, commands) and again is not commands


def test_other_bytes_are_unpickled_and_earlier_entries_are_dropped_by_a_later_one():
    other = C.encode_batch(3, [put("other", 1, 0, 1000, b"y")])
    C.forget_encoded()
    first, second = list(HOT[:1]), list(HOT[1:])
    one, two = C.encode_batch(1, first), C.encode_batch(2, second)
    assert C.decode_batch(other) == (3, [put("other", 1, 0, 1000, b"y")])  # not remembered: unpickled
    assert C.decode_batch(two)[1] is second  # applied in log order: `one` never will be here
    assert C.decode_batch(one)[1] is not first and C.decode_batch(one) == (1, first)


def test_only_the_last_entries_are_remembered():
    C.forget_encoded()
    batches = [[put("default", 0, 0, 1000, b"%d" % n)] for n in range(C._MEMO_ENTRIES + 1)]
    entries = [C.encode_batch(n, batch) for n, batch in enumerate(batches)]
    assert C.decode_batch(entries[0])[1] is not batches[0]
    assert C.decode_batch(entries[1])[1] is batches[1]
