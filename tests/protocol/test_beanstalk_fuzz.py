"""Property tests for the beanstalkd codec: no input raises, splits never change the events,
and the framing agrees with a dumb line-by-line port of beanstalkd 1.12's C read loop."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from haqueue.protocol import beanstalk as bs
from haqueue.protocol.beanstalk import EOF, NEED_DATA, BeanstalkParser, Command, ProtocolError

LINE = bs.LINE_BUF_SIZE
FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def codec_events(stream: bytes, cuts: list[int], max_job_size: int) -> list:
    """Feed stream in pieces of the given sizes (the rest in one piece), then EOF."""
    parser = BeanstalkParser(max_job_size)
    events = []
    pos = 0
    pieces = []
    for size in cuts:
        if pos >= len(stream):
            break
        pieces.append(stream[pos : pos + size])
        pos += size
    pieces.append(stream[pos:])
    for piece in pieces:
        if piece:
            parser.receive_data(piece)
        while (event := parser.next_event()) is not NEED_DATA:
            assert event is not EOF
            events.append(event)
    parser.receive_data(b"")
    while (event := parser.next_event()) is not EOF:
        assert event is not NEED_DATA
        events.append(event)
    assert parser.next_event() is EOF
    return events


def reference_events(stream: bytes, reads: list[int], max_job_size: int) -> list:
    """prot.c's conn_process_io + h_conn, transliterated: a 224-byte cmd buffer, reads bounded
    by the free space in it (each read also bounded by the next size in `reads`), and
    fill_extra_data moving leftovers. Replies are taken as written instantly. Only framing is
    modelled; a complete line is dispatched with the codec's own line parser."""
    pos = 0
    sizes = iter(reads)

    def read(limit: int) -> bytes:
        nonlocal pos
        n = min(limit, next(sizes, limit), len(stream) - pos)
        data = stream[pos : pos + n]
        pos += n
        return data

    def scan_line_end(buf: bytearray) -> int:
        match = buf.find(b"\r", 0, len(buf) - 1)  # memchr(s, '\r', size - 1)
        if match < 0:
            return 0
        return match + 2 if buf[match + 1] == 10 else 0

    events: list = []
    cmd = bytearray()  # c->cmd[:c->cmd_read]
    cmd_len = 0
    state = "command"
    in_job: bytearray | None = None
    in_job_read = 0
    put_args: tuple = ()
    bucket = 0  # in_job_read's other meaning, in bit-bucket mode

    def fill_extra_data() -> None:
        nonlocal cmd, cmd_len, in_job_read, bucket
        if not cmd_len:
            return
        extra = cmd[cmd_len:]
        taken = 0
        if in_job is not None:
            taken = min(len(extra), len(in_job))
            in_job[:taken] = extra[:taken]
            in_job_read = taken
        elif bucket:
            taken = min(len(extra), bucket)
            bucket -= taken
        cmd = bytearray(extra[taken:])
        cmd_len = 0

    def maybe_enqueue_incoming_job() -> None:
        nonlocal in_job, in_job_read, state
        if in_job_read < len(in_job):
            state = "data"
            return
        job = bytes(in_job)
        in_job, in_job_read, state = None, 0, "command"
        if job[-2:] != b"\r\n":
            events.append(ProtocolError(bs.EXPECTED_CRLF, counts_as="put"))
        else:
            events.append(Command("put", put_args + (job[:-2],)))

    def dispatch_cmd() -> None:
        nonlocal in_job, bucket, state, put_args
        result = bs._parse_line(bytes(cmd[: cmd_len - 2]), max_job_size)
        if isinstance(result, bs._ReadBody):
            put_args = (result.pri, result.delay, result.ttr)
            in_job = bytearray(result.size + 2)
            fill_extra_data()
            maybe_enqueue_incoming_job()
        elif isinstance(result, bs._Skip):
            in_job = None
            bucket = result.count
            fill_extra_data()
            if bucket == 0:
                events.append(ProtocolError(bs.JOB_TOO_BIG, counts_as="put"))
            else:
                state = "bitbucket"
        else:
            events.append(result)

    while True:
        if state in ("command", "endline"):
            data = read(LINE - len(cmd))
            if not data:
                break
            cmd += data
            cmd_len = scan_line_end(cmd)
            if state == "command":
                if not cmd_len and len(cmd) == LINE:
                    cmd = bytearray()
                    state = "endline"
            elif cmd_len:
                events.append(ProtocolError(bs.BAD_FORMAT))
                fill_extra_data()
                state = "command"
            elif len(cmd) == LINE:
                cmd = bytearray()
        elif state == "bitbucket":
            data = read(min(bucket, 1024))
            if not data:
                break
            bucket -= len(data)
            if bucket == 0:
                events.append(ProtocolError(bs.JOB_TOO_BIG, counts_as="put"))
                state = "command"
        else:  # data
            data = read(len(in_job) - in_job_read)
            if not data:
                break
            in_job[in_job_read : in_job_read + len(data)] = data
            in_job_read += len(data)
            maybe_enqueue_incoming_job()
        while state == "command" and cmd and (cmd_len := scan_line_end(cmd)):
            dispatch_cmd()
            fill_extra_data()
    return events


