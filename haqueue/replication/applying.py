"""Applying one decoded entry to the queue state: the step every replica shares."""

from __future__ import annotations

import logging

from haqueue.core.effects import Applied

log = logging.getLogger(__name__)


def apply_entry(state, stamp: int, commands: list) -> Applied:
    """Apply one entry. Readers run on the same thread (the event loop's), between
    entries, so none sees half of one and no lock is needed.

    A bug in the core (client input never reaches it unchecked) comes back as
    INTERNAL_ERROR results, the same on every node, and is logged loudly here.
    """
    errors_before = state.internal_errors
    applied = state.apply_batch(stamp, commands)
    if state.internal_errors != errors_before:
        log.error("queue core failed on %d command(s) of an entry (opcodes %s); answered INTERNAL_ERROR",
                  state.internal_errors - errors_before,
                  sorted({c[0] for c in commands if isinstance(c, tuple) and c}))
    return applied
