"""The beanstalkd 1.12 codec: every command and error, fed whole, byte by byte and with the
start of a next command left over; pipelining; EOF; reply builders."""

from __future__ import annotations

import pytest

from haqueue.protocol import beanstalk as bs
from haqueue.protocol.beanstalk import (
    EOF,
    NEED_DATA,
    BeanstalkParser,
    Command,
    ProtocolError,
)

BAD = ProtocolError(bs.BAD_FORMAT)
UNKNOWN = ProtocolError(bs.UNKNOWN_COMMAND)
CRLF_ERR = ProtocolError(bs.EXPECTED_CRLF, counts_as="put")
TOO_BIG = ProtocolError(bs.JOB_TOO_BIG, counts_as="put")
BAD_PUT = ProtocolError(bs.BAD_FORMAT, counts_as="put")  # junk after the size: still a put
BAD_PAUSE = ProtocolError(bs.BAD_FORMAT, counts_as="pause-tube")
# An incomplete next command: must stay buffered, then complete normally.
TRAILER = b"list-tube-u"
TRAILER_REST = b"sed\r\n"


def drain(parser: BeanstalkParser) -> list:
    events = []
    while True:
        event = parser.next_event()
        if event is NEED_DATA or event is EOF:
            return events + [event]
        events.append(event)


def parse_whole(data: bytes, max_job_size: int = 65535) -> list:
    parser = BeanstalkParser(max_job_size)
    parser.receive_data(data)
    return drain(parser)[:-1]


def parse_bytewise(data: bytes, max_job_size: int = 65535) -> list:
    parser = BeanstalkParser(max_job_size)
    events = []
    for i in range(len(data)):
        parser.receive_data(data[i : i + 1])
        events.extend(drain(parser)[:-1])
    return events


def assert_parses(data: bytes, expected: list, max_job_size: int = 65535,
                  leaves_partial: bool = False) -> None:
    """The h11 habit: whole, one byte at a time, and with a next command's start left over.

    leaves_partial: data ends inside a line that a next command would join, so the
    left-over check does not apply.
    """
    assert parse_whole(data, max_job_size) == expected
    assert parse_bytewise(data, max_job_size) == expected
    if leaves_partial:
        parser = BeanstalkParser(max_job_size)
        parser.receive_data(data)
        assert drain(parser) == expected + [NEED_DATA]
        assert parser.buffered > 0
        return
    parser = BeanstalkParser(max_job_size)
    parser.receive_data(data + TRAILER)
    assert drain(parser) == expected + [NEED_DATA]
    parser.receive_data(TRAILER_REST)
    assert drain(parser) == [Command("list-tube-used"), NEED_DATA]


# --- every command, valid --------------------------------------------------------------

