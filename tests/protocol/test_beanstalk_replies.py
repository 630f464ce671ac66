"""The client side's reply reader (haqueue/protocol/beanstalk_replies.py): every reply fed
whole, one byte at a time, and with the next reply's first bytes left over."""

from __future__ import annotations

import pytest

from haqueue.protocol.beanstalk_replies import Reply, ReplyError, ReplyReader, yaml_fields, yaml_items

CASES = [
    (b"INSERTED 12\r\n", Reply("INSERTED", ("12",))),
    (b"NOT_FOUND\r\n", Reply("NOT_FOUND")),
    (b"FOUND 3 5\r\nhe\r\no\r\n", Reply("FOUND", ("3",), b"he\r\no")),
    (b"RESERVED 9 0\r\n\r\n", Reply("RESERVED", ("9",), b"")),
    (b"OK 12\r\n---\n- a\n- b\n\r\n", Reply("OK", (), b"---\n- a\n- b\n")),
    (b"KICKED 4\r\n", Reply("KICKED", ("4",))),
]


@pytest.mark.parametrize("data,expected", CASES, ids=[repr(d[:12]) for d, _ in CASES])
def test_a_reply_reads_the_same_whole_bytewise_and_with_trailing_bytes(data, expected):
    assert ReplyReader().feed(data) == [expected]
    reader = ReplyReader()
    got = []
    for i in range(len(data)):
        got += reader.feed(data[i:i + 1])
    assert got == [expected]
    reader = ReplyReader()
    assert reader.feed(data + b"FOUND 1 3\r\nab") == [expected]
    assert reader.feed(b"c\r\n") == [Reply("FOUND", ("1",), b"abc")]


def test_a_body_not_followed_by_crlf_is_not_a_beanstalkd_reply():
    with pytest.raises(ReplyError):
        ReplyReader().feed(b"FOUND 1 2\r\nabcd\r\n")


def test_an_endless_line_is_not_a_beanstalkd_reply():
    with pytest.raises(ReplyError):
        ReplyReader().feed(b"X" * 300)


def test_stats_and_lists_read_as_beanstalkd_writes_them():
    assert yaml_fields(b'---\nname: 123\ncurrent-jobs-ready: 4\nversion: "1.12"\nrusage-utime: 0.5\n') == \
        {"name": "123", "current-jobs-ready": 4, "version": "1.12", "rusage-utime": 0.5}
    assert yaml_items(b"---\n- default\n- 2\n") == ["default", "2"]
