"""Progress lines appear on a terminal and nowhere else (haqueue/progress.py)."""

from __future__ import annotations

import io
import os
import pty
import select
import time

from haqueue.progress import Progress


def read_until(fd: int, suffix: bytes, timeout: float = 10.0, done=None) -> bytes:
    """What the pty's master side has received once it ends with `suffix` (or
    `done(data)` holds, or the timeout passes): the kernel hands a pty's writes to
    the reader asynchronously, so the last write may not be readable yet when the
    writer returns."""
    done = done or (lambda data: data.endswith(suffix))
    data = b""
    deadline = time.monotonic() + timeout
    while not done(data):
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
            break
        data += os.read(fd, 65536)
    return data


def test_quiet_when_not_a_terminal():
    out = io.StringIO()
    progress = Progress(out)
    progress.update("working", force=True)
    progress.line("a line")
    with progress.ticking(lambda: "ticking"):
        pass
    assert progress.enabled is False and out.getvalue() == ""


def test_on_a_terminal_the_status_line_is_redrawn_in_place():
    master, slave = pty.openpty()
    try:
        with os.fdopen(slave, "w", closefd=False) as tty:
            # A period no busy machine can outlast between two calls: step 2 is skipped.
            progress = Progress(tty, period=60)
            assert progress.enabled
            progress.update("step 1", force=True)
            progress.update("step 2")  # within the period: skipped
            progress.line("fault 1/3 done")
            ticker = Progress(tty, period=0.05)
            with ticker.ticking(lambda: "tick"):
                # The ticker draws as it starts, then every period: wait for the second draw.
                before = read_until(master, b"", done=lambda data: data.count(b"\rtick\x1b[K") >= 2)
        text = (before + read_until(master, b"\r\x1b[K")).decode()
    finally:
        os.close(master)
        os.close(slave)
    assert "\rstep 1\x1b[K" in text and "step 2" not in text
    assert "\rfault 1/3 done\x1b[K\r\n" in text  # the pty turns \n into \r\n
    assert text.count("\rtick\x1b[K") >= 2  # drawn at the start and redrawn after a period
    assert text.endswith("\r\x1b[K")  # cleared when the block ends
