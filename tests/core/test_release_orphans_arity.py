"""RELEASE_ORPHANS has two shapes in the log, and both apply the same way (core/commands.py, "A recorded exception").

The epoch was added to RELEASE_ORPHANS in the repository's third commit,
before any stored data directory or release, without a new opcode. The
decision recorded there: keep opcode 12, read a command of two fields as
epoch 0, which is exactly what the code before the epoch did with it.
"""

from __future__ import annotations

from haqueue.core import commands as C
from haqueue.core.job import READY, RESERVED
from haqueue.core.state import QueueState
from tests.core.helpers import put, reserve, run

T0 = 1_700_000_000_000


def after(*commands) -> QueueState:
    state = QueueState()
    run(state, T0, put(), put(), reserve(1 << 32 | 1), reserve(1 << 32 | 2))
    run(state, T0 + 1, *commands)
    return state


def test_release_orphans_without_an_epoch_applies_as_epoch_zero():
    two_fields = after((C.RELEASE_ORPHANS, (1 << 32 | 2,)))
    epoch_zero = after((C.RELEASE_ORPHANS, (1 << 32 | 2,), 0))
    assert two_fields.digest() == epoch_zero.digest()
    assert two_fields.conn_epoch_floor == 0
    assert [job.state for _, job in sorted(two_fields.jobs.items())] == [READY, RESERVED]


def test_release_orphans_with_an_epoch_raises_the_floor_only_then():
    assert after((C.RELEASE_ORPHANS, (), 3)).conn_epoch_floor == 3
    assert after((C.RELEASE_ORPHANS, ())).conn_epoch_floor == 0
