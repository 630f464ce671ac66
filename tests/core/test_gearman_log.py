"""Gearman on the log: its opcodes through QueueState.apply_batch, its snapshot section and digest."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from haqueue.core import commands as C
from haqueue.core.gearman import HIGH, LOW, NORMAL
from haqueue.core.results import INTERNAL_ERROR, NOT_FOUND
from haqueue.core.state import QueueState

T = 1_700_000_000_000
CLIENT, WORKER = 1 << 32 | 1, 1 << 32 | 2


def submit(conn=CLIENT, function="f", unique=b"", data=b"d", priority=NORMAL, background=True, run_at=0):
    return (C.GM_SUBMIT, conn, function, unique, data, priority, background, run_at)


def apply(state, stamp, *commands):
    return state.apply_batch(stamp, list(commands))


def roundtrip(state):
    restored = QueueState.deserialize(state.serialize())
    assert restored.digest() == state.digest()
    return restored


def test_a_job_goes_through_submit_grab_status_and_finish_as_entries():
    state = QueueState()
    applied = apply(state, T, submit(background=False))
    assert applied.results == [("CREATED", "H:haqueue:1")]
    assert applied.effects.gearman_woken == {"f"}
    assert apply(state, T, (C.GM_GRAB, WORKER, ("f",))).results == [("ASSIGN", "H:haqueue:1", "f", b"", b"d")]
    assert apply(state, T, (C.GM_WORK_STATUS, WORKER, "H:haqueue:1", 1, 2)).results == [("STATUS", (CLIENT,))]
    assert state.gearman.status("H:haqueue:1") == (True, True, 1, 2)
    assert apply(state, T, (C.GM_FINISH, WORKER, "H:haqueue:1")).results == [("ENDED", (CLIENT,))]
    assert apply(state, T, (C.GM_FINISH, WORKER, "H:haqueue:1")).results == [NOT_FOUND]
    assert state.internal_errors == 0


def test_a_new_leader_drops_every_gearman_connection_of_the_old_one():
    state = QueueState()
    apply(state, T, submit(data=b"bg"), submit(data=b"fg", background=False), submit(data=b"bg2"))
    apply(state, T, (C.GM_GRAB, WORKER, ("f",)))  # bg runs on the old leader's worker
    apply(state, T, (C.RELEASE_ORPHANS, (), 2))
    # The background job is back (behind bg2), the foreground one died with its client.
    new_worker = 2 << 32 | 1
    assert apply(state, T, (C.GM_GRAB, new_worker, ("f",))).results[0][4] == b"bg2"
    assert apply(state, T, (C.GM_GRAB, new_worker, ("f",))).results[0][4] == b"bg"
    assert apply(state, T, (C.GM_GRAB, new_worker, ("f",))).results == [("NO_JOB",)]
    # A command of the dead leader's connections still in flight takes nothing.
    apply(state, T, submit(data=b"late"))
    assert apply(state, T, (C.GM_GRAB, WORKER, ("f",))).results == [("NO_JOB",)]
    assert apply(state, T, submit(background=False)).results == [NOT_FOUND]


def test_a_scheduled_job_is_a_deadline_and_its_coming_due_wakes_the_function():
    state = QueueState()
    applied = apply(state, T, submit(run_at=T + 500))
    assert applied.effects.next_deadline == T + 500 and applied.effects.gearman_woken == set()
    restored = roundtrip(state)
    for s in (state, restored):
        applied = apply(s, T + 500, (C.TICK,))
        assert applied.effects.gearman_woken == {"f"}
        assert apply(s, T + 500, (C.GM_GRAB, WORKER, ("f",))).results[0][0] == "ASSIGN"


def test_malformed_gearman_commands_are_refused_and_counted():
    state = QueueState()
    bad = [submit(priority=3), submit(function=b"f"), (C.GM_GRAB, WORKER, "f"), (C.GM_FINISH, WORKER, 1),
           (C.GM_WORK_STATUS, WORKER, "H:haqueue:1", "1", 2), (C.GM_MAX_QUEUE, "f", "2"), (C.GM_DROP_CONN,)]
    assert apply(state, T, *bad).results == [INTERNAL_ERROR] * len(bad)
    assert state.internal_errors == len(bad) and not state.gearman.jobs


def test_maxqueue_rides_the_log_and_the_snapshot():
    state = QueueState()
    apply(state, T, (C.GM_MAX_QUEUE, "f", 1), submit())
    restored = roundtrip(state)
    assert apply(restored, T, submit()).results == [("QUEUE_FULL",)]


def test_snapshot_records_of_format_3_read_as_no_gearman_state():
    state = QueueState()
    records = state.to_records()
    assert records[0] == 4
    assert QueueState.from_records((3,) + records[1:-1]).digest() == state.digest()


def test_the_requeue_order_is_part_of_the_snapshot_and_the_digest():
    a, b = QueueState(), QueueState()
    apply(a, T, submit(data=b"1"), submit(data=b"2"))
    apply(b, T, submit(data=b"1"), submit(data=b"2"))
    apply(a, T, (C.GM_GRAB, WORKER, ("f",)), (C.GM_DROP_CONN, WORKER))  # 1 back behind 2
    apply(b, T, (C.GM_GRAB, WORKER, ("f",)), (C.GM_GRAB, WORKER, ("f",)), (C.GM_DROP_CONN, WORKER))
    assert a.digest() != b.digest()  # 2, 1 against 1, 2: the order is state
    c = roundtrip(a)
    assert [c.gearman.grab(3, ("f",), T)[4] for _ in range(2)] == [b"2", b"1"]


conns = st.sampled_from([CLIENT, WORKER, 1 << 32 | 3])
commands = st.one_of(
    st.builds(lambda conn, fn, unique, pri, bg, delay: submit(conn, fn, unique, b"x", pri, bg,
                                                              T + delay if delay else 0),
              conns, st.sampled_from(["a", "b"]), st.sampled_from([b"", b"u"]),
              st.sampled_from([HIGH, NORMAL, LOW]), st.booleans(), st.sampled_from([0, 0, 50, 200])),
    st.builds(lambda conn, fns: (C.GM_GRAB, conn, fns), conns, st.sampled_from([("a",), ("b", "a")])),
    st.builds(lambda conn, n: (C.GM_FINISH, conn, f"H:haqueue:{n}"), conns, st.integers(1, 10)),
    st.builds(lambda conn, n: (C.GM_WORK_STATUS, conn, f"H:haqueue:{n}", 1, 3), conns, st.integers(1, 10)),
    st.builds(lambda conn: (C.GM_DROP_CONN, conn), conns),
    st.builds(lambda size: (C.GM_MAX_QUEUE, "a", size), st.integers(0, 3)),
    st.just((C.RELEASE_ORPHANS, (), 1)),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 100), st.lists(commands, max_size=4)), max_size=25),
       st.integers(0, 25))
def test_a_node_restored_from_a_snapshot_stays_in_step_with_one_that_applied_everything(entries, cut):
    live = QueueState()
    restored = None
    stamp = T
    for index, (step, batch) in enumerate(entries):
        if index == cut:
            restored = roundtrip(live)
        stamp += step
        results = apply(live, stamp, *batch).results
        if restored is not None:
            assert apply(restored, stamp, *batch).results == results
            assert restored.digest() == live.digest()
    assert live.internal_errors == 0


def submit_keep(**fields):
    return (C.GM_SUBMIT_KEEP, *submit(**fields)[1:])


def test_a_background_submit_keep_of_a_foreground_jobs_unique_id_keeps_the_job_when_its_client_goes():
    state = QueueState()
    apply(state, T, submit(unique=b"u", background=False))
    assert apply(state, T, submit_keep(conn=2 << 32 | 9, unique=b"u")).results == [("CREATED", "H:haqueue:1")]
    apply(state, T, (C.GM_DROP_CONN, CLIENT))
    assert state.gearman.status("H:haqueue:1") == (True, False, 0, 0)  # kept: it is background now
    apply(state, T, (C.RELEASE_ORPHANS, (), 2))  # a change of leader keeps it too
    worker = 2 << 32 | 1
    assert apply(state, T, (C.GM_GRAB, worker, ("f",))).results == [("ASSIGN", "H:haqueue:1", "f", b"u", b"d")]
    assert roundtrip(state).gearman.jobs["H:haqueue:1"].background


def test_the_old_gm_submit_replays_as_it_was_applied_when_logged():
    """An old journal's GM_SUBMIT keeps its meaning: the foreground job still ends with its client."""
    state = QueueState()
    apply(state, T, submit(unique=b"u", background=False), submit(conn=2 << 32 | 9, unique=b"u"))
    apply(state, T, (C.GM_DROP_CONN, CLIENT))
    assert state.gearman.status("H:haqueue:1") == (False, False, 0, 0)


