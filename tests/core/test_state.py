"""QueueState, one command at a time: each rule of beanstalkd 1.12 the core owns.

Stamps are integer milliseconds. Where beanstalkd's behaviour was not obvious
from protocol.txt it was checked against the real /usr/bin/beanstalkd 1.12.
"""

from __future__ import annotations

import tracemalloc
import pickle

import pytest

from haqueue.core import commands as C
from haqueue.core.job import MIN_TTR_MS, SHARED_INTS_LIMIT
from haqueue.core.results import INTERNAL_ERROR, NO_JOB, NOT_FOUND
from haqueue.core.state import QueueState

from .helpers import (
    BODY,
    TICK,
    TTR,
    bury,
    delete,
    drop_conn,
    forget,
    job_state,
    kick,
    kick_job,
    one,
    pause,
    put,
    release,
    release_orphans,
    reserve,
    reserve_job,
    run,
    touch,
)

T0 = 1_000_000  # an arbitrary starting stamp


@pytest.fixture
def state() -> QueueState:
    return QueueState()


def counts(state, **expected):
    """The global counts, with every unspecified count expected to be 0."""
    want = {"urgent": 0, "ready": 0, "reserved": 0, "delayed": 0, "buried": 0}
    want.update(expected)
    return state.counts() == want


# put -----------------------------------------------------------------------
def test_put_inserts_a_ready_job_with_increasing_ids(state):
    assert run(state, T0, put(), put()) == [("INSERTED", 1), ("INSERTED", 2)]
    assert job_state(state, 1) == "ready"
    assert state.tube("default").ready_count == 2
    assert counts(state, ready=2, urgent=2)


def test_put_records_its_arguments_and_stamp(state):
    one(state, T0, put("t", pri=7, delay=0, ttr=5000, body=b"abc"))
    job = state.jobs[1]
    assert (job.tube.name, job.pri, job.delay, job.ttr, job.body, job.created) == ("t", 7, 0, 5000, b"abc", T0)


def test_put_with_delay_stays_delayed_until_stamp_plus_delay(state):
    one(state, T0, put(delay=3000))
    assert job_state(state, 1) == "delayed"
    assert state.job_time_left(state.jobs[1], T0) == 3000
    run(state, T0 + 2999)
    assert job_state(state, 1) == "delayed"
    assert one(state, T0 + 2999, reserve(1)) == NO_JOB
    applied = state.apply_batch(T0 + 3000, [])
    assert job_state(state, 1) == "ready"
    assert applied.effects.woken == {"default"}
    assert one(state, T0 + 3000, reserve(1)) == ("RESERVED", 1, BODY)


@pytest.mark.parametrize("ttr, effective", [(0, 1000), (1, 1000), (999, 1000), (1000, 1000), (1001, 1001)])
def test_put_raises_ttr_below_one_second_to_one_second(state, ttr, effective):
    one(state, T0, put(ttr=ttr))
    assert state.jobs[1].ttr == effective == max(ttr, MIN_TTR_MS)


def test_put_counts_total_jobs_globally_and_per_tube(state):
    run(state, T0, put("a"), put("a"), put("b"))
    run(state, T0, reserve(1, "a"), delete(1, 1))
    assert state.total_jobs == 3
    assert state.tube("a").total_jobs == 2
    assert state.tube("b").total_jobs == 1


# reserve -------------------------------------------------------------------
def test_reserve_picks_lowest_priority_then_lowest_id_across_watched_tubes(state):
    run(state, T0, put("a", pri=5), put("b", pri=3), put("c", pri=3), put("a", pri=1))
    # job 4 (pri 1) is in "a"; among pri 3, job 2 ("b") has the lower id.
    assert one(state, T0, reserve(1, "b", "c", "a")) == ("RESERVED", 4, BODY)
    assert one(state, T0, reserve(1, "c", "b", "a")) == ("RESERVED", 2, BODY)
    assert one(state, T0, reserve(1, "a", "c")) == ("RESERVED", 3, BODY)
    assert one(state, T0, reserve(1, "a", "b", "c")) == ("RESERVED", 1, BODY)
    assert one(state, T0, reserve(1, "a", "b", "c")) == NO_JOB


def test_reserve_only_looks_at_the_watched_tubes(state):
    run(state, T0, put("other", pri=0), put("mine", pri=9))
    assert one(state, T0, reserve(1, "mine")) == ("RESERVED", 2, BODY)
    assert one(state, T0, reserve(1, "mine")) == NO_JOB


def test_reserve_of_a_tube_that_does_not_exist_finds_nothing_and_creates_nothing(state):
    assert one(state, T0, reserve(1, "ghost")) == NO_JOB
    assert "ghost" not in state.tubes


def test_reserve_skips_paused_tubes(state):
    run(state, T0, put("slow", pri=0), put("fast", pri=9), pause("slow", 10_000))
    assert one(state, T0, reserve(1, "slow", "fast")) == ("RESERVED", 2, BODY)
    assert one(state, T0, reserve(1, "slow", "fast")) == NO_JOB
    assert not state.has_ready(["slow"], T0)


def test_reserve_sets_deadline_and_counts_reserves(state):
    run(state, T0, put(ttr=5000), reserve(7))
    job = state.jobs[1]
    assert job_state(state, 1) == "reserved"
    assert job.reserver == 7
    assert job.reserves == 1
    assert job.deadline == T0 + 5000
    assert state.job_time_left(job, T0 + 1000) == 4000
    assert state.reservations_of(7) == {1: job}
    assert state.soonest_reservation_deadline(7) == T0 + 5000
    assert state.reserved_count == 1 == state.tube("default").reserved_count
    assert counts(state, reserved=1)


def test_reserve_ignores_delayed_and_buried_jobs(state):
    run(state, T0, put(delay=1000), put(), reserve(1), bury(1, 2))
    assert one(state, T0, reserve(2)) == NO_JOB