# --- strategies ---------------------------------------------------------------------------

names = st.text("abcXYZ019-+/;.$_()", min_size=0, max_size=8).map(str.encode)
numbers = st.one_of(
    st.integers(0, 20).map(lambda n: b"%d" % n),
    st.sampled_from([b"-1", b"+1", b"4294967295", b"4294967296", b"18446744073709551616", b"",
                     b"1x", b" 1", b"007"]),
)


@st.composite
def put_command(draw) -> bytes:
    body = draw(st.binary(max_size=40) | st.sampled_from([b"a\r\n", b"\r\n", b"x" * 300]))
    size = draw(st.sampled_from([len(body), len(body), len(body) + 1, max(0, len(body) - 1)]))
    args = b" ".join([draw(numbers), draw(numbers), draw(numbers), b"%d" % size])
    trailer = draw(st.sampled_from([b"\r\n", b"\r\n", b"\n", b"xy", b""]))
    return b"put " + args + b"\r\n" + body + trailer


simple_lines = st.one_of(
    st.sampled_from([b"stats", b"reserve", b"quit", b"list-tubes", b"list-tube-used",
                     b"list-tubes-watched", b"peek-ready", b"peek-delayed", b"peek-buried"]),
    st.tuples(st.sampled_from([b"use ", b"watch ", b"ignore ", b"stats-tube ", b"pause-tube "]),
              names, st.sampled_from([b"", b" 1", b" x"])).map(b"".join),
    st.tuples(st.sampled_from([b"delete ", b"peek ", b"touch ", b"kick ", b"kick-job ",
                               b"reserve-job ", b"stats-job ", b"reserve-with-timeout ",
                               b"release 1 2 ", b"bury 3 "]), numbers).map(b"".join),
).map(lambda line: line + b"\r\n")

garbage = st.one_of(
    st.binary(max_size=30),
    st.sampled_from([b"\r", b"\n", b"\r\n", b"\x00", b" ", b"\r\r\n"]),
    st.integers(200, 500).map(lambda n: b"x" * n),
    # long lines whose CRLF sits at or next to a 224-byte block boundary
    st.tuples(st.sampled_from([0, 1, 2, 3]), st.integers(-3, 2))
    .map(lambda t: b"x" * max(0, t[0] * LINE + LINE - 2 + t[1]) + b"\r\n"),
)

streams = st.lists(st.one_of(put_command(), simple_lines, garbage), max_size=25).map(b"".join)
cut_sizes = st.lists(st.integers(1, 300), max_size=30)
job_limits = st.sampled_from([0, 1, 5, 40, 65535])


# --- properties ----------------------------------------------------------------------------