def test_submit_keep_bounds_running_and_queued_jobs_as_gearmand_counts_them():
    state = QueueState()
    apply(state, T, (C.GM_MAX_QUEUE, "f", 2), submit_keep(data=b"1"), submit_keep(data=b"2"))
    apply(state, T, (C.GM_GRAB, WORKER, ("f",)))  # one runs, one is queued: two jobs
    assert apply(state, T, submit_keep(data=b"3")).results == [("QUEUE_FULL",)]
    assert apply(state, T, submit(data=b"3")).results == [("CREATED", "H:haqueue:3")]  # the old opcode: queued only


def test_a_requeued_job_goes_to_the_end_of_its_queue_and_the_late_result_finds_nothing():
    state = QueueState()
    apply(state, T, submit(data=b"first"), submit(data=b"second", background=False))
    apply(state, T, (C.GM_GRAB, WORKER, ("f",)))
    apply(state, T, (C.GM_WORK_STATUS, WORKER, "H:haqueue:1", 1, 2))
    assert apply(state, T, (C.GM_REQUEUE, WORKER, "H:haqueue:1")).results == [("REQUEUED",)]
    assert state.gearman.status("H:haqueue:1") == (True, False, 0, 0)
    assert state.gearman.function_counts() == [("f", 2, 0)]
    assert apply(state, T, (C.GM_FINISH, WORKER, "H:haqueue:1")).results == [NOT_FOUND]
    assert apply(state, T, (C.GM_REQUEUE, WORKER, "H:haqueue:1")).results == [NOT_FOUND]
    other = 1 << 32 | 3
    assert apply(state, T, (C.GM_GRAB, other, ("f",))).results[0][4] == b"second"
    assert apply(state, T, (C.GM_GRAB, other, ("f",))).results[0][4] == b"first"
    assert roundtrip(state).digest() == state.digest()
    assert apply(state, T, (C.GM_REQUEUE, "x", 1)).results == [INTERNAL_ERROR]