VALID = [
    (b"put 0 0 1 5\r\nhello\r\n", Command("put", (0, 0, 1, b"hello"))),
    (b"put 4294967295 4294967295 4294967295 3\r\na\r\n\r\n",
     Command("put", (4294967295, 4294967295, 4294967295, b"a\r\n"))),
    (b"put 1 2 0 0\r\n\r\n", Command("put", (1, 2, 0, b""))),
    (b"put  7  8  9  1\r\n\x00\r\n", Command("put", (7, 8, 9, b"\x00"))),
    (b"put 00 01 02 1\r\nx\r\n", Command("put", (0, 1, 2, b"x"))),
    (b"use foo\r\n", Command("use", ("foo",))),
    (b"use A-Za-z0-9+/;.$_()\r\n", Command("use", ("A-Za-z0-9+/;.$_()",))),
    (b"use " + b"u" * 200 + b"\r\n", Command("use", ("u" * 200,))),
    (b"reserve\r\n", Command("reserve")),
    (b"reserve-with-timeout 0\r\n", Command("reserve-with-timeout", (0,))),
    (b"reserve-with-timeout 5\r\n", Command("reserve-with-timeout", (5,))),
    (b"reserve-job 18446744073709551615\r\n", Command("reserve-job", (2**64 - 1,))),
    (b"delete 1\r\n", Command("delete", (1,))),
    (b"delete  00042\r\n", Command("delete", (42,))),
    (b"release 1 2 3\r\n", Command("release", (1, 2, 3))),
    (b"release 5 4294967295 4294967295\r\n", Command("release", (5, 2**32 - 1, 2**32 - 1))),
    (b"bury 9 100\r\n", Command("bury", (9, 100))),
    (b"touch 3\r\n", Command("touch", (3,))),
    (b"watch bar\r\n", Command("watch", ("bar",))),
    (b"ignore bar\r\n", Command("ignore", ("bar",))),
    (b"peek 0\r\n", Command("peek", (0,))),
    (b"peek-ready\r\n", Command("peek-ready")),
    (b"peek-delayed\r\n", Command("peek-delayed")),
    (b"peek-buried\r\n", Command("peek-buried")),
    (b"kick 0\r\n", Command("kick", (0,))),
    (b"kick 10\r\n", Command("kick", (10,))),
    (b"kick-job 7\r\n", Command("kick-job", (7,))),
    (b"stats-job 7\r\n", Command("stats-job", (7,))),
    (b"stats-tube default\r\n", Command("stats-tube", ("default",))),
    (b"stats\r\n", Command("stats")),
    (b"list-tubes\r\n", Command("list-tubes")),
    (b"list-tube-used\r\n", Command("list-tube-used")),
    (b"list-tubes-watched\r\n", Command("list-tubes-watched")),
    (b"pause-tube default 10\r\n", Command("pause-tube", ("default", 10))),
    (b"pause-tube default 0\r\n", Command("pause-tube", ("default", 0))),
    (b"pause-tube  x  4294967295\r\n", Command("pause-tube", ("x", 2**32 - 1))),
    (b"quit\r\n", Command("quit")),
]


@pytest.mark.parametrize("data,expected", VALID, ids=[repr(d[:30]) for d, _ in VALID])
def test_valid_command_parses_to_typed_command(data, expected):
    assert_parses(data, [expected])


# haqueue's one extension (beanstalkd answers UNKNOWN_COMMAND, so it stays out of VALID,
# which is checked against the real server): an operator's tool names itself.
EXTENSIONS = [
    (b"haqueue-operator console\r\n", Command("haqueue-operator", ("console",))),
    (b"haqueue-operator status-page\r\n", Command("haqueue-operator", ("status-page",))),
]


def test_every_protocol_verb_has_a_valid_case():
    verbs = {name for _, name in bs._PREFIXES}
    assert verbs == {cmd.name for _, cmd in VALID + EXTENSIONS}


@pytest.mark.parametrize("data,expected", EXTENSIONS, ids=[repr(d[:30]) for d, _ in EXTENSIONS])
def test_haqueue_operator_names_the_connection_with_a_tube_like_name(data, expected):
    assert_parses(data, [expected])


def test_haqueue_operator_with_a_name_beanstalkd_would_refuse_is_bad_format():
    assert_parses(b"haqueue-operator two words\r\n", [ProtocolError(bs.BAD_FORMAT)])


# --- surprising acceptances, each checked against the real 1.12 server -------------------