# reserve-job ---------------------------------------------------------------
@pytest.mark.parametrize("setup", ["ready", "delayed", "buried"])
def test_reserve_job_takes_a_ready_delayed_or_buried_job(state, setup):
    if setup == "ready":
        run(state, T0, put())
    elif setup == "delayed":
        run(state, T0, put(delay=50_000))
    else:
        run(state, T0, put(), reserve(1), bury(1, 1))
    assert job_state(state, 1) == setup
    assert one(state, T0 + 10, reserve_job(2, 1)) == ("RESERVED", 1, BODY)
    assert job_state(state, 1) == "reserved"
    assert state.jobs[1].reserver == 2
    assert state.jobs[1].deadline == T0 + 10 + TTR
    assert counts(state, reserved=1)
    assert state.tube("default").job_count == 1


def test_reserve_job_of_a_reserved_job_is_not_found_even_for_its_reserver(state):
    run(state, T0, put(), reserve(1))
    assert one(state, T0, reserve_job(2, 1)) == NOT_FOUND
    assert one(state, T0, reserve_job(1, 1)) == NOT_FOUND
    assert state.jobs[1].reserver == 1
    assert state.jobs[1].reserves == 1


def test_reserve_job_of_an_unknown_id_is_not_found(state):
    assert one(state, T0, reserve_job(1, 42)) == NOT_FOUND


def test_reserve_job_ignores_a_paused_tube(state):
    run(state, T0, put(), pause("default", 60_000))
    assert one(state, T0, reserve_job(1, 1)) == ("RESERVED", 1, BODY)


def test_delayed_job_taken_by_reserve_job_does_not_become_ready_at_its_old_deadline(state):
    run(state, T0, put(delay=1000, ttr=5000), reserve_job(1, 1))
    run(state, T0 + 1000)
    assert job_state(state, 1) == "reserved"
    assert counts(state, reserved=1)


# delete --------------------------------------------------------------------
def test_delete_by_the_reserver_removes_the_job(state):
    run(state, T0, put(), reserve(1))
    assert one(state, T0, delete(1, 1)) == ("DELETED",)
    assert 1 not in state.jobs
    assert state.reservations_of(1) == {}
    assert counts(state)
    assert state.tube("default").cmd_delete == 1


def test_delete_of_a_job_reserved_by_another_connection_is_not_found(state):
    run(state, T0, put(), reserve(1))
    assert one(state, T0, delete(2, 1)) == NOT_FOUND
    assert job_state(state, 1) == "reserved"
    assert state.tube("default").cmd_delete == 0


@pytest.mark.parametrize("setup", ["ready", "delayed", "buried"])
def test_delete_of_an_unreserved_job_works_from_any_connection(state, setup):
    if setup == "ready":
        run(state, T0, put())
    elif setup == "delayed":
        run(state, T0, put(delay=1000))
    else:
        run(state, T0, put(), reserve(1), bury(1, 1))
    assert one(state, T0, delete(99, 1)) == ("DELETED",)
    assert counts(state)
    assert state.tube("default").job_count == 0


def test_delete_twice_is_not_found_the_second_time(state):
    run(state, T0, put())
    assert run(state, T0, delete(1, 1), delete(1, 1)) == [("DELETED",), NOT_FOUND]
    assert state.tube("default").cmd_delete == 1


def test_deleted_delayed_job_never_comes_back(state):
    run(state, T0, put(delay=1000), delete(1, 1))
    run(state, T0 + 5000)
    assert counts(state)
    assert state.next_deadline() is None


# release -------------------------------------------------------------------
def test_release_without_delay_makes_the_job_ready_with_its_new_priority(state):
    run(state, T0, put(pri=500), reserve(1))
    assert one(state, T0, release(1, 1, pri=2000, delay=0)) == ("RELEASED",)
    job = state.jobs[1]
    assert (job_state(state, 1), job.pri, job.delay, job.releases) == ("ready", 2000, 0, 1)
    assert job.reserver is None
    assert state.reservations_of(1) == {}
    assert state.effects().woken == {"default"}
    assert counts(state, ready=1, urgent=0)


def test_release_with_delay_moves_the_job_to_delayed(state):
    run(state, T0, put(), reserve(1))
    assert one(state, T0 + 100, release(1, 1, pri=3, delay=2000)) == ("RELEASED",)
    job = state.jobs[1]
    assert (job_state(state, 1), job.pri, job.delay, job.releases) == ("delayed", 3, 2000, 1)
    assert state.job_time_left(job, T0 + 100) == 2000
    run(state, T0 + 2099)
    assert job_state(state, 1) == "delayed"
    run(state, T0 + 2100)
    assert job_state(state, 1) == "ready"


def test_release_by_another_connection_or_of_an_unreserved_job_is_not_found(state):
    run(state, T0, put(), put(), reserve(1))
    assert one(state, T0, release(2, 1)) == NOT_FOUND
    assert one(state, T0, release(1, 2)) == NOT_FOUND
    assert one(state, T0, release(1, 3)) == NOT_FOUND
    assert state.jobs[1].releases == 0


# bury ----------------------------------------------------------------------
def test_bury_updates_priority_and_counts_buries(state):
    run(state, T0, put(pri=1), reserve(1))
    assert one(state, T0, bury(1, 1, pri=77)) == ("BURIED",)
    job = state.jobs[1]
    assert (job_state(state, 1), job.pri, job.buries) == ("buried", 77, 1)
    assert state.reservations_of(1) == {}
    assert counts(state, buried=1)
    assert state.tube("default").peek_buried() is job


def test_buried_jobs_are_peeked_and_kicked_first_in_first_out(state):
    run(state, T0, put(), put(), put(), reserve(1), reserve(1), reserve(1))
    run(state, T0, bury(1, 3), bury(1, 1), bury(1, 2))
    tube = state.tube("default")
    assert tube.peek_buried().id == 3
    assert one(state, T0, kick(1)) == ("KICKED", 1)
    assert job_state(state, 3) == "ready"
    assert tube.peek_buried().id == 1
    assert one(state, T0, kick(5)) == ("KICKED", 2)
    assert counts(state, ready=3, urgent=3)


def test_bury_by_another_connection_is_not_found(state):
    run(state, T0, put(), reserve(1))
    assert one(state, T0, bury(2, 1)) == NOT_FOUND
    assert job_state(state, 1) == "reserved"


