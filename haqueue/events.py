"""Events: what happened on this node, for an operator to read afterwards.

An event is one of the moments an operator asks about after the fact:
leadership won or lost, a vote or pre-vote granted or refused (and why), a
step-down, the read lease lost, a snapshot started, finished or failed, the
journal poisoned, the disk reserve crossed, an operator's action on a queue.
Each is one line at INFO on the "haqueue.events" logger, which logs.configure
keeps at INFO whatever -V says (events are rare; an operator needs them
without turning on debug output), with the event's facts as
`extra={"fields": ...}` for the JSON-lines format (haqueue/logs.py).

Every such record, whoever logged it, is also kept in memory: the last
`KEPT` of them, newest last, which /status shows as "events". The ring is
filled by a logging handler on the events logger, so code that logs an event
the old way (`log.info(..., extra={"fields": {"event": ...}})` on
"haqueue.events") is kept too.

`record` is safe from any thread (logging's handlers lock), and cheap enough
for rare moments; nothing on a per-command path calls it.
"""

from __future__ import annotations

import collections
import logging
import time

LOGGER_NAME = "haqueue.events"
KEPT = 50  # /status shows this many; issue 23 asks for the last 50

log = logging.getLogger(LOGGER_NAME)


class RecentEvents(logging.Handler):
    """Keeps the last `KEPT` event records as plain dicts (time, event, message, facts)."""

    def __init__(self, kept: int = KEPT) -> None:
        super().__init__(level=logging.INFO)
        self.kept: collections.deque[dict] = collections.deque(maxlen=kept)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            fields = getattr(record, "fields", None)
            entry = {
                "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
                      + f".{int(record.msecs):03d}Z",
                "level": record.levelname.lower(),
                "msg": record.getMessage(),
            }
            if isinstance(fields, dict):
                for key, value in fields.items():
                    entry.setdefault(key, value)
            entry.setdefault("event", "message")
            self.kept.append(entry)
        except Exception:  # a handler never raises into the code that logged
            self.handleError(record)


_recent = RecentEvents()
log.addHandler(_recent)
# Events are INFO; the node's default verbosity (WARNING) must still show them.
log.setLevel(logging.INFO)


def record(event: str, message: str, *args, level: int = logging.INFO, **fields) -> None:
    """Log one event: `message % args` as the line, `event` and `fields` as its facts."""
    log.log(level, message, *args, extra={"fields": {"event": event, **fields}})


def recent(limit: int = KEPT) -> list[dict]:
    """The last `limit` events kept on this node, oldest first."""
    items = list(_recent.kept)
    return items[-limit:] if limit < len(items) else items


def clear() -> None:
    """Forget the kept events (tests)."""
    _recent.kept.clear()