QUIRKS = [
    # pause-tube's verb has no trailing space; the name starts after any spaces.
    (b"pause-tubedefault 1\r\n", Command("pause-tube", ("default", 1))),
    (b"pause-tubes 1\r\n", Command("pause-tube", ("s", 1))),
    # reserve-with-timeout uses strtol, then a C int: junk, signs, wrap-around.
    (b"reserve-with-timeout \r\n", Command("reserve-with-timeout", (0,))),
    (b"reserve-with-timeout abc\r\n", Command("reserve-with-timeout", (0,))),
    (b"reserve-with-timeout 1abc\r\n", Command("reserve-with-timeout", (1,))),
    (b"reserve-with-timeout +3\r\n", Command("reserve-with-timeout", (3,))),
    (b"reserve-with-timeout \t\x0b\x0c\n2\r\n", Command("reserve-with-timeout", (2,))),
    (b"reserve-with-timeout -1\r\n", Command("reserve-with-timeout", (-1,))),
    (b"reserve-with-timeout 4294967297\r\n", Command("reserve-with-timeout", (1,))),
    (b"reserve-with-timeout 2147483648\r\n", Command("reserve-with-timeout", (-(2**31),))),
    (b"reserve-with-timeout 9223372036854775807\r\n", Command("reserve-with-timeout", (-1,))),
    (b"reserve-with-timeout -9223372036854775808\r\n", Command("reserve-with-timeout", (0,))),
    # kick uses strtoul into an unsigned int.
    (b"kick 4294967296\r\n", Command("kick", (0,))),
    (b"kick -1\r\n", Command("kick", (2**32 - 1,))),
    (b"kick -18446744073709551615\r\n", Command("kick", (1,))),
    (b"kick 18446744073709551615\r\n", Command("kick", (2**32 - 1,))),
    (b"kick 5x\r\n", Command("kick", (5,))),
    (b"kick \t+5\r\n", Command("kick", (5,))),
    # anything starting with quit is quit
    (b"quitx\r\n", Command("quit")),
    (b"quit now\r\n", Command("quit")),
]


@pytest.mark.parametrize("data,expected", QUIRKS, ids=[repr(d[:40]) for d, _ in QUIRKS])
def test_lenient_number_and_name_parsing_matches_beanstalkd(data, expected):
    assert_parses(data, [expected])


# --- every error ------------------------------------------------------------------------