# touch ---------------------------------------------------------------------
def test_touch_restarts_the_time_to_run_from_now(state):
    run(state, T0, put(ttr=1000), reserve(1))
    assert one(state, T0 + 900, touch(1, 1)) == ("TOUCHED",)
    assert state.jobs[1].deadline == T0 + 1900
    run(state, T0 + 1899)
    assert job_state(state, 1) == "reserved"
    run(state, T0 + 1900)
    assert job_state(state, 1) == "ready"
    assert state.jobs[1].timeouts == 1


def test_touch_by_another_connection_or_of_an_unreserved_job_is_not_found(state):
    run(state, T0, put(), put(), reserve(1))
    assert one(state, T0, touch(2, 1)) == NOT_FOUND
    assert one(state, T0, touch(1, 2)) == NOT_FOUND
    assert state.jobs[1].deadline == T0 + TTR


# kick ----------------------------------------------------------------------
def test_kick_takes_buried_jobs_and_leaves_delayed_ones_while_any_is_buried(state):
    run(state, T0, put(delay=5000), put(), reserve(1), bury(1, 2))
    assert one(state, T0, kick(10)) == ("KICKED", 1)
    assert job_state(state, 2) == "ready"
    assert job_state(state, 1) == "delayed"
    assert one(state, T0, kick(10)) == ("KICKED", 1)
    assert job_state(state, 1) == "ready"


def test_kick_respects_the_bound(state):
    run(state, T0, *[put(delay=1000) for _ in range(5)])
    assert one(state, T0, kick(3)) == ("KICKED", 3)
    assert counts(state, ready=3, urgent=3, delayed=2)
    assert one(state, T0, kick(0)) == ("KICKED", 0)
    assert one(state, T0, kick(10)) == ("KICKED", 2)
    assert one(state, T0, kick(10)) == ("KICKED", 0)


def test_kick_moves_delayed_jobs_in_deadline_order_then_id(state):
    run(state, T0, put(delay=3000), put(delay=1000), put(delay=2000), put(delay=1000))
    assert state.tube("default").peek_delayed().id == 2
    for expected in (2, 4, 3, 1):
        one(state, T0, kick(1))
        assert job_state(state, expected) == "ready"


def test_kick_counts_kicks_and_keeps_the_job_delay(state):
    run(state, T0, put(delay=1000), kick(1))
    job = state.jobs[1]
    assert (job.kicks, job.delay) == (1, 1000)
    assert state.job_time_left(job, T0) == 0


def test_kick_of_an_unknown_tube_kicks_nothing(state):
    assert one(state, T0, kick(5, "ghost")) == ("KICKED", 0)


def test_kick_only_touches_its_own_tube(state):
    run(state, T0, put("a", delay=1000), put("b", delay=1000))
    assert one(state, T0, kick(10, "a")) == ("KICKED", 1)
    assert job_state(state, 2) == "delayed"


@pytest.mark.parametrize("setup", ["delayed", "buried"])
def test_kick_job_kicks_a_delayed_or_buried_job(state, setup):
    if setup == "delayed":
        run(state, T0, put(delay=1000))
    else:
        run(state, T0, put(), reserve(1), bury(1, 1))
    assert one(state, T0, kick_job(1)) == ("KICKED",)
    assert job_state(state, 1) == "ready"
    assert state.jobs[1].kicks == 1
    assert counts(state, ready=1, urgent=1)


def test_kick_job_of_a_ready_reserved_or_unknown_job_is_not_found(state):
    run(state, T0, put(), put(), reserve(1))
    assert one(state, T0, kick_job(1)) == NOT_FOUND
    assert one(state, T0, kick_job(2)) == NOT_FOUND
    assert one(state, T0, kick_job(3)) == NOT_FOUND


# pause-tube ----------------------------------------------------------------
def test_pause_tube_holds_reserves_until_the_stamp_where_it_ends(state):
    run(state, T0, put(), pause("default", 5000))
    tube = state.tube("default")
    assert (tube.pause, tube.unpause_at, tube.cmd_pause) == (5000, T0 + 5000, 1)
    assert one(state, T0 + 4999, reserve(1)) == NO_JOB
    assert one(state, T0 + 5000, reserve(1)) == ("RESERVED", 1, BODY)
    assert state.effects().woken == {"default"}
    assert (tube.pause, tube.unpause_at) == (0, 0)


def test_pause_tube_zero_ends_the_pause_at_once(state):
    # beanstalkd 1.12 pauses for 1 ns, so a reserve right after it succeeds.
    run(state, T0, put(), pause("default", 60_000))
    run(state, T0 + 1, pause("default", 0))
    tube = state.tube("default")
    assert tube.cmd_pause == 2
    assert tube.pause == 0
    assert not tube.paused(T0 + 1)
    assert state.effects().woken == {"default"}
    assert one(state, T0 + 1, reserve(1)) == ("RESERVED", 1, BODY)


def test_pause_tube_again_replaces_the_earlier_pause(state):
    run(state, T0, put(), pause("default", 10_000))
    run(state, T0 + 1000, pause("default", 1000))
    assert one(state, T0 + 1999, reserve(1)) == NO_JOB
    assert one(state, T0 + 2000, reserve(1)) == ("RESERVED", 1, BODY)


def test_a_pause_ended_and_restarted_to_the_same_end_counts_its_ready_jobs_once(state):
    # pause, unpause, pause again in the same ms: the heap holds the end twice
    # (found by test_property's ready_at check).
    run(state, T0, put(), pause("default", 1000), pause("default", 0), pause("default", 1000))
    assert state.ready_at(T0 + 1000) == {"default": 1}
    assert one(state, T0 + 1000, reserve(1)) == ("RESERVED", 1, BODY)


def test_pause_ending_without_ready_jobs_does_not_signal_ready(state):
    run(state, T0, pause("empty", 1000))
    run(state, T0 + 1000)
    assert not state.tube("empty").paused(T0 + 1000)
    assert not state.effects().woken


# time-to-run ---------------------------------------------------------------
def test_ttr_expiry_releases_the_job_and_counts_timeouts(state):
    run(state, T0, put(ttr=2000), reserve(1))
    run(state, T0 + 1999)
    assert job_state(state, 1) == "reserved"
    run(state, T0 + 2000)
    job = state.jobs[1]
    assert job_state(state, 1) == "ready"
    assert (job.timeouts, job.releases, job.reserves) == (1, 0, 1)
    assert state.job_timeouts == 1
    assert state.reservations_of(1) == {}
    assert state.effects().woken == {"default"}
    assert one(state, T0 + 2000, delete(1, 1)) == ("DELETED",)  # anyone may now


