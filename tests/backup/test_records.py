"""The backup's records: times made relative to the backup and rebased on the restore's clock."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from haqueue.backup import records as R
from haqueue.core import commands as C
from haqueue.core.job import BURIED, DELAYED, READY, RESERVED
from haqueue.core.results import Tag
from haqueue.core.state import QueueState
from tests.backup.rich_state import CONN, T0, rich_state

TAKEN = T0 + 2_000  # the backup is taken 1 s after the last entry's stamp
LATER = T0 + 86_400_000 * 3 + 12_345  # restored three days later, on another clock


def restore(state: QueueState, taken: int = TAKEN, now: int = LATER, skip: int = 0) -> QueueState:
    return QueueState.from_records(R.restored_records(R.from_state(state, taken), now, skip))


def test_remaining_times_are_kept_across_a_restore_days_later():
    old, new = rich_state(), restore(rich_state())
    # delayed 30 s at T0: 28 s left at the backup, so 28 s left after the restore
    assert new.jobs[3].state == DELAYED and new.jobs[3].deadline == LATER + 28_000
    # reserved at T0+1 s with a 120 s ttr: 119 s left at the backup... then 1 s gone
    assert new.jobs[4].state == RESERVED and new.jobs[4].deadline - LATER == old.jobs[4].deadline - TAKEN
    paused_old, paused_new = old.tubes["paused"], new.tubes["paused"]
    assert paused_new.unpause_at - LATER == paused_old.unpause_at - TAKEN == 44_000
    assert paused_new.paused(LATER) and not paused_new.paused(LATER + 44_000)
    assert LATER - new.jobs[1].created == TAKEN - old.jobs[1].created  # the age stays


def test_jobs_bodies_priorities_ttrs_buried_order_and_counters_survive():
    old, new = rich_state(), restore(rich_state())
    for job_id, job in old.jobs.items():
        twin = new.jobs[job_id]
        assert (twin.tube.name, twin.pri, twin.delay, twin.ttr, twin.body, twin.state, twin.tallies) == (
            job.tube.name, job.pri, job.delay, job.ttr, job.body, job.state, job.tallies)
    assert list(new.tubes["mail"].buried) == [6, 5] == list(old.tubes["mail"].buried)
    assert new.next_id == old.next_id and new.total_jobs == old.total_jobs
    assert new.ids.to_records() == old.ids.to_records()
    import haqueue.core.gearman as G

    assert G.to_records(new.gearman) == G.to_records(old.gearman)  # calendar times stay absolute


def test_new_cluster_starts_below_the_old_connection_epochs_and_frees_their_reservations():
    new = restore(rich_state())
    assert new.conn_epoch_floor == 0
    new.apply_batch(LATER + 5, [(C.RELEASE_ORPHANS, (), 1)])  # the new cluster's first leader, term 1
    assert new.jobs[4].state == READY and new.reserved_count == 0
    result = new.apply_batch(LATER + 6, [(C.RESERVE, (1 << 32) | 1, ("mail",))]).results[0]
    assert result[1] == 4  # a term-1 connection may reserve (the old floor of 3 would refuse it)


def test_skip_moves_job_ids_and_every_id_counter_on():
    old, new = rich_state(), restore(rich_state(), skip=5_000)
    assert new.next_id == old.next_id + 5_000
    before = old.ids.reserve("counter", "app-b", 1, LATER)
    after = new.ids.reserve("counter", "app-b", 1, LATER)
    assert after[1] == before[1] + 5_000


def test_skip_never_takes_a_counter_past_its_end():
    new = restore(rich_state(), skip=10**9)  # o2o counts to 9999 a day
    result = new.ids.reserve("o2o", "app-a", 1, LATER)
    assert result[0] == Tag.EXHAUSTED


def test_auto_skip_covers_a_million_ids_a_second_since_the_backup_and_a_minute():
    assert R.auto_skip(TAKEN, TAKEN) == 60 * R.IDS_PER_SECOND_BOUND
    assert R.auto_skip(TAKEN, TAKEN + 10_000) == 70 * R.IDS_PER_SECOND_BOUND
    assert R.auto_skip(TAKEN, TAKEN - 10_000) == 60 * R.IDS_PER_SECOND_BOUND  # a restore host behind


def test_a_due_deadline_is_left_as_zero_remaining():
    state = rich_state()
    new = restore(state, taken=T0 + 40_000)  # the 30 s delay ran out before the backup (no entry fired it)
    assert new.jobs[3].deadline == LATER
    new.apply_batch(LATER, [(C.TICK,)])
    assert new.jobs[3].state == READY


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["a", "b"]), st.integers(0, 2**32 - 1), st.integers(0, 50_000),
                          st.integers(0, 100_000), st.binary(max_size=20),
                          st.sampled_from(["keep", "reserve", "bury"])), max_size=25),
       st.integers(0, 10**6), st.integers(-10**9, 10**9))
def test_any_state_restores_to_the_same_jobs_with_the_same_time_left(puts, wait, shift):
    state = QueueState()
    state.apply_batch(T0, [(C.PUT, tube, pri, delay, ttr, body) for tube, pri, delay, ttr, body, _ in puts])
    ops = []
    for job_id, (_, _, delay, _, _, what) in enumerate(puts, 1):
        if what != "keep" and not delay:
            ops.append((C.RESERVE_JOB, CONN, job_id))
            if what == "bury":
                ops.append((C.BURY, CONN, job_id, 9))
    state.apply_batch(T0 + 1, ops)
    taken = T0 + 1 + wait
    now = taken + shift
    new = restore(state, taken, now)
    assert sorted(new.jobs) == sorted(state.jobs)
    for job_id, job in state.jobs.items():
        twin = new.jobs[job_id]
        assert (twin.state, twin.pri, twin.ttr, twin.body, twin.tube.name) == (
            job.state, job.pri, job.ttr, job.body, job.tube.name)
        if job.state in (DELAYED, RESERVED):
            assert twin.deadline - now == max(0, job.deadline - taken)
    for name, tube in state.tubes.items():
        assert list(new.tubes[name].buried) == list(tube.buried)
        assert new.tubes[name].ready_count == tube.ready_count
    assert sum(1 for j in new.jobs.values() if j.state == BURIED) == sum(len(t.buried) for t in state.tubes.values())
