"""The reply parsers: every reply checked, fed whole, a byte at a time, and split."""

from __future__ import annotations

import pytest

from haqueue.bench.replies import (
    DELETED,
    MAX_REPLY_LINE,
    ConsumerReplies,
    PutReplies,
    UnexpectedReply,
)

PUT_STREAM = b"INSERTED 1\r\nINSERTED 2\r\nINSERTED 300\r\n"
CONSUMER_STREAM = b"RESERVED 7 5\r\nhello\r\nDELETED\r\nRESERVED 8 4\r\na\r\nb\r\n"
CONSUMER_EVENTS = [(b"7", b"hello"), DELETED, (b"8", b"a\r\nb")]


def fed(stream: bytes, way: str, cut: int) -> list[bytes]:
    """The stream as its reads arrive: whole, a byte at a time, or cut in two at `cut`."""
    if way == "whole":
        return [stream]
    if way == "bytewise":
        return [stream[i : i + 1] for i in range(len(stream))]
    return [stream[:cut], stream[cut:]]


def feed_all(parser, chunks):
    out = []
    for chunk in chunks:
        got = parser.feed(chunk)
        out.extend(got) if isinstance(got, list) else out.append(got)
    return out


@pytest.mark.parametrize("way", ["whole", "bytewise", "cut"])
def test_put_replies_count_every_inserted_however_the_stream_is_split(way):
    chunks = fed(PUT_STREAM, way, cut=15)  # inside the second reply
    assert sum(feed_all(PutReplies(), chunks)) == 3


def test_put_replies_keep_an_incomplete_reply_for_later():
    parser = PutReplies()
    assert parser.feed(b"INSERTED 1\r\nINSERT") == 1
    assert parser.feed(b"ED 2\r\n") == 1


@pytest.mark.parametrize(
    "reply", [b"OUT_OF_MEMORY", b"BURIED 5", b"INSERTED", b"INSERTED x", b"JOB_TOO_BIG", b""]
)
def test_put_reply_other_than_inserted_raises_naming_it(reply):
    with pytest.raises(UnexpectedReply) as err:
        PutReplies().feed(b"INSERTED 1\r\n" + reply + b"\r\nINSERTED 3\r\n")
    assert err.value.line == reply
    assert repr(reply.decode()) in str(err.value)


def test_put_reply_line_without_end_beyond_the_limit_raises():
    with pytest.raises(UnexpectedReply):
        PutReplies().feed(b"X" * (MAX_REPLY_LINE + 1))


@pytest.mark.parametrize("way", ["whole", "bytewise", "cut"])
def test_consumer_replies_yield_reserved_bodies_and_deletes_in_order(way):
    chunks = fed(CONSUMER_STREAM, way, cut=16)  # inside the first body
    assert feed_all(ConsumerReplies(), chunks) == CONSUMER_EVENTS


def test_consumer_replies_wait_for_the_whole_body():
    parser = ConsumerReplies()
    assert parser.feed(b"RESERVED 1 10\r\n0123") == []
    assert parser.feed(b"456789\r\nDELE") == [(b"1", b"0123456789")]
    assert parser.feed(b"TED\r\n") == [DELETED]


def test_consumer_body_longer_than_its_byte_count_raises():
    with pytest.raises(UnexpectedReply, match="longer than its byte count"):
        ConsumerReplies().feed(b"RESERVED 1 3\r\nabcd\r\n")


@pytest.mark.parametrize("reply", [b"TIMED_OUT", b"DEADLINE_SOON", b"NOT_FOUND", b"RESERVED 1"])
def test_consumer_unexpected_reply_raises_naming_it(reply):
    with pytest.raises(UnexpectedReply) as err:
        ConsumerReplies().feed(reply + b"\r\n")
    assert err.value.line == reply
