"""GearmanState (haqueue/core/gearman.py): gearmand's queue semantics, deterministic."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from haqueue.core.gearman import HIGH, LOW, NORMAL, QUEUED, RUNNING, GearmanState
from haqueue.core.results import NO_JOB, QUEUE_FULL

T = 1_700_000_000_000
CLIENT, WORKER, OTHER = 1, 2, 3


def submit(state, function="f", unique=b"", data=b"d", priority=NORMAL, background=True, run_at=0,
           client=CLIENT, now=T):
    result = state.submit(function, unique, data, priority, background, run_at, client, now)
    return result[1] if result[0] == "CREATED" else result


def test_high_before_normal_before_low_and_first_in_first_out_within_each():
    state = GearmanState()
    handles = [submit(state, data=b"low1", priority=LOW), submit(state, data=b"n1"),
               submit(state, data=b"high", priority=HIGH), submit(state, data=b"n2")]
    assert handles == ["H:haqueue:1", "H:haqueue:2", "H:haqueue:3", "H:haqueue:4"]
    order = [state.grab(WORKER, ("f",), T)[4] for _ in range(4)]
    assert order == [b"high", b"n1", b"n2", b"low1"]
    assert state.grab(WORKER, ("f",), T) == NO_JOB


def test_a_worker_gets_only_functions_it_can_do():
    state = GearmanState()
    submit(state, function="a")
    assert state.grab(WORKER, ("b",), T) == NO_JOB
    assert state.grab(WORKER, ("b", "a"), T)[2] == "a"


def test_the_same_unique_id_attaches_to_the_running_job_and_an_empty_one_never_does():
    state = GearmanState()
    first = submit(state, unique=b"u", background=False, client=CLIENT)
    assert submit(state, unique=b"u", background=False, client=OTHER) == first
    assert submit(state, function="g", unique=b"u") != first  # another function
    assert submit(state, unique=b"") != submit(state, unique=b"")
    handle = state.grab(WORKER, ("f",), T)[1]
    assert handle == first
    assert state.finish(WORKER, handle) == ("ENDED", (CLIENT, OTHER))  # both clients are told
    assert submit(state, unique=b"u") != first  # the id is free again once the job ended


def test_the_unique_id_dash_coalesces_submissions_of_the_same_data_as_gearmand_does():
    state = GearmanState()
    same = submit(state, unique=b"-", data=b"same data")
    assert submit(state, unique=b"-", data=b"same data") == same
    other = submit(state, unique=b"-", data=b"other")
    assert other != same
    assert state.grab(WORKER, ("f",), T)[3] == b"-"  # reported as sent
    state.finish(WORKER, same)
    assert submit(state, unique=b"-", data=b"same data") not in (same, other)  # free again


def test_a_worker_that_goes_away_mid_job_puts_it_back_at_the_end_of_its_queue_as_gearmand_does():
    state = GearmanState()
    old, new = submit(state, data=b"old"), submit(state, data=b"new")
    assert state.grab(WORKER, ("f",), T)[1] == old
    assert state.status(old) == (True, True, 0, 0)
    state.drop_connection(WORKER)
    assert state.status(old) == (True, False, 0, 0)
    assert state.grab(OTHER, ("f",), T)[1] == new and state.grab(OTHER, ("f",), T)[1] == old


def test_a_worker_gets_its_first_function_with_a_job_before_priorities_elsewhere():
    # gearmand's job_take: the worker's functions in order, then priority within one.
    state = GearmanState()
    low_a = submit(state, function="a", priority=LOW)
    high_b = submit(state, function="b", priority=HIGH)
    assert state.grab(WORKER, ("a", "b"), T)[1] == low_a
    assert state.grab(WORKER, ("a", "b"), T)[1] == high_b


def test_a_foreground_job_ends_with_its_only_client_and_a_background_job_stays():
    state = GearmanState()
    fg = submit(state, background=False, client=CLIENT)
    bg = submit(state, background=True, client=CLIENT)
    state.drop_connection(CLIENT)
    assert state.status(fg) == (False, False, 0, 0) and state.status(bg)[0]
    assert state.grab(WORKER, ("f",), T)[1] == bg
    assert state.function_counts() == [("f", 1, 1)]


def test_maxqueue_refuses_submissions_beyond_it_and_running_jobs_do_not_count():
    state = GearmanState()
    state.set_max_queue("f", 2)
    submit(state), submit(state)
    assert submit(state) == QUEUE_FULL
    state.grab(WORKER, ("f",), T)
    assert submit(state).startswith("H:haqueue:")


def test_a_scheduled_job_waits_for_its_time_like_a_delayed_job():
    state = GearmanState()
    handle = submit(state, run_at=T + 5000)
    assert state.grab(WORKER, ("f",), T + 4999) == NO_JOB
    assert state.grab(WORKER, ("f",), T + 5000)[1] == handle


def test_status_reports_progress_and_only_the_assigned_worker_may_report_or_finish():
    state = GearmanState()
    handle = submit(state, background=False)
    state.grab(WORKER, ("f",), T)
    assert state.work_status(OTHER, handle, 1, 4) == ("NOT_FOUND",)
    assert state.work_status(WORKER, handle, 1, 4) == ("STATUS", (CLIENT,))
    assert state.status(handle) == (True, True, 1, 4)
    assert state.finish(OTHER, handle) == ("NOT_FOUND",)
    assert state.finish(WORKER, handle) == ("ENDED", (CLIENT,))
    assert state.status(handle) == (False, False, 0, 0)


operations = st.lists(st.one_of(
    st.tuples(st.just("submit"), st.sampled_from(["a", "b"]), st.sampled_from([b"", b"u1", b"u2"]),
              st.sampled_from([HIGH, NORMAL, LOW]), st.booleans(), st.sampled_from([1, 2, 3])),
    st.tuples(st.just("grab"), st.sampled_from([1, 2, 3]), st.sampled_from([("a",), ("b", "a")])),
    st.tuples(st.just("finish"), st.sampled_from([1, 2, 3]), st.integers(1, 12)),
    st.tuples(st.just("drop"), st.sampled_from([1, 2, 3])),
), max_size=60)


@settings(max_examples=200, deadline=None)
@given(operations)
def test_counts_match_the_jobs_and_no_job_ever_runs_twice_at_once(ops):
    state = GearmanState()
    for op in ops:
        if op[0] == "submit":
            _, fn, unique, priority, background, client = op
            state.submit(fn, unique, b"x", priority, background, 0, client, T)
        elif op[0] == "grab":
            result = state.grab(op[1], op[2], T)
            if result != NO_JOB:
                assert state.jobs[result[1]].worker == op[1]
        elif op[0] == "finish":
            state.finish(op[1], f"H:haqueue:{op[2]}")
        else:
            state.drop_connection(op[1])
        for fn in state.functions.values():
            jobs = [j for j in state.jobs.values() if j.function == fn.name]
            assert fn.running == sum(j.state == RUNNING for j in jobs)
            assert fn.queued == sum(j.state == QUEUED for j in jobs)
            live = [h for q in fn.queues for h in q if h in state.jobs and state.jobs[h].state == QUEUED]
            assert sorted(live) == sorted(j.handle for j in jobs if j.state == QUEUED)
        for (fn_name, unique), handle in state.by_unique.items():
            assert state.jobs[handle].unique == unique and state.jobs[handle].function == fn_name
