"""Progress for long work, on a terminal only: one status line redrawn in place.

`Progress(stream)` is enabled only when `stream` is a terminal, so the same
code is quiet in pipes, logs and CI. `update(text)` redraws the status line
(at most every `period` seconds unless forced); `line(text)` prints a line
that stays (the status line is redrawn under it on the next update);
`ticking(text_fn)` redraws `text_fn()` every period from a thread while a
block runs, for work that cannot report its own progress (a benchmark run, a
snapshot being read).
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from typing import Callable, Iterator, TextIO

CLEAR_LINE = "\x1b[K"


class Progress:
    def __init__(self, stream: TextIO | None = None, period: float = 1.0, enabled: bool | None = None) -> None:
        self.stream = stream if stream is not None else sys.stderr
        if enabled is None:
            isatty = getattr(self.stream, "isatty", None)
            enabled = bool(isatty and isatty())
        self.enabled = enabled
        self.period = period
        self._last = float("-inf")
        self._drawn = False
        self._lock = threading.Lock()

    def update(self, text: str, force: bool = False) -> None:
        if not self.enabled:
            return
        with self._lock:
            now = time.monotonic()
            if not force and now - self._last < self.period:
                return
            self._last = now
            self.stream.write("\r" + text + CLEAR_LINE)
            self.stream.flush()
            self._drawn = True

    def line(self, text: str) -> None:
        if not self.enabled:
            return
        with self._lock:
            self.stream.write("\r" + text + CLEAR_LINE + "\n")
            self.stream.flush()
            self._drawn = False

    def clear(self) -> None:
        if not self.enabled:
            return
        with self._lock:
            if self._drawn:
                self.stream.write("\r" + CLEAR_LINE)
                self.stream.flush()
                self._drawn = False

    @contextlib.contextmanager
    def ticking(self, text: Callable[[], str]) -> Iterator[None]:
        """Redraw text() every period while the block runs; clear the line after."""
        if not self.enabled:
            yield
            return
        stop = threading.Event()

        def tick() -> None:
            while not stop.is_set():
                self.update(text(), force=True)
                stop.wait(self.period)

        ticker = threading.Thread(target=tick, name="progress", daemon=True)
        ticker.start()
        try:
            yield
        finally:
            stop.set()
            ticker.join()
            self.clear()


def elapsed(started: float) -> str:
    seconds = int(time.monotonic() - started)
    return f"{seconds // 60}:{seconds % 60:02d}"
