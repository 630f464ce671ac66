"""Progress lines appear on a terminal and nowhere else (haqueue/progress.py)."""

from __future__ import annotations

import io
import os
import pty
import time

from haqueue.progress import Progress


def read_all(fd: int) -> bytes:
    chunks = []
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            break
        if not chunk:
            break
        chunks.append(chunk)
        if len(chunk) < 65536:
            break
    return b"".join(chunks)


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
                time.sleep(0.12)  # the ticker draws as it starts, then every period
        text = read_all(master).decode()
    finally:
        os.close(master)
        os.close(slave)
    assert "\rstep 1\x1b[K" in text and "step 2" not in text
    assert "\rfault 1/3 done\x1b[K\r\n" in text  # the pty turns \n into \r\n
    assert "\rtick\x1b[K" in text
    assert text.endswith("\r\x1b[K")  # cleared when the block ends