def test_timed_out_job_cannot_be_released_or_touched_by_its_old_reserver(state):
    run(state, T0, put(ttr=1000), reserve(1))
    assert run(state, T0 + 1000, release(1, 1), touch(1, 1), bury(1, 1)) == [NOT_FOUND] * 3


def test_released_job_does_not_time_out_later(state):
    run(state, T0, put(ttr=1000), reserve(1), release(1, 1))
    run(state, T0 + 5000)
    assert state.job_timeouts == 0
    assert state.jobs[1].timeouts == 0


def test_timeouts_count_across_jobs_globally(state):
    run(state, T0, put(ttr=1000), put(ttr=3000), reserve(1), reserve(2))
    run(state, T0 + 10_000)
    assert [state.jobs[i].timeouts for i in (1, 2)] == [1, 1]
    assert state.job_timeouts == 2


# connections going away ----------------------------------------------------
def test_drop_conn_requeues_its_reservations_without_counting_releases(state):
    run(state, T0, put(), put(), put(), reserve(1), reserve(1), reserve(2))
    assert one(state, T0, drop_conn(1)) == ("OK",)
    for i in (1, 2):
        job = state.jobs[i]
        assert (job_state(state, i), job.releases, job.timeouts, job.reserves) == ("ready", 0, 0, 1)
    assert job_state(state, 3) == "reserved"
    assert state.reservations_of(1) == {}
    assert state.effects().woken == {"default"}
    assert counts(state, ready=2, urgent=2, reserved=1)


def test_drop_conn_some_requeues_at_most_its_limit_lowest_ids_first_and_says_what_is_left(state):
    run(state, T0, *[put() for _ in range(7)], *[reserve(1) for _ in range(6)], reserve(2))
    assert one(state, T0, (C.DROP_CONN_SOME, 1, 4)) == ("OK", 2)
    assert [job_state(state, i) for i in range(1, 8)] == ["ready"] * 4 + ["reserved"] * 3
    assert state.jobs[1].releases == 0 and state.effects().woken == {"default"}
    assert one(state, T0, (C.DROP_CONN_SOME, 1, 4)) == ("OK", 0)
    assert one(state, T0, (C.DROP_CONN_SOME, 1, 4)) == ("OK", 0)  # nothing left: nothing changes
    assert state.reservations_of(1) == {} and job_state(state, 7) == "reserved"


def test_drop_conn_some_in_steps_ends_where_one_drop_conn_does():
    def reserved_by_one() -> QueueState:
        state = QueueState()
        run(state, T0, *[put(pri=i % 3) for i in range(50)], *[reserve(1) for _ in range(40)])
        return state

    whole, steps = reserved_by_one(), reserved_by_one()
    one(whole, T0, drop_conn(1))
    left = 40
    while left:
        _, left = one(steps, T0, (C.DROP_CONN_SOME, 1, 7))
    assert steps.digest() == whole.digest()
    assert steps.counts() == whole.counts()


@pytest.mark.parametrize("command", [(C.DROP_CONN_SOME, 1, 0), (C.DROP_CONN_SOME, "1", 5),
                                     (C.DROP_CONN_SOME, 1, 2.0)])
def test_drop_conn_some_refuses_what_no_server_sends(state, command):
    run(state, T0, put(), reserve(1))
    before = state.digest()
    assert state.apply_batch(T0, [command]).results == [INTERNAL_ERROR]
    assert state.digest() == before


def test_drop_conn_of_a_connection_without_reservations_changes_nothing(state):
    run(state, T0, put(), reserve(1))
    before = state.digest()
    assert one(state, T0, drop_conn(9)) == ("OK",)
    assert state.digest() == before


def test_release_orphans_requeues_every_reservation_not_kept(state):
    run(state, T0, *[put() for _ in range(4)], reserve(1), reserve(2), reserve(3), reserve(4))
    assert one(state, T0, release_orphans(2, 4)) == ("OK",)
    assert [job_state(state, i) for i in (1, 2, 3, 4)] == ["ready", "reserved", "ready", "reserved"]
    assert all(state.jobs[i].releases == 0 for i in (1, 2, 3, 4))
    assert counts(state, ready=2, urgent=2, reserved=2)


def test_release_orphans_with_nothing_kept_requeues_everything(state):
    run(state, T0, put(), reserve(5), release_orphans())
    assert job_state(state, 1) == "ready"


# forget-tube ---------------------------------------------------------------
def test_forget_tube_drops_an_empty_tube(state):
    run(state, T0, put("t"), delete(1, 1))
    assert one(state, T0, forget("t")) == ("OK",)
    assert "t" not in state.tubes


def test_a_forgotten_tube_lets_go_of_its_stale_entries(state):
    # A job deleted while ready or delayed leaves a stale heap entry that points
    # at the job, whose tube points back: a cycle that a frozen collector would
    # never find (server/gc_policy.py). Forgetting the tube cuts it.
    run(state, T0, put("t"), put("t", delay=1000), delete(1, 1), delete(1, 2))
    tube = state.tube("t")
    assert tube.ready and tube.delayed  # stale, lazily cleaned
    assert one(state, T0, forget("t")) == ("OK",)
    assert tube.ready == [] and tube.delayed == []


@pytest.mark.parametrize("setup", ["ready", "delayed", "reserved", "buried"])
def test_forget_tube_keeps_a_tube_that_holds_jobs(state, setup):
    run(state, T0, put("t", delay=1000 if setup == "delayed" else 0))
    if setup in ("reserved", "buried"):
        run(state, T0, reserve(1, "t"))
    if setup == "buried":
        run(state, T0, bury(1, 1))
    assert job_state(state, 1) == setup
    assert one(state, T0, forget("t")) == ("OK",)
    assert "t" in state.tubes
    assert state.tube("t").job_count == 1


def test_forget_tube_of_an_unknown_tube_is_harmless(state):
    assert one(state, T0, forget("ghost")) == ("OK",)
    assert state.tubes == {}


def test_forgotten_paused_tube_comes_back_unpaused(state):
    run(state, T0, pause("t", 60_000), forget("t"), put("t"))
    assert one(state, T0, reserve(1, "t")) == ("RESERVED", 1, BODY)