ERRORS = [
    # unknown: no prefix matches (case-sensitive; verbs needing a space lack it)
    (b"\r\n", UNKNOWN), (b"foo\r\n", UNKNOWN), (b"USE foo\r\n", UNKNOWN), (b" stats\r\n", UNKNOWN),
    (b"use\r\n", UNKNOWN), (b"delete\r\n", UNKNOWN), (b"peek\r\n", UNKNOWN), (b"kick\r\n", UNKNOWN),
    (b"put\r\n", UNKNOWN), (b"list-tube\r\n", UNKNOWN), (b"touch\r\n", UNKNOWN),
    # NUL anywhere in the line
    (b"\x00\r\n", BAD), (b"stats\x00\r\n", BAD), (b"use foo\x00bar\r\n", BAD),
    # no-argument commands with anything after the verb
    (b"stats \r\n", BAD), (b"statsx\r\n", BAD), (b"reserve \r\n", BAD), (b"reservex\r\n", BAD),
    (b"peek-readyx\r\n", BAD), (b"peek-delayed 1\r\n", BAD), (b"peek-buried \r\n", BAD),
    (b"list-tubesx\r\n", BAD), (b"list-tube-usedx\r\n", BAD), (b"list-tubes-watchedx\r\n", BAD),
    # a verb missing its space falls into a shorter verb's prefix
    (b"stats-job\r\n", BAD), (b"stats-tube\r\n", BAD), (b"reserve-job\r\n", BAD),
    (b"reserve-with-timeout\r\n", BAD), (b"stats\nstats\r\n", BAD),
    # 64-bit ids
    (b"delete -1\r\n", BAD), (b"delete +1\r\n", BAD), (b"delete \r\n", BAD), (b"delete 1 \r\n", BAD),
    (b"delete 1 2\r\n", BAD), (b"delete 1x\r\n", BAD), (b"delete\t1\r\n", UNKNOWN),
    (b"delete 18446744073709551616\r\n", BAD), (b"delete 99999999999999999999\r\n", BAD),
    (b"peek x\r\n", BAD), (b"touch 1 \r\n", BAD), (b"kick-job -5\r\n", BAD),
    (b"stats-job 1x\r\n", BAD), (b"reserve-job 1 \r\n", BAD),
    # release / bury arity and widths
    (b"release 1 2\r\n", BAD), (b"release 1 2 3 4\r\n", BAD), (b"release 1 2 4294967296\r\n", BAD),
    (b"release 1 4294967296 0\r\n", BAD), (b"bury 1\r\n", BAD), (b"bury 1 2 3\r\n", BAD),
    (b"bury 1 4294967296\r\n", BAD),
    # put line errors (no body is read: the next line is parsed as a command)
    (b"put 0 0 1\r\n", BAD), (b"put -1 0 1 1\r\n", BAD), (b"put 0 0 1 +1\r\n", BAD),
    (b"put 4294967296 0 1 1\r\n", BAD), (b"put 0 4294967296 1 1\r\n", BAD),
    (b"put 0 0 4294967296 1\r\n", BAD), (b"put 0 0 1 4294967296\r\n", BAD),
    (b"put 0 0 1 1 \r\n", BAD_PUT), (b"put\t0 0 1 1\r\n", UNKNOWN), (b"put 0 0 1 1 x\r\n", BAD_PUT),
    # tube names
    (b"use \r\n", BAD), (b"use  foo\r\n", BAD), (b"use foo \r\n", BAD), (b"use -foo\r\n", BAD),
    (b"use foo!\r\n", BAD), (b"use foo bar\r\n", BAD), (b"use " + b"u" * 201 + b"\r\n", BAD),
    (b"watch -x\r\n", BAD), (b"ignore a:b\r\n", BAD), (b"stats-tube \r\n", BAD),
    (b"stats-tube default \r\n", BAD), (b"watch " + b"w" * 201 + b"\r\n", BAD),
    # pause-tube
    (b"pause-tube\r\n", BAD), (b"pause-tube default\r\n", BAD), (b"pause-tube default1\r\n", BAD),
    (b"pause-tube default 1 2\r\n", BAD), (b"pause-tube default\t1\r\n", BAD),
    (b"pause-tube default 4294967296\r\n", BAD), (b"pause-tube -x 1\r\n", BAD_PAUSE),
    (b"pause-tube foo! 1\r\n", BAD), (b"pause-tube " + b"c" * 201 + b" 1\r\n", BAD_PAUSE),
    (b"pause-tube -x 4294967296\r\n", BAD),
    # reserve-with-timeout only fails on long overflow
    (b"reserve-with-timeout 9223372036854775808\r\n", BAD),
    (b"reserve-with-timeout -9223372036854775809\r\n", BAD),
    # kick: no digits, or beyond unsigned long
    (b"kick \r\n", BAD), (b"kick x\r\n", BAD), (b"kick -\r\n", BAD),
    (b"kick 18446744073709551616\r\n", BAD), (b"kick -18446744073709551616\r\n", BAD),
]


@pytest.mark.parametrize("data,expected", ERRORS, ids=[repr(d[:40]) for d, _ in ERRORS])
def test_malformed_line_gets_beanstalkd_error_reply(data, expected):
    assert_parses(data, [expected])


def test_no_protocol_error_closes_the_connection():
    for data, _ in ERRORS:
        assert all(not e.close for e in parse_whole(data))


def test_put_rejected_for_bad_format_reads_no_body():
    assert_parses(b"put 0 0 1 6 x\r\nhello\r\n", [BAD_PUT, UNKNOWN])


# --- put bodies --------------------------------------------------------------------------

def test_body_without_crlf_trailer_is_expected_crlf_and_stream_resumes_after_it():
    assert_parses(b"put 0 0 1 5\r\nhelloXYstats\r\n", [CRLF_ERR, Command("stats")])
    assert_parses(b"put 0 0 1 0\r\nab", [CRLF_ERR])
    # the trailer is exactly two bytes: a third is the start of the next line
    assert_parses(b"put 0 0 1 5\r\nhello\n\r\n", [CRLF_ERR], leaves_partial=True)
    assert_parses(b"put 0 0 1 2\r\nabc\r\nstats\r\n", [CRLF_ERR, UNKNOWN])


