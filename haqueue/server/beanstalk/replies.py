"""From core results (core/results.py) to protocol reply bytes."""

from __future__ import annotations

from haqueue.core.results import Tag
from haqueue.protocol import beanstalk as P

_FIXED = {
    Tag.DELETED: P.DELETED,
    Tag.NOT_FOUND: P.NOT_FOUND,
    Tag.RELEASED: P.RELEASED,
    Tag.BURIED: P.BURIED,
    Tag.TOUCHED: P.TOUCHED,
    Tag.PAUSED: P.PAUSED,
    Tag.INTERNAL_ERROR: P.INTERNAL_ERROR,
}


def reply_for(result: tuple) -> bytes:
    tag = result[0]
    fixed = _FIXED.get(tag)
    if fixed is not None:
        return fixed
    if tag == Tag.INSERTED:
        return P.inserted(result[1])
    if tag == Tag.RESERVED:
        return P.reserved(result[1], result[2])
    if tag == Tag.KICKED:
        return P.kicked(result[1]) if len(result) > 1 else P.KICKED
    return P.INTERNAL_ERROR