def assert_only_events(events: list) -> None:
    for event in events:
        assert type(event) in (Command, ProtocolError)
        if type(event) is ProtocolError:
            assert event.reply in (bs.BAD_FORMAT, bs.UNKNOWN_COMMAND, bs.EXPECTED_CRLF,
                                   bs.JOB_TOO_BIG)
            assert event.close is False
            assert event.counts_as in (None, "put", "pause-tube")
        else:
            for arg in event.args:
                assert type(arg) in (int, str, bytes)


@FUZZ
@given(st.binary(max_size=3000), cut_sizes, job_limits)
def test_arbitrary_bytes_never_raise_and_give_only_events(data, cuts, limit):
    assert_only_events(codec_events(data, cuts, limit))


@FUZZ
@given(streams, cut_sizes, cut_sizes, job_limits)
def test_splitting_never_changes_the_events(stream, cuts_a, cuts_b, limit):
    whole = codec_events(stream, [], limit)
    assert_only_events(whole)
    assert codec_events(stream, cuts_a, limit) == whole
    assert codec_events(stream, cuts_b, limit) == whole


@FUZZ
@given(streams, cut_sizes, cut_sizes, job_limits)
def test_framing_matches_a_port_of_beanstalkd_read_loop(stream, cuts, reads, limit):
    assert codec_events(stream, cuts, limit) == reference_events(stream, reads, limit)


@FUZZ
@given(st.binary(max_size=1500), st.lists(st.integers(1, 230), max_size=20), job_limits)
def test_framing_of_raw_bytes_matches_the_port(data, reads, limit):
    assert codec_events(data, [], limit) == reference_events(data, reads, limit)


def test_reference_port_reproduces_known_server_answers():
    # Known from the real 1.12 server (see test_beanstalk.py); guards the reference itself.
    too_long = b"x" * 223 + b"\r\nstats\r\n"
    assert reference_events(too_long, [7] * 100, 65535) == [ProtocolError(bs.BAD_FORMAT)]
    big = b"put 0 0 1 10\r\n" + b"z" * 12 + b"stats\r\n"
    assert reference_events(big, [3] * 100, 5) == [ProtocolError(bs.JOB_TOO_BIG, counts_as="put"),
                                                   Command("stats")]


# The hot lines' fast path (put, delete, read where they lie in the buffer) against the
# general line parser: whatever it takes, it reads as _parse_line does.
fast_numbers = st.one_of(numbers, st.sampled_from([b"18446744073709551615", b"0" * 30 + b"1"]))
fast_lines = st.one_of(
    st.tuples(st.just(b"put"), st.lists(st.tuples(st.sampled_from([b" ", b"  ", b"", b"\t"]), fast_numbers),
                                         min_size=3, max_size=5)),
    st.tuples(st.sampled_from([b"delete", b"del", b"deletex", b"p", b"d", b"puts"]),
              st.lists(st.tuples(st.sampled_from([b" ", b"  ", b""]), fast_numbers), max_size=2)),
).map(lambda t: t[0] + b"".join(space + number for space, number in t[1]))


@FUZZ
@given(fast_lines, st.binary(max_size=3), st.binary(max_size=3), job_limits)
def test_the_hot_lines_fast_path_reads_each_line_as_the_general_parser(line, before, after, limit):
    buf = bytearray(before + line + after)
    fast = bs._fast_line(buf, len(before), len(before) + len(line), limit)
    if fast is not None:
        assert fast == bs._parse_line(line, limit)
        assert type(fast) is type(bs._parse_line(line, limit))


def test_the_fast_path_takes_the_common_put_and_delete():
    assert bs._fast_line(bytearray(b"put 0 0 60 100"), 0, 14, 65535) == bs._ReadBody(0, 0, 60, 100)
    assert bs._fast_line(bytearray(b"xdelete  12y"), 1, 11, 65535) == Command("delete", (12,))
    assert bs._fast_line(bytearray(b"put 0 0 60 100"), 0, 14, 99) is None  # too big: the general way
