"""How a node writes its log: one line per record, as text or as JSON lines.

Text (the default) is `TIME haqueue[PID] LEVEL logger: message`, TIME in UTC
with milliseconds; when stderr is journald's (systemd sets JOURNAL_STREAM to
its device and inode), the journal stamps each line itself and TIME is left
out. JSON
lines (`haqueue serve --log-json`) give each record as one JSON object with
`ts` (UTC, ISO 8601 with milliseconds), `level`, `logger`, `pid`, `msg`, the
traceback as `exc` when there is one, and an event's own facts (`event`,
`term`, `bytes`, `seconds`, … passed as `extra={"fields": {...}}`, see
haqueue/replication/observed.py) as top-level keys, for log shippers to
index without parsing the message.
"""

from __future__ import annotations

import logging
import sys
import time

TEXT_FORMAT = "haqueue[%(process)d] %(levelname)s %(name)s: %(message)s"


class StampedText(logging.Formatter):
    """TEXT_FORMAT behind the record's UTC time: 2026-11-27T20:43:55.123Z haqueue[…] …"""

    def __init__(self) -> None:
        super().__init__(TEXT_FORMAT)

    def format(self, record: logging.LogRecord) -> str:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z"
        return f"{stamp} {super().format(record)}"


def writes_to_journald(stream) -> bool:
    """True when `stream` is the journald stream systemd gave this process (JOURNAL_STREAM)."""
    import os

    expected = os.environ.get("JOURNAL_STREAM", "")
    if not expected:
        return False
    try:
        st = os.fstat(stream.fileno())
    except (AttributeError, OSError, ValueError):
        return False
    return expected == f"{st.st_dev}:{st.st_ino}"


class JsonLines(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
                  + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "pid": record.process,
            "msg": record.getMessage(),
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            for key, value in fields.items():
                entry.setdefault(key, value)
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        import json  # here, not at start: most nodes log text, and json costs 2 ms to import

        return json.dumps(entry, default=str, separators=(",", ":"))


def configure(verbose: int, json_lines: bool = False, stream=None, show_events: bool = False) -> None:
    """Log to stderr: WARNING and up, -V for INFO, -VV for DEBUG.

    `show_events`: events (haqueue/events.py) too, whatever the verbosity. A
    cluster node's operator needs its elections and step-downs without -V; a
    lone node stays as quiet as the beanstalkd it replaces unless -V. Either
    way the events are kept for /status."""
    stream = stream if stream is not None else sys.stderr
    handler = logging.StreamHandler(stream)
    if json_lines:
        handler.setFormatter(JsonLines())
    elif writes_to_journald(stream):
        handler.setFormatter(logging.Formatter(TEXT_FORMAT))
    else:
        handler.setFormatter(StampedText())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    level = logging.WARNING - 10 * min(verbose, 2)
    root.setLevel(level)
    from haqueue import events  # its logger records INFO, and keeps the recent ones for /status

    events.log.setLevel(min(logging.INFO, level))
    # The events logger records INFO for /status at any verbosity; what reaches
    # stderr is the handler's to decide.
    handler.setLevel(min(logging.INFO, level) if show_events else level)
