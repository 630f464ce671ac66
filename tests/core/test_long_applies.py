"""No entry fires more than DEADLINES_PER_ENTRY deadlines (issue 23, B3).

200,000 delayed jobs ending at once took 1.9 s to apply in one entry, longer
than an election timeout: the leader was deposed. Now an entry fires at most
DEADLINES_PER_ENTRY of them, in deadline order, and the rest in the entries that
follow (next_deadline stays in the past, so the leader ticks again at once);
`ready_at`, which lets waiting reserves ride in the ticking entry, counts exactly
what the next entry will fire.
"""

from __future__ import annotations

import random

from haqueue.core import commands as C
from haqueue.core import state as S
from haqueue.core.state import DEADLINES_PER_ENTRY, QueueState

T = 1_000_000


def put(tube: str = "t", delay: int = 0, ttr: int = 60_000, pri: int = 0) -> tuple:
    return (C.PUT, tube, pri, delay, ttr, b"x")


def test_an_entry_fires_at_most_deadlines_per_entry_delays_and_the_rest_later_in_order():
    state = QueueState()
    total = 2 * DEADLINES_PER_ENTRY + 17
    state.apply_batch(T, [put(delay=1000)] * total)
    applied = state.apply_batch(T + 1000, [(C.TICK,)])
    assert state.counts()["ready"] == DEADLINES_PER_ENTRY
    assert applied.effects.next_deadline <= T + 1000  # due already: the leader ticks again at once
    ready = [job.id for job in state.jobs.values() if job.state == S.READY]
    assert ready == list(range(1, DEADLINES_PER_ENTRY + 1))  # ties by id, as heappop gives them
    state.apply_batch(T + 1001, [(C.TICK,)])
    state.apply_batch(T + 1002, [(C.TICK,)])
    assert state.counts()["ready"] == total and state.counts()["delayed"] == 0
    assert state.next_deadline() is None


def test_time_to_runs_share_the_budget_after_the_delays():
    state = QueueState()
    reserved = 300
    state.apply_batch(T, [put(ttr=1000)] * reserved)
    state.apply_batch(T, [(C.RESERVE, 1, ("t",))] * reserved)
    state.apply_batch(T, [put(tube="d", delay=1000)] * (DEADLINES_PER_ENTRY - 100))
    state.apply_batch(T + 1000, [(C.TICK,)])
    assert state.counts()["ready"] == DEADLINES_PER_ENTRY  # every delay, then 100 time-to-runs
    assert state.counts()["reserved"] == reserved - 100 and state.job_timeouts == 100
    state.apply_batch(T + 1001, [(C.TICK,)])
    assert state.counts()["reserved"] == 0 and state.job_timeouts == reserved


def test_ready_at_counts_what_the_next_entry_fires_per_tube():
    rng = random.Random(23)
    state = QueueState()
    tubes = ["a", "b", "c"]
    now = T
    for _ in range(6):
        commands = [put(tube=rng.choice(tubes), delay=rng.randrange(0, 3000), ttr=rng.randrange(1000, 4000))
                    for _ in range(DEADLINES_PER_ENTRY // 2)]
        state.apply_batch(now, commands)
        state.apply_batch(now, [(C.RESERVE, 1, (rng.choice(tubes),))] * 500)
        state.apply_batch(now, [(C.DELETE, 1, job_id) for job_id in rng.sample(sorted(state.jobs), 300)])
        now += 700
    for later in (now + 500, now + 2000, now + 5000):
        expected = state.ready_at(later)
        copy = QueueState.from_records(state.to_records())
        before = {name: copy.reservable(name, later) for name in tubes}
        copy.apply_batch(later, [(C.TICK,)])
        fired = {name: copy.reservable(name, later) - before[name] for name in tubes}
        assert expected == {name: n for name, n in fired.items() if n}
        state = copy