# ids -----------------------------------------------------------------------
def test_ids_never_repeat_even_after_the_newest_job_is_deleted(state):
    run(state, T0, put(), put(), delete(1, 2), delete(1, 1))
    assert one(state, T0, put()) == ("INSERTED", 3)
    assert state.next_id == 4


def test_ids_continue_after_snapshot_restore(state):
    run(state, T0, put(), put(), delete(1, 2))
    restored = QueueState.deserialize(state.serialize())
    assert one(restored, T0, put()) == ("INSERTED", 3)


# time ----------------------------------------------------------------------
def test_time_never_moves_backwards(state):
    run(state, T0, put(delay=1000, ttr=2000))
    run(state, T0 + 500)
    run(state, T0 - 10_000)  # a new leader whose clock is behind
    assert state.now == T0 + 500
    # Commands in the late batch run at the clamped time.
    run(state, T0 - 10_000, put())
    assert state.jobs[2].created == T0 + 500
    run(state, T0 + 1000)
    assert job_state(state, 1) == "ready"


def test_a_smaller_stamp_does_not_delay_a_reservation_deadline(state):
    run(state, T0, put(ttr=1000))
    run(state, T0 + 800, reserve(1))
    run(state, T0 + 900)
    run(state, T0, touch(1, 1))  # runs at T0+900, not T0
    assert state.jobs[1].deadline == T0 + 1900


def test_tick_only_moves_time(state):
    run(state, T0, put())
    before = state.to_records()
    assert one(state, T0, TICK) == ("OK",)
    assert state.to_records() == before


# counts --------------------------------------------------------------------
def test_urgent_counts_ready_jobs_with_priority_below_1024(state):
    run(state, T0, put(pri=0), put(pri=1023), put(pri=1024), put(pri=2**32 - 1))
    assert counts(state, ready=4, urgent=2)
    assert state.tube("default").urgent_count == 2
    run(state, T0, reserve(1))  # job 1 (pri 0) reserved: no longer urgent
    assert counts(state, ready=3, urgent=1, reserved=1)
    run(state, T0, bury(1, 1, pri=0))  # buried jobs are not urgent
    assert counts(state, ready=3, urgent=1, buried=1)
    run(state, T0, kick(1))
    assert counts(state, ready=4, urgent=2)
    run(state, T0, reserve(1), release(1, 1, pri=5000))  # released as non-urgent
    assert counts(state, ready=4, urgent=1)
    run(state, T0, delete(1, 2))
    assert counts(state, ready=3, urgent=0)


def test_delayed_urgent_jobs_are_not_urgent_until_ready(state):
    run(state, T0, put(pri=0, delay=1000))
    assert counts(state, delayed=1)
    run(state, T0 + 1000)
    assert counts(state, ready=1, urgent=1)


def test_counts_per_tube_follow_the_job_through_every_state(state):
    tube = state.tube("default")

    def per_tube():
        return (tube.ready_count, tube.reserved_count, tube.delayed_count, len(tube.buried), tube.job_count)

    run(state, T0, put())
    assert per_tube() == (1, 0, 0, 0, 1)
    run(state, T0, reserve(1))
    assert per_tube() == (0, 1, 0, 0, 1)
    run(state, T0, release(1, 1, delay=10))
    assert per_tube() == (0, 0, 1, 0, 1)
    run(state, T0, reserve_job(1, 1), bury(1, 1))
    assert per_tube() == (0, 0, 0, 1, 1)
    run(state, T0, delete(1, 1))
    assert per_tube() == (0, 0, 0, 0, 0)


# edge signals for the server -----------------------------------------------
def test_emptied_tubes_names_a_tube_that_lost_its_last_job(state):
    run(state, T0, put("a"), put("a"), put("b"))
    run(state, T0, delete(1, 1))
    assert state.effects().emptied == set()
    run(state, T0, delete(1, 2))
    assert state.effects().emptied == {"a"}


def test_a_ready_put_wakes_its_tube_but_a_delayed_one_does_not(state):
    run(state, T0, put(delay=1000))
    assert not state.effects().woken
    run(state, T0, put())
    assert state.effects().woken == {"default"}


def test_kicks_and_requeues_wake_their_tube(state):
    run(state, T0, put(), put(delay=1000), reserve(1), bury(1, 1))
    for cmd in (kick(1), kick_job(2)):
        run(state, T0, cmd)
        assert state.effects().woken == {"default"}
    run(state, T0, reserve(1))
    run(state, T0, drop_conn(1))
    assert state.effects().woken == {"default"}


# next_deadline --------------------------------------------------------------
def test_next_deadline_is_none_when_nothing_is_timed(state):
    run(state, T0, put(), put(), reserve(1), bury(1, 1))
    assert state.next_deadline() is None


def test_next_deadline_is_the_earliest_delay_ttr_or_pause(state):
    run(state, T0, put(delay=5000), put(ttr=3000), reserve(1))
    assert state.next_deadline() == T0 + 3000
    run(state, T0, pause("default", 2000))
    assert state.next_deadline() == T0 + 2000
    run(state, T0 + 2000)
    assert state.next_deadline() == T0 + 3000
    run(state, T0 + 3000)
    assert state.next_deadline() == T0 + 5000


def test_next_deadline_skips_deadlines_that_no_longer_apply(state):
    run(state, T0, put(delay=1000), put(delay=9000), put(ttr=2000), reserve(1))
    run(state, T0, delete(1, 1), delete(1, 3))
    assert state.next_deadline() == T0 + 9000
    run(state, T0, pause("default", 500), pause("default", 0))
    assert state.next_deadline() == T0 + 9000


def test_next_deadline_follows_a_touch(state):
    run(state, T0, put(ttr=1000), reserve(1))
    run(state, T0 + 500, touch(1, 1))
    assert state.next_deadline() == T0 + 1500


