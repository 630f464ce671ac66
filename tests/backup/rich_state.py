"""A queue state with something in every corner a backup must keep (tests only)."""

from __future__ import annotations

from haqueue.core import commands as C
from haqueue.core.state import QueueState

T0 = 1_780_000_000_000  # ms: the old leader's clock at the first entry
CONN = (3 << 32) | 7  # a connection of the old cluster's epoch 3


def rich_state() -> QueueState:
    """Ready, delayed, reserved and buried jobs (buried out of id order), a paused
    tube, id counters in exact and segment use, Gearman jobs queued and scheduled."""
    state = QueueState()
    state.apply_batch(T0, [
        (C.PUT, "default", 10, 0, 60_000, b"ready-1"),
        (C.PUT, "default", 5, 0, 60_000, b"ready-2"),
        (C.PUT, "mail", 100, 30_000, 10_000, b"delayed-30s"),
        (C.PUT, "mail", 7, 0, 120_000, b"to-reserve"),
        (C.PUT, "mail", 1, 0, 5_000, b"bury-me-second"),
        (C.PUT, "mail", 2, 0, 5_000, b"bury-me-first"),
        (C.PUT, "paused", 0, 0, 1_000, b"\x00binary\xff"),
    ])
    state.apply_batch(T0 + 1_000, [
        (C.RESERVE_JOB, CONN, 6),
        (C.BURY, CONN, 6, 2),
        (C.RESERVE_JOB, CONN, 5),
        (C.BURY, CONN, 5, 1),
        (C.RESERVE, CONN, ("mail",)),  # takes job 4 (pri 7), ttr 120 s
        (C.PAUSE_TUBE, "paused", 45_000),
        (C.ID_RESERVE, "o2o", "app-a", 3),
        (C.ID_RESERVE, "counter", "app-b", 1000),
        (C.GM_SUBMIT, CONN, "resize", b"u1", b"img-1", 1, True, 0),
        (C.GM_SUBMIT, CONN, "resize", b"", b"img-later", 1, True, T0 + 3_600_000),
    ])
    assert state.internal_errors == 0
    return state