def test_body_may_contain_crlf_and_nul():
    body = b"a\r\nb\x00\r\n"
    assert_parses(b"put 0 0 1 %d\r\n%b\r\n" % (len(body), body), [Command("put", (0, 0, 1, body))])


def test_body_of_max_job_size_is_accepted():
    body = b"x" * 100
    assert_parses(b"put 0 0 1 100\r\n" + body + b"\r\n", [Command("put", (0, 0, 1, body))],
                  max_job_size=100)


def test_job_too_big_skips_body_and_trailer_then_continues():
    data = b"put 0 0 1 101\r\n" + b"y" * 101 + b"\r\nstats\r\n"
    assert_parses(data, [TOO_BIG, Command("stats")], max_job_size=100)


def test_job_too_big_is_checked_before_trailing_garbage():
    data = b"put 0 0 1 101 junk\r\n" + b"y" * 103 + b"stats\r\n"
    assert_parses(data, [TOO_BIG, Command("stats")], max_job_size=100)


def test_job_too_big_is_reported_only_after_all_skipped_bytes_arrive():
    parser = BeanstalkParser(max_job_size=10)
    parser.receive_data(b"put 0 0 1 4294967295\r\n" + b"z" * 100_000)
    assert drain(parser) == [NEED_DATA]
    assert parser.buffered == 0  # skipped bytes are not kept


def test_default_max_job_size_is_65535():
    assert parse_whole(b"put 0 0 1 65536\r\n" + b"z" * 65538) == [TOO_BIG]
    assert parse_whole(b"put 0 0 1 65535\r\n" + b"z" * 65535 + b"\r\n")[0].name == "put"


# --- line framing: LINE_BUF_SIZE and the first '\r' ----------------------------------------

def use_line(total: int) -> bytes:
    """A `use` line whose length including CRLF is total."""
    return b"use " + b"a" * (total - 6) + b"\r\n"


def test_line_of_224_bytes_fits_the_line_buffer():
    assert_parses(use_line(206), [Command("use", ("a" * 200,))])
    assert_parses(use_line(224), [BAD])  # fits; the 218-byte name is what is wrong
    assert_parses(b"x" * 222 + b"\r\n", [UNKNOWN])


def test_longest_command_fits_exactly():
    line = b"pause-tube " + b"p" * 200 + b" 4294967295\r\n"
    assert len(line) == bs.LINE_BUF_SIZE
    assert_parses(line, [Command("pause-tube", ("p" * 200, 2**32 - 1))])


def test_225_byte_line_loses_its_cr_and_swallows_the_next_command():
    assert_parses(use_line(225) + b"stats\r\n", [BAD])
    assert_parses(use_line(226) + b"stats\r\n", [BAD, Command("stats")])


def test_overlong_line_is_discarded_in_224_byte_blocks():
    assert_parses(b"x" * 446 + b"\r\nstats\r\n", [BAD, Command("stats")])
    assert_parses(b"x" * 447 + b"\r\nstats\r\n", [BAD])  # CRLF straddles blocks 2 and 3
    # in a discarded block, the first '\r' decides too
    assert_parses(b"x" * 224 + b"\rz" + b"x" * 222 + b"\r\nstats\r\n", [BAD, Command("stats")])
    assert_parses(b"x" * 224 + b"\rz" + b"x" * 220 + b"\r\nstats\r\n", [BAD])


def test_cr_without_lf_poisons_the_line_until_the_buffer_fills():
    assert_parses(b"stats\rx\r\nstats\r\n", [], leaves_partial=True)
    assert_parses(b"stats\rx" + b"y" * 217 + b"\r\nstats\r\n", [BAD, Command("stats")])