# bad commands ----------------------------------------------------------------
BAD_COMMANDS = [
    None,
    (),
    "put",
    (99,),
    (-1, 1),
    ([C.PUT],),
    (C.TICK, 1),
    (C.PUT,),
    (C.PUT, "default", 1, 0, 1000),
    (C.PUT, "default", 1, 0, 1000, b"x", 1),
    (C.PUT, 7, 1, 0, 1000, b"x"),
    (C.PUT, ["default"], 1, 0, 1000, b"x"),
    (C.PUT, "default", "1", 0, 1000, b"x"),
    (C.PUT, "default", 1.5, 0, 1000, b"x"),
    (C.PUT, "default", None, 0, 1000, b"x"),
    (C.PUT, "default", 1, "0", 1000, b"x"),
    (C.PUT, "default", 1, None, 1000, b"x"),
    (C.PUT, "default", 1, 0, "1000", b"x"),
    (C.PUT, "default", 1, 0, 1000, "x"),
    (C.PUT, "default", 1, 0, 1000, None),
    # priorities are below 2**32 (protocol.txt); a ready entry's key relies on it
    (C.PUT, "default", 2**32, 0, 1000, b"x"),
    (C.PUT, "default", -1, 0, 1000, b"x"),
    (C.RELEASE, 1, 2, 2**32, 0),
    (C.BURY, 1, 4, -1),
    (C.RESERVE, 1),
    (C.RESERVE, [1], ("default",)),
    (C.RESERVE, "1", ("default",)),
    (C.RESERVE, 1, "default"),
    (C.RESERVE, 1, (["default"],)),
    (C.RESERVE, 1, None),
    (C.RESERVE_JOB, [1], 1),
    (C.RESERVE_JOB, 1, "1"),
    (C.DELETE, 1),
    (C.DELETE, [1], 1),
    (C.DELETE, 1, 1.0),
    (C.RELEASE, 1, 2, 100),
    (C.RELEASE, 1, 2, "100", 0),
    (C.RELEASE, 1, 2, 100, "0"),
    (C.RELEASE, 1, 2, 100, None),
    (C.RELEASE, [1], 2, 100, 0),
    (C.BURY, 1, 2, "100"),
    (C.BURY, 1, 2, None),
    (C.BURY, [1], 2, 100),
    (C.TOUCH, [1], 2),
    (C.TOUCH, 1, "2"),
    (C.KICK, "default", "5"),
    (C.KICK, "default", None),
    (C.KICK, None, 5),
    (C.KICK_JOB, "3"),
    (C.KICK_JOB, [3]),
    (C.PAUSE_TUBE, "default", "5"),
    (C.PAUSE_TUBE, "default", None),
    (C.PAUSE_TUBE, ["default"], 5),
    (C.PAUSE_TUBE, "fresh", "5"),
    (C.DROP_CONN, [1]),
    (C.DROP_CONN, "1"),
    (C.RELEASE_ORPHANS, 1),
    (C.RELEASE_ORPHANS, None),
    (C.RELEASE_ORPHANS, "12"),
    (C.RELEASE_ORPHANS, ([1],)),
    (C.RELEASE_ORPHANS, (), "5"),
    (C.RELEASE_ORPHANS, (1,), None),
    (C.RELEASE_ORPHANS, (), 5, 6),
    (C.FORGET_TUBE, ["default"]),
    (C.FORGET_TUBE, None),
]


def _busy_state() -> QueueState:
    """A state with a job in every state, reservations by conns 1 and 2."""
    state = QueueState()
    run(state, T0, put(pri=5), put(pri=1), put(delay=1000), put(), put(), put("other"))
    run(state, T0, reserve(1), reserve(2), bury(2, 1), reserve(1))
    return state


# What follows a bad command: every kind of command, so damage left behind shows.
_AFTER = [
    put(), put("fresh"), reserve(3), reserve(3, "other"), reserve_job(3, 3), release(1, 2, delay=10),
    touch(1, 5), bury(1, 5), kick(2), kick_job(3), delete(3, 4), pause("default", 0), drop_conn(3),
    release_orphans(1), forget("fresh"),
]


@pytest.mark.parametrize("bad", BAD_COMMANDS, ids=repr)
def test_a_bad_command_is_an_internal_error_that_changes_nothing(bad):
    damaged, twin = _busy_state(), _busy_state()
    results = damaged.apply_batch(T0 + 1, [put(), bad, put()]).results
    assert results[1] == INTERNAL_ERROR
    assert damaged.internal_errors == 1
    twin_results = run(twin, T0 + 1, put(), put())
    assert results[0::2] == twin_results
    assert damaged.digest() == twin.digest()
    # Later commands behave exactly as if the bad one had never been applied.
    for stamp in (T0 + 2, T0 + 2000, T0 + 100_000):
        assert damaged.apply_batch(stamp, list(_AFTER)).results == run(twin, stamp, *_AFTER)
        assert damaged.digest() == twin.digest()
        assert damaged.counts() == twin.counts()
        assert damaged.next_deadline() == twin.next_deadline()
    assert damaged.internal_errors == 1


@pytest.mark.parametrize("stamp", [None, "1", 1.5, [1]])
def test_a_batch_with_a_bad_stamp_is_refused_without_raising(stamp):
    state = _busy_state()
    before = state.digest()
    assert state.apply_batch(stamp, [put(), TICK]).results == [INTERNAL_ERROR, INTERNAL_ERROR]
    assert state.internal_errors >= 1
    assert state.digest() == before


@pytest.mark.parametrize("commands", [None, 5, b"\x01"])
def test_a_batch_that_is_not_a_list_of_commands_is_refused_without_raising(commands):
    state = _busy_state()
    before = state.digest()
    assert state.apply_batch(T0 + 1, commands).results == []
    assert state.internal_errors == 1
    assert state.digest() == before


def test_a_bad_command_does_not_stop_the_rest_of_its_batch(state):
    results = state.apply_batch(T0, [put(), (99,), put()]).results
    assert results == [("INSERTED", 1), INTERNAL_ERROR, ("INSERTED", 2)]


# memory ----------------------------------------------------------------------
def test_reserve_release_cycles_of_one_job_keep_the_ready_heap_small(state):
    # A worker that keeps releasing a job it cannot handle, at the same
    # priority and the same ms: every cycle must not leave a live-looking
    # duplicate heap entry behind (that made each push rebuild the heap).
    run(state, T0, put("t", pri=5))
    for _ in range(2000):
        run(state, T0, reserve(1, "t"), release(1, 1, pri=5))
    assert len(state.tube("t").ready) <= 100
    assert one(state, T0, reserve(1, "t")) == ("RESERVED", 1, BODY)
    assert one(state, T0, reserve(1, "t")) == NO_JOB


