"""The results of the queue core's commands: one definition for the core and the replies.

A result is a small tuple whose first element, its tag, names the protocol
reply it stands for; the rest are the reply's values. Plain tuples, not
classes: a put answers one per command on the hot path, and a tuple literal
is the cheapest thing Python builds. The shapes:

    (INSERTED, id)                          put
    (RESERVED, id, body)                    reserve, reserve-job
    (KICKED, count)                         kick
    (RESERVED, first, count, step, now_ms)  id-reserve (core/ids.py)
    (EXHAUSTED, cycle_end_ms | None)        id-reserve past the cycle's last value
    (RULES_REFUSED, problem)                id-set-rules that could repeat ids (core/ids.py)
    (CREATED, handle)                       a Gearman submission (core/gearman.py)
    (ASSIGN, handle, function, unique, data)  a Gearman grab that found a job
    (STATUS, clients)                       a Gearman WORK_STATUS, to forward to its clients
    (ENDED, clients)                        a Gearman WORK_COMPLETE/FAIL/EXCEPTION, likewise
    (OK, left)                              drop-conn-some: reservations the closed connection still holds

and the results without values below, one shared tuple each. The server maps
them to bytes in server/beanstalk/replies.py (the Gearman ones in server/gearman/session.py;
the id service's in server/ids/udp.py); the tags are the protocol's words, so a
test can still write ("INSERTED", 1). The server compares tags by these names, never as
string literals.
"""

from __future__ import annotations


class Tag:
    """The first element of every result."""

    INSERTED = "INSERTED"
    RESERVED = "RESERVED"
    KICKED = "KICKED"
    DELETED = "DELETED"
    RELEASED = "RELEASED"
    BURIED = "BURIED"
    TOUCHED = "TOUCHED"
    PAUSED = "PAUSED"
    NOT_FOUND = "NOT_FOUND"
    NO_JOB = "NO_JOB"
    OK = "OK"
    INTERNAL_ERROR = "INTERNAL_ERROR"
    # the id service
    EXHAUSTED = "EXHAUSTED"
    UNKNOWN_RULE = "UNKNOWN_RULE"
    TOO_MANY_APPS = "TOO_MANY_APPS"
    BAD_ARGUMENTS = "BAD_ARGUMENTS"
    RULES_REFUSED = "RULES_REFUSED"
    # Gearman (core/gearman.py)
    CREATED = "CREATED"
    ASSIGN = "ASSIGN"
    STATUS = "STATUS"
    ENDED = "ENDED"
    REQUEUED = "REQUEUED"
    QUEUE_FULL = "QUEUE_FULL"


NOT_FOUND = (Tag.NOT_FOUND,)
DELETED = (Tag.DELETED,)
RELEASED = (Tag.RELEASED,)
BURIED = (Tag.BURIED,)
TOUCHED = (Tag.TOUCHED,)
PAUSED = (Tag.PAUSED,)
KICKED = (Tag.KICKED,)  # kick-job: no count
NO_JOB = (Tag.NO_JOB,)  # reserve found nothing ready: the session waits
DONE = (Tag.OK,)  # internal commands (tick, drop-conn, …)
INTERNAL_ERROR = (Tag.INTERNAL_ERROR,)  # a command no server should send, or a bug: counted
UNKNOWN_RULE = (Tag.UNKNOWN_RULE,)
TOO_MANY_APPS = (Tag.TOO_MANY_APPS,)
BAD_ARGUMENTS = (Tag.BAD_ARGUMENTS,)
QUEUE_FULL = (Tag.QUEUE_FULL,)  # a Gearman submission beyond the function's queue limit
REQUEUED = (Tag.REQUEUED,)  # a Gearman job back in its queue (CAN_DO_TIMEOUT ran out)