def test_bare_lf_is_an_ordinary_byte():
    assert_parses(b"stats\n", [], leaves_partial=True)
    assert_parses(b"use foo\nbar\r\n", [BAD])


# --- pipelining, buffering, EOF ------------------------------------------------------------

def test_hundreds_of_pipelined_puts_in_one_buffer():
    data = b"".join(b"put %d 0 60 %d\r\n%b\r\n" % (i, len(b"job%d" % i), b"job%d" % i)
                    for i in range(500))
    events = parse_whole(data)
    assert events == [Command("put", (i, 0, 60, b"job%d" % i)) for i in range(500)]


def test_pipelined_mix_keeps_order():
    data = (b"use t\r\nput 1 2 3 1\r\nx\r\nbogus\r\nwatch t\r\nreserve-with-timeout 0\r\n"
            b"delete 1\r\nput 0 0 1 2\r\nabc\r\nstats\r\npeek 1\r\n")
    # "abc\r\n" is 2 body bytes and a bad trailer "c\r"; then "\nstats" is one unknown line
    assert_parses(data, [
        Command("use", ("t",)), Command("put", (1, 2, 3, b"x")), UNKNOWN, Command("watch", ("t",)),
        Command("reserve-with-timeout", (0,)), Command("delete", (1,)), CRLF_ERR, UNKNOWN,
        Command("peek", (1,)),
    ])


def test_buffer_is_compacted_while_streaming():
    parser = BeanstalkParser()
    chunk = b"put 0 0 1 1000\r\n" + b"b" * 1000 + b"\r\n"
    for _ in range(200):
        parser.receive_data(chunk)
        assert drain(parser) == [Command("put", (0, 0, 1, b"b" * 1000)), NEED_DATA]
    assert len(parser._buf) < 2 * bs._COMPACT_AT


def test_eof_returns_buffered_commands_then_eof_and_drops_a_partial_one():
    parser = BeanstalkParser()
    parser.receive_data(b"stats\r\nput 0 0 1 5\r\nhel")
    parser.receive_data(b"")
    assert drain(parser) == [Command("stats"), EOF]
    assert parser.next_event() is EOF


def test_eof_during_job_too_big_skip_gives_no_reply():
    parser = BeanstalkParser(max_job_size=1)
    parser.receive_data(b"put 0 0 1 5\r\nab")
    parser.receive_data(b"")
    assert drain(parser) == [EOF]


@pytest.mark.parametrize("data, pending", [
    (b"put 0 0 1 5\r\nhel", True),  # the body is awaited
    (b"put 0 0 1 5\r\nhello\r", True),  # so is its trailer
    (b"put 0 0 1 5\r\nhello\r\n", False),  # the put was handed out
    (b"put 0 0 1 9\r\nab", True),  # a too-big body being skipped (max 1 below)
    (b"put 0 0 1 5", False),  # no complete command line: beanstalkd has not dispatched it
    (b"stats\r\n", False),
])
def test_put_pending_says_whether_a_dispatched_put_still_waits_for_bytes(data, pending):
    parser = BeanstalkParser(max_job_size=5 if b"hel" in data else 1)
    parser.receive_data(data)
    drain(parser)
    assert parser.put_pending is pending


def test_receive_after_eof_is_a_programming_error():
    parser = BeanstalkParser()
    parser.receive_data(b"")
    with pytest.raises(RuntimeError):
        parser.receive_data(b"stats\r\n")


def test_fast_dispatch_agrees_with_prot_c_prefix_order():
    lines = [data.split(b"\r\n", 1)[0] for data, _ in VALID + QUIRKS + ERRORS]
    for line in lines:
        events = parse_whole(line + b"\r\n")
        if events and isinstance(events[0], Command):
            assert bs.which_cmd(line) == events[0].name, line
        if events == [UNKNOWN]:
            assert bs.which_cmd(line) is None, line


# --- replies -------------------------------------------------------------------------------