def test_touching_the_same_job_many_times_in_one_ms_keeps_one_deadline(state):
    run(state, T0, put(ttr=1000), reserve(1))
    run(state, T0 + 1, *[touch(1, 1)] * 2000)
    run(state, T0 + 1001)
    assert state.job_timeouts == 1
    assert job_state(state, 1) == "ready"


def test_finished_jobs_are_not_kept_alive_by_pending_deadlines(state):
    # Jobs reserved with a long ttr, or put with a long delay, then deleted:
    # their bodies must be freed now, not when the old deadline passes.
    big = 20_000
    tracemalloc.start()
    try:
        run(state, T0, put(body=b"warm-up"))  # let the first allocations settle
        base = tracemalloc.get_traced_memory()[0]
        for i in range(1000):
            body = bytes([i % 256]) * big
            job_id = one(state, T0, put(ttr=86_400_000, body=body))[1]
            run(state, T0, reserve_job(1, job_id), touch(1, job_id), delete(1, job_id))
            body = bytes([i % 256]) * big
            job_id = one(state, T0, put(delay=86_400_000, body=body))[1]
            run(state, T0, delete(1, job_id))
            run(state, T0, pause("default", 86_400_000 + i))
        del body
        grown = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
    # 2000 bodies of 20 kB would be 40 MB; the bookkeeping left is far less.
    assert grown < 2_000_000, grown


def test_queued_jobs_share_the_values_clients_repeat():
    # Each entry is decoded into fresh ints, as on every node; equal priorities,
    # delays and ttrs must not cost an int object per job.
    state = QueueState()

    def apply(stamp, *commands):
        return state.apply_batch(*C.decode_batch(C.encode_batch(stamp, list(commands)))).results

    for stamp in (T0, T0 + 1):
        apply(stamp, put(pri=1024, delay=5000, ttr=60_000), put(pri=1024, ttr=60_000))
    jobs = [state.jobs[i] for i in (1, 2, 3, 4)]
    assert all(j.pri is jobs[0].pri and j.ttr is jobs[0].ttr for j in jobs)
    assert jobs[2].delay is jobs[0].delay == 5000
    assert apply(T0 + 2, reserve(1)) == [("RESERVED", 2, BODY)]
    assert apply(T0 + 2, release(1, 2, pri=1024, delay=5000)) == [("RELEASED",)]
    assert jobs[1].pri is jobs[0].pri and jobs[1].delay is jobs[0].delay
    restored = QueueState.deserialize(state.serialize())
    again = [restored.jobs[i] for i in (1, 2, 3, 4)]
    assert all(j.pri is again[0].pri and j.ttr is again[0].ttr for j in again)
    assert again[0].created is again[1].created and again[2].created is again[3].created
    assert restored.digest() == state.digest()


def test_shared_values_are_bounded():
    state = QueueState()
    limit = SHARED_INTS_LIMIT
    run(state, T0, *[put(pri=1000 + i) for i in range(limit + 10)])
    assert len(state._ints) == limit
    assert [state.jobs[i + 1].pri for i in range(limit + 10)] == [1000 + i for i in range(limit + 10)]


# snapshots -------------------------------------------------------------------
def _every_kind_of_state() -> QueueState:
    """Jobs in every state in two tubes, a pause, an epoch floor, some history."""
    state = QueueState()
    run(state, T0, (C.RELEASE_ORPHANS, (), 3))
    conn = 3 << 32 | 1
    run(state, T0, *[put(pri=p) for p in (9, 8, 7, 6, 5)], put("other", delay=4000), put(delay=2000))
    run(state, T0 + 10, reserve(conn), reserve(conn), reserve(conn), reserve(conn))
    run(state, T0 + 20, bury(conn, 4), bury(conn, 5), bury(conn, 3), touch(conn, 2))
    run(state, T0 + 30, pause("other", 9000), delete(conn, 1), reserve(conn + 1))
    return state


FUTURE = [
    (T0 + 40, [kick(1), put(), reserve(3 << 32 | 7), release(3 << 32 | 1, 2, pri=1, delay=100)]),
    (T0 + 3000, [kick(5), reserve(3 << 32 | 7), put("other"), reserve(3 << 32 | 7, "other")]),
    (T0 + 70_000, [reserve(3 << 32 | 7), kick(5), (C.RELEASE_ORPHANS, (), 4), reserve(3 << 32 | 7)]),
]


def test_snapshot_restore_gives_the_same_digest_and_the_same_future():
    original = _every_kind_of_state()
    restored = QueueState.deserialize(original.serialize())
    assert restored.digest() == original.digest()
    assert restored.counts() == original.counts()
    assert restored.next_deadline() == original.next_deadline()
    assert restored.conn_epoch_floor == original.conn_epoch_floor == 3
    for stamp, batch in FUTURE:
        assert run(restored, stamp, *batch) == run(original, stamp, *batch)
        assert restored.digest() == original.digest()
        for name, tube in original.tubes.items():
            twin = restored.tubes[name]
            for peek in ("peek_ready", "peek_delayed", "peek_buried"):
                a, b = getattr(tube, peek)(), getattr(twin, peek)()
                assert (a and a.id) == (b and b.id), (name, peek)


def test_digest_depends_on_values_not_on_which_values_share_an_object():
    shared, separate = QueueState(), QueueState()
    run(shared, T0, put(body=BODY), put(body=BODY))
    run(separate, T0, put(body=bytes(bytearray(BODY))), put(body=bytes(bytearray(BODY))))
    assert shared.to_records() == separate.to_records()
    assert shared.digest() == separate.digest()


def test_snapshot_restore_keeps_buried_jobs_first_in_first_out():
    state = QueueState()
    run(state, T0, put(), put(), put(), reserve(1), reserve(1), reserve(1), bury(1, 3), bury(1, 1), bury(1, 2))
    restored = QueueState.from_records(state.to_records())
    assert restored.tube("default").peek_buried().id == 3
    assert run(restored, T0, kick(1), kick(1)) == [("KICKED", 1)] * 2
    assert [job_state(restored, i) for i in (1, 2, 3)] == ["ready", "buried", "ready"]


