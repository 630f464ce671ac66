"""A job body shown to a person: safe, bounded, and honest about binary data.

`preview(body, limit)` returns a Preview: `kind` is "text" when the body is
UTF-8 without control characters other than tab, newline and carriage return,
else "binary"; `text` is what to show (text: the body itself, cut at `limit`
characters; binary: a hex dump of the first `limit // 4` bytes); `truncated`
says a part was left out; `size` is the whole body's length in bytes.

The text is plain data, never markup: the status page puts it into the
document as text (`textContent`), and `terminal_safe` escapes what a terminal
would act on (escape sequences, other control characters), so a hostile body
can neither script the page nor redraw the operator's terminal.
"""

from __future__ import annotations

import re
from typing import NamedTuple

PAGE_LIMIT = 2000  # characters of a body the status page shows
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")


class Preview(NamedTuple):
    kind: str  # "text" or "binary"
    text: str
    truncated: bool
    size: int

    def as_dict(self) -> dict:
        return self._asdict()


def preview(body: bytes, limit: int = PAGE_LIMIT) -> Preview:
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if text is not None and not _CONTROL.search(text):
        return Preview("text", text[:limit], len(text) > limit, len(body))
    shown = body[:max(1, limit // 4)]
    return Preview("binary", shown.hex(" "), len(shown) < len(body), len(body))


def terminal_safe(text: str) -> str:
    """`text` with every control character but newline and tab written as \\xNN."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text.replace("\r", "\\r"))