def test_fixed_replies_are_beanstalkd_words():
    assert bs.NOT_FOUND == b"NOT_FOUND\r\n"
    assert bs.DELETED == b"DELETED\r\n"
    assert bs.RELEASED == b"RELEASED\r\n"
    assert bs.BURIED == b"BURIED\r\n"
    assert bs.TOUCHED == b"TOUCHED\r\n"
    assert bs.KICKED == b"KICKED\r\n"
    assert bs.PAUSED == b"PAUSED\r\n"
    assert bs.TIMED_OUT == b"TIMED_OUT\r\n"
    assert bs.DEADLINE_SOON == b"DEADLINE_SOON\r\n"
    assert bs.NOT_IGNORED == b"NOT_IGNORED\r\n"
    assert bs.DRAINING == b"DRAINING\r\n"
    assert bs.OUT_OF_MEMORY == b"OUT_OF_MEMORY\r\n"
    assert bs.INTERNAL_ERROR == b"INTERNAL_ERROR\r\n"
    assert bs.EXPECTED_CRLF == b"EXPECTED_CRLF\r\n"
    assert bs.JOB_TOO_BIG == b"JOB_TOO_BIG\r\n"


def test_variable_replies_are_exact_bytes():
    assert bs.inserted(12) == b"INSERTED 12\r\n"
    assert bs.buried(3) == b"BURIED 3\r\n"
    assert bs.reserved(18446744073709551615, b"a\r\nb") == b"RESERVED 18446744073709551615 4\r\na\r\nb\r\n"
    assert bs.reserved(1, b"") == b"RESERVED 1 0\r\n\r\n"
    assert bs.found(7, b"hello") == b"FOUND 7 5\r\nhello\r\n"
    assert bs.using("a(b)$") == b"USING a(b)$\r\n"
    assert bs.watching(2) == b"WATCHING 2\r\n"
    assert bs.kicked(0) == b"KICKED 0\r\n"
    assert bs.ok(b"---\n- default\n") == b"OK 14\r\n---\n- default\n\r\n"


def test_yaml_renders_like_prot_c():
    body = bs.yaml_dict([("name", "a(b)$;+/._-"), ("current-jobs-ready", 1), ("version", '"1.12"'),
                         ("draining", False), ("rusage-utime", "0.002278")])
    assert body == (b'---\nname: a(b)$;+/._-\ncurrent-jobs-ready: 1\nversion: "1.12"\n'
                    b"draining: false\nrusage-utime: 0.002278\n")
    assert bs.yaml_list(["default", "a(b)$;+/._-"]) == b"---\n- default\n- a(b)$;+/._-\n"
    assert bs.ok(bs.yaml_list(["default"])) == b"OK 14\r\n---\n- default\n\r\n"
    assert bs.yaml_list([]) == b"---\n"


# --- the real server agrees ----------------------------------------------------------------

ERROR_REPLIES = {bs.BAD_FORMAT, bs.UNKNOWN_COMMAND, bs.EXPECTED_CRLF, bs.JOB_TOO_BIG}
STREAMS = [  # framing cases from above, as (bytes, max job size)
    (b"put 0 0 1 6 x\r\nhello\r\n", 65535),
    (b"put 0 0 1 5\r\nhelloXYstats\r\n", 65535),
    (b"put 0 0 1 2\r\nabc\r\nstats\r\n", 65535),
    (b"put 0 0 1 101\r\n" + b"y" * 101 + b"\r\nstats\r\n", 100),
    (b"put 0 0 1 101 junk\r\n" + b"y" * 103 + b"stats\r\n", 100),
    (b"put 0 0 1 100\r\n" + b"x" * 100 + b"\r\n", 100),
    (use_line(224), 65535), (use_line(225) + b"stats\r\n", 65535), (use_line(226) + b"stats\r\n", 65535),
    (b"x" * 446 + b"\r\nstats\r\n", 65535), (b"x" * 447 + b"\r\nstats\r\n", 65535),
    (b"x" * 224 + b"\rz" + b"x" * 222 + b"\r\nstats\r\n", 65535),
    (b"stats\rx" + b"y" * 217 + b"\r\nstats\r\n", 65535),
    (b"pause-tube " + b"p" * 200 + b" 4294967295\r\n", 65535),
]
CORPUS = [(data, 65535) for data, _ in VALID + QUIRKS + ERRORS] + STREAMS


