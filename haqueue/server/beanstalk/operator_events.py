"""What an operator changed, as events (haqueue/events.py): who, what, which job.

A connection becomes an operator's when it names itself with haqueue's one
protocol extension, `haqueue-operator NAME` (the console sends
`haqueue-operator console`; the status page's own in-memory connections are
`status-page`). From then on each change it logs (put, delete, kick,
kick-job, bury, release, touch, pause-tube, reserve-job) becomes one event
once its entry is applied, naming the operator and its address, the
operation, the job or tube, and the outcome. Reads (peeks, stats) change
nothing and are not events.

Only named connections pay for this: a worker's deletes and puts never pass
here (events are for rare moments; nothing on a client's per-command path
records one).
"""

from __future__ import annotations

from typing import Callable

from haqueue import events
from haqueue.core import commands as C
from haqueue.core.results import Tag

EVENT = "operator"


def describe(command: tuple) -> tuple[str, dict]:
    """(what, facts) for a logged command: its verb and the job or tube it names."""
    op = command[0]
    name = C.NAMES.get(op, str(op))
    if op == C.PUT:
        _, tube, pri, delay_ms, ttr_ms, body = command
        return name, {"tube": tube, "pri": pri, "bytes": len(body)}
    if op in (C.DELETE, C.RESERVE_JOB, C.TOUCH, C.BURY, C.RELEASE):
        return name, {"job": command[2]}
    if op == C.KICK_JOB:
        return name, {"job": command[1]}
    if op == C.KICK:
        return name, {"tube": command[1], "bound": command[2]}
    if op == C.PAUSE_TUBE:
        return name, {"tube": command[1]}
    return name, {}


def outcome(result: tuple | None) -> tuple[str, dict]:
    """The reply's word, and the job id a put made or the count a kick moved."""
    if result is None:
        return "outcome unknown", {}
    tag = result[0]
    if tag == Tag.INSERTED:
        return f"{tag} {result[1]}", {"job": result[1]}
    if tag == Tag.KICKED and len(result) > 1:
        return f"{tag} {result[1]}", {"kicked": result[1]}
    if tag == Tag.RESERVED:
        return tag, {}
    return str(tag), {}


def recording(who: str, command: tuple, then: Callable[[tuple | None], None]) -> Callable:
    """`then`, after recording the operator's change with its result as an event."""

    def done(result) -> None:
        what, facts = describe(command)
        said, more = outcome(result)
        facts.update(more)
        target = (f" job {facts['job']}" if "job" in facts else "") + (
            f" tube {facts['tube']}" if "tube" in facts else "")
        events.record(EVENT, "%s: %s%s: %s", who, what, target, said, who=who, operation=what,
                      result=said, **facts)
        then(result)

    return done


def who_of(name: str, peer) -> str:
    """"console at 127.0.0.1:41234": the name a connection gave, and where it is."""
    if isinstance(peer, tuple) and len(peer) >= 2:
        host, port = peer[0], peer[1]
        return f"{name} at {'[' + host + ']' if ':' in str(host) else host}:{port}"
    return f"{name} at {peer}" if peer else name
