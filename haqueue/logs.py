"""How a node writes its log: one line per record, as text or as JSON lines.

Text (the default) is `haqueue[PID] LEVEL logger: message`, as before. JSON
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


def configure(verbose: int, json_lines: bool = False, stream=None) -> None:
    """Log to stderr: WARNING and up, -V for INFO, -VV for DEBUG."""
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(JsonLines() if json_lines else logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(logging.WARNING - 10 * min(verbose, 2))