def test_buried_order_is_part_of_the_digest():
    a, b = QueueState(), QueueState()
    for s, order in ((a, (1, 2)), (b, (2, 1))):
        run(s, T0, put(), put(), reserve(1), reserve(1), *[bury(1, i) for i in order])
    assert a.digest() != b.digest()


def test_version_1_snapshot_records_are_still_read():
    state = QueueState()
    run(state, T0, put(), put(delay=1000), put(), reserve(1), bury(1, 1))
    version, next_id, now, total, timeouts, tubes, jobs, floor, ids, gearman = state.to_records()
    assert version == 4
    v1_tubes = tuple(t[:6] for t in tubes)
    for records in ((1, next_id, now, total, timeouts, v1_tubes, jobs, floor),
                    (1, next_id, now, total, timeouts, v1_tubes, jobs),
                    (2, next_id, now, total, timeouts, tubes, jobs, floor),  # 2: no id section
                    (3, next_id, now, total, timeouts, tubes, jobs, floor, ids)):  # 3: no Gearman section
        restored = QueueState.from_records(records)
        assert restored.digest() == state.digest()


def test_a_format_3_snapshot_with_a_version_1_ids_section_is_still_read():
    # The ids section grew (rule modes, retired rules) inside snapshot format 3:
    # a snapshot written before that still loads, counters and all.
    state = QueueState()
    run(state, T0, put(), (C.ID_RESERVE, "counter", "app", 3))
    records = state.to_records()
    ids = records[8]
    assert ids[0] == 2
    v1_ids = (1, *ids[1:4], tuple(rule[:7] for rule in ids[4]), ids[5])
    old = pickle.dumps((3, *records[1:8], v1_ids), protocol=5)  # format 3: no Gearman section yet
    restored = QueueState.deserialize(old)
    assert restored.digest() == state.digest()
    assert one(restored, T0, (C.ID_RESERVE, "counter", "app", 1)) == ("RESERVED", 3, 1, 1, T0)


def test_id_rule_changes_are_entries_and_a_refused_set_changes_nothing():
    state = QueueState()
    rule = ("orders", "O{counter:06}", 0, 999_999, 0, 0, 0, "segment", 50)
    records = tuple(sorted(state.ids.rule_records() + (rule,)))
    assert one(state, T0, (C.ID_SET_RULES, records)) == ("OK",)
    assert one(state, T0, (C.ID_RESERVE, "orders", "a", 50)) == ("RESERVED", 0, 50, 1, T0)
    before = state.digest()
    refused = one(state, T0, (C.ID_SET_RULES, (("orders", "Q{counter:06}", 0, 999_999, 0, 0, 0, "exact", 0),)))
    assert refused[0] == "RULES_REFUSED" and "format cannot change" in refused[1]
    assert one(state, T0, (C.ID_SET_RULES, "junk"))[0] == "RULES_REFUSED"
    assert state.digest() == before and state.internal_errors == 0
    restored = QueueState.deserialize(state.serialize())
    assert restored.digest() == state.digest() and restored.ids.rules["orders"].segment == 50


def test_a_snapshot_of_an_unknown_version_is_refused():
    records = (99,) + QueueState().to_records()[1:]
    with pytest.raises(ValueError, match="snapshot format 99"):
        QueueState.from_records(records)


# epochs: a deposed leader's connections ------------------------------------------
def test_release_orphans_raises_the_epoch_floor_and_never_lowers_it(state):
    run(state, T0, (C.RELEASE_ORPHANS, (), 5))
    assert state.conn_epoch_floor == 5
    run(state, T0, (C.RELEASE_ORPHANS, (), 4), release_orphans())
    assert state.conn_epoch_floor == 5


def test_reserves_from_connections_of_an_older_epoch_take_nothing(state):
    old, new = 4 << 32 | 9, 5 << 32 | 1
    run(state, T0, put(), put(), (C.RELEASE_ORPHANS, (), 5))
    assert one(state, T0, reserve(old)) == NO_JOB
    assert one(state, T0, reserve_job(old, 1)) == NOT_FOUND
    assert counts(state, ready=2, urgent=2)
    assert one(state, T0, reserve(new)) == ("RESERVED", 1, BODY)


def test_a_bad_command_is_refused_alone_and_the_batch_goes_on(state):
    run(state, T0, put())
    results = state.apply_batch(T0, [(99,), (C.PUT, "default", "1", 0, 1000, b"x"), reserve(1), ()]).results
    assert results == [INTERNAL_ERROR, INTERNAL_ERROR, ("RESERVED", 1, BODY), INTERNAL_ERROR]
    assert state.internal_errors == 3
    assert state.next_id == 2


def test_id_reservations_ride_the_log_and_the_snapshot():
    state = QueueState()
    # The built-in `counter` rule starts at 0: two values, 0 and 1, stamped with the entry.
    assert run(state, T0, (C.ID_RESERVE, "counter", "app", 2), put()) == [("RESERVED", 0, 2, 1, T0),
                                                                          ("INSERTED", 1)]
    restored = QueueState.deserialize(state.serialize())
    assert restored.digest() == state.digest()
    assert run(restored, T0 + 1, (C.ID_RESERVE, "counter", "app", 1)) == \
        run(state, T0 + 1, (C.ID_RESERVE, "counter", "app", 1))


def test_the_read_queries_name_the_next_job_of_each_queue_and_what_a_reserve_could_take(state):
    run(state, T0, put(pri=5), put(pri=1), put(delay=5000), put(), put(tube="other"))
    run(state, T0, reserve(1), bury(1, 2))
    assert state.job(1).id == 1 and state.job(99) is None
    assert state.peek_ready("default").id == 1  # job 2, the more urgent, is buried
    assert state.peek_delayed("default").id == 3
    assert state.peek_buried("default").id == 2
    assert state.peek_ready("nowhere") is state.peek_delayed("nowhere") is state.peek_buried("nowhere") is None
    assert state.reservable("default", T0) == 2
    run(state, T0, pause("default", 1000))
    assert state.reservable("default", T0) == 0
    assert state.reservable("default", T0 + 1000) == 2
    assert state.reservable("other", T0) == 1 and state.reservable("nowhere", T0) == 0