def _blocks_or_closes(events: list) -> bool:
    for event in events:
        if isinstance(event, Command):
            if event.name in ("quit", "reserve"):
                return True
            if event.name == "reserve-with-timeout" and event.args[0] != 0:
                return True
    return False


@pytest.fixture(scope="module")
def real_servers():
    from tests.support.servers import start_beanstalkd

    servers = {}
    try:
        for limit in (65535, 100):
            servers[limit] = start_beanstalkd("-z", str(limit))
        yield servers
    finally:
        for server in servers.values():
            server.stop()


def test_codec_verdicts_match_real_beanstalkd_1_12(real_servers):
    from tests.support.servers import RawConn

    checked = 0
    for data, limit in CORPUS:
        parser = BeanstalkParser(limit)
        parser.receive_data(data)
        events = drain(parser)[:-1]
        if _blocks_or_closes(events):
            continue
        in_sync = parser.buffered == 0 and parser._state == bs._LINE
        server = real_servers[limit]
        with RawConn(server.host, server.port, timeout=3) as conn:
            conn.send(data + (b"peek 0\r\n" if in_sync else b""))  # job 0 never exists
            replies = conn.recv_replies(len(events) + in_sync)
        for event, reply in zip(events, replies):
            if isinstance(event, ProtocolError):
                assert reply == event.reply, (data, event, reply)
            else:
                assert reply not in ERROR_REPLIES, (data, event, reply)
                if event.name == "use":
                    assert reply == bs.using(event.args[0])
        if in_sync:  # nothing more came, and the server is at a line start as the codec is
            assert replies[-1] == bs.NOT_FOUND, (data, replies)
        checked += 1
    assert checked > 140  # all but the blocking and closing cases


def _cmd_counts(conn, names: tuple[str, ...]) -> dict[str, int]:
    conn.send(b"stats\r\n")
    body = conn.recv_reply().decode()
    return {name: int(body.split(f"\ncmd-{name}: ", 1)[1].split("\n", 1)[0]) for name in names}


def test_counts_as_matches_real_beanstalkd_cmd_stats(real_servers):
    from tests.support.servers import RawConn

    server = real_servers[100]
    cases = [data for data, event in ERRORS if isinstance(event, ProtocolError)] + [
        b"put 0 0 1 101\r\n" + b"z" * 103, b"put 0 0 1 1\r\nxyz", b"pause-tube -x 4294967296\r\n"]
    verbs = ("put", "pause-tube")
    with RawConn(server.host, server.port, timeout=3) as conn:
        for data in cases:
            events = parse_whole(data, 100)
            assert all(isinstance(e, ProtocolError) for e in events), data
            before = _cmd_counts(conn, verbs)
            conn.send(data)
            conn.recv_replies(len(events))
            after = _cmd_counts(conn, verbs)
            expected = {verb: sum(e.counts_as == verb for e in events) for verb in verbs}
            assert {v: after[v] - before[v] for v in verbs} == expected, data


def test_request_size_is_the_put_body_being_received_with_its_crlf():
    parser = bs.BeanstalkParser(max_job_size=1 << 20)
    parser.receive_data(b"put 0 0 60 100000\r\n" + b"x" * 10)
    assert parser.request_size == 0  # the line is not parsed until the parser is asked
    assert parser.next_event() is bs.NEED_DATA
    assert parser.request_size == 100_002
    parser.receive_data(b"x" * 99_990 + b"\r\n")
    assert parser.next_event().name == "put"
    assert parser.request_size == 0
