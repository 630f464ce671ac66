"""The differential harness's own rules: script syntax, escapes, and normalisation."""

from __future__ import annotations

import pytest

from tests.differential.harness import (
    IdMap,
    ScriptError,
    VOLATILE_KEYS,
    decode_text,
    diff,
    normalise_reply,
    parse_script,
    render,
)


def test_script_steps_parse_with_connections_counts_and_timeouts():
    script = parse_script("@args -z 100\n# c\n> put 0 0 1 5\nb>> a\\r\\nb\n< 2 within 4\nc< closed\n"
                          "a~ close\n~ waiting default 2\n>\n")
    assert script.server_args == ["-z", "100"]
    ops = [(s.conn, s.op) for s in script.steps]
    assert ops == [("a", "send"), ("b", "send"), ("a", "recv"), ("c", "closed"), ("a", "close"),
                   ("a", "waiting"), ("a", "send")]
    assert script.steps[0].data == b"put 0 0 1 5\r\n"
    assert script.steps[1].data == b"a\r\nb"
    assert (script.steps[2].count, script.steps[2].timeout) == (2, 4.0)
    assert (script.steps[5].tube, script.steps[5].count) == (b"default", 2)
    assert script.steps[6].data == b"\r\n"


def test_a_connection_can_be_half_closed_and_the_server_drained():
    half, drain = parse_script("b~ half-close\n~ drain").steps
    assert (half.conn, half.op) == ("b", "half-close")
    assert drain.op == "drain"


def test_a_read_can_keep_another_connection_active():
    step = parse_script("b< 1 within 4 nudging a").steps[0]
    assert (step.conn, step.op, step.timeout, step.nudge) == ("b", "recv", 4.0, "a")


@pytest.mark.parametrize("text", ["> stats ", "x stats", "< soon", "~ nap", "> a\\q", "> x\n@args -z 1",
                                  "a< 1 nudging a", "a< closed nudging b"])
def test_malformed_scripts_are_rejected(text):
    with pytest.raises(ScriptError):
        parse_script(text)


def test_text_escapes_and_repetition():
    assert decode_text("use {a*3}\\x20\\t\\0\\\\") == b"use aaa \t\0\\"
    assert decode_text("{put 0 0 1 1\\r\\nx\\r\\n*2}") == b"put 0 0 1 1\r\nx\r\n" * 2


def test_job_ids_are_numbered_in_order_of_appearance():
    ids = IdMap()
    mask = VOLATILE_KEYS
    assert normalise_reply(b"INSERTED 41\r\n", ids, mask) == b"INSERTED #1\r\n"
    assert normalise_reply(b"RESERVED 7 2\r\nhi\r\n", ids, mask) == b"RESERVED #2 2\r\nhi\r\n"
    assert normalise_reply(b"FOUND 41 0\r\n\r\n", ids, mask) == b"FOUND #1 0\r\n\r\n"
    assert normalise_reply(b"BURIED 7\r\n", ids, mask) == b"BURIED #2\r\n"
    assert normalise_reply(b"BURIED\r\n", ids, mask) == b"BURIED\r\n"
    assert normalise_reply(b"KICKED 41\r\n", ids, mask) == b"KICKED 41\r\n"
    assert ids.to_real == {1: b"41", 2: b"7"}


def test_stats_bodies_mask_volatile_values_keep_key_order_and_recount_length():
    ids = IdMap()
    ids.norm(b"1234")
    job = b"---\nid: 1234\ntube: default\nage: 17\nttr: 60\ntime-left: 59\n"
    got = normalise_reply(b"OK %d\r\n%b\r\n" % (len(job), job), ids, VOLATILE_KEYS)
    body = b"---\nid: #1\ntube: default\nage: *\nttr: 60\ntime-left: *\n"
    assert got == b"OK %d\r\n%b\r\n" % (len(body), body)
    server = b'---\ncmd-put: 3\npid: 99\nversion: "1.12"\nid: 0a1b\nhostname: vm\n'
    got = normalise_reply(b"OK %d\r\n%b\r\n" % (len(server), server), ids, VOLATILE_KEYS)
    body = b"---\ncmd-put: 3\npid: *\nversion: *\nid: *\nhostname: *\n"
    assert got == b"OK %d\r\n%b\r\n" % (len(body), body)


def test_rendering_shows_line_ends_and_control_bytes():
    assert render(b"FOUND #1 4\r\na\0\tb\r\n") == ["FOUND #1 4\\r\\n", "a\\x00\\tb\\r\\n"]


def test_diff_names_both_sides():
    text = diff(["a< INSERTED #1\\r\\n"], ["a< BAD_FORMAT\\r\\n"], "beanstalkd 1.12", "haqueue")
    assert "--- beanstalkd 1.12" in text and "+++ haqueue" in text
    assert "-a< INSERTED #1" in text and "+a< BAD_FORMAT" in text
