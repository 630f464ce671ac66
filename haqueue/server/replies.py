"""From core results to protocol reply bytes."""

from __future__ import annotations

from haqueue.protocol import beanstalk as P

_FIXED = {
    "DELETED": P.DELETED,
    "NOT_FOUND": P.NOT_FOUND,
    "RELEASED": P.RELEASED,
    "BURIED": P.BURIED,
    "TOUCHED": P.TOUCHED,
    "PAUSED": P.PAUSED,
    "INTERNAL_ERROR": P.INTERNAL_ERROR,
}


def reply_for(result: tuple) -> bytes:
    tag = result[0]
    if tag == "INSERTED":
        return P.inserted(result[1])
    if tag == "RESERVED":
        return P.reserved(result[1], result[2])
    if tag == "KICKED":
        return P.kicked(result[1]) if len(result) > 1 else P.KICKED
    return _FIXED.get(tag, P.INTERNAL_ERROR)
