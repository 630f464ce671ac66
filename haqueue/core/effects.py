"""What applying one log entry did, as values: its results and its effects.

`QueueState.apply_batch` returns an `Applied`, in the manner of etcd raft's
`Ready`: the leader's server reads what it must act on (wake the reserves
waiting on these tubes, forget these empty tubes, arm a timer for this
deadline) from the value, instead of from flags left on the state for it to
reset. Followers ignore the effects; they are the same on every node anyway,
being a function of the state and the entry.
"""

from __future__ import annotations

from typing import AbstractSet, NamedTuple


class Effects(NamedTuple):
    woken: AbstractSet[str]  # tubes in which a job became ready (or a pause ended over ready jobs)
    emptied: AbstractSet[str]  # tubes that lost their last job
    next_deadline: int | None  # the earliest pending delay, time-to-run, pause end or scheduled Gearman job (ms)
    gearman_woken: AbstractSet[str] = frozenset()  # Gearman functions in which a job became grabbable


class Applied(NamedTuple):
    results: list[tuple]  # one per command of the entry, in order
    effects: Effects

