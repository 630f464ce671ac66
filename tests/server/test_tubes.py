"""Which tubes exist as a client sees them (haqueue/server/beanstalk/tubes.py), against a real QueueState.

A tube lives while a session refers to it or the replicated state holds a job in
it; when both are gone it is freed, and the log must forget a replicated record.
"""

from __future__ import annotations

from haqueue.core import commands as C
from haqueue.core.state import QueueState
from haqueue.server.beanstalk.tubes import DEFAULT_TUBE, TubeDirectory

STAMP = 1_000_000


def state_with_job_in(tube: str) -> tuple[QueueState, int]:
    state = QueueState()
    (result,) = state.apply_batch(STAMP, [(C.PUT, tube, 0, 0, 60_000, b"x")]).results
    return state, result[1]


def delete(state: QueueState, job_id: int) -> None:
    state.apply_batch(STAMP + 1, [(C.DELETE, 1, job_id)])


def test_default_exists_from_the_start_and_is_never_freed():
    directory, state = TubeDirectory(), QueueState()
    assert directory.names() == [DEFAULT_TUBE]
    assert directory.exists(DEFAULT_TUBE, state)
    # The server's own reference keeps it, even when every session lets go.
    directory.ref(DEFAULT_TUBE)
    assert directory.unref(DEFAULT_TUBE, state) is False
    assert directory.exists(DEFAULT_TUBE, state)


def test_a_referenced_tube_exists_until_its_last_reference_goes():
    directory, state = TubeDirectory(), QueueState()
    assert not directory.exists("emails", state)
    directory.ref("emails")
    directory.ref("emails")
    assert directory.exists("emails", state) and directory.names() == [DEFAULT_TUBE, "emails"]
    assert directory.unref("emails", state) is False
    assert directory.exists("emails", state)
    # Nothing replicated about it: freed, and nothing for the log to forget.
    assert directory.unref("emails", state) is False
    assert not directory.exists("emails", state)
    assert directory.names() == [DEFAULT_TUBE]


def test_a_tube_holding_jobs_outlives_its_references_and_is_forgotten_once_empty():
    directory = TubeDirectory()
    directory.ref("emails")
    state, job_id = state_with_job_in("emails")
    assert directory.unref("emails", state) is False  # a job still refers to it
    assert directory.exists("emails", state)
    delete(state, job_id)
    assert "emails" in state.tubes  # the record stays until the log forgets it
    assert directory.maybe_free("emails", state) is True  # so the leader logs FORGET_TUBE
    assert directory.names() == [DEFAULT_TUBE]
    assert directory.exists("emails", state)  # until FORGET_TUBE is applied
    state.apply_batch(STAMP + 2, [(C.FORGET_TUBE, "emails")])
    assert not directory.exists("emails", state)


def test_maybe_free_keeps_a_tube_a_session_still_refers_to():
    directory = TubeDirectory()
    state, job_id = state_with_job_in("emails")
    delete(state, job_id)
    directory.ref("emails")
    assert directory.maybe_free("emails", state) is False
    assert directory.exists("emails", state)


def test_a_tube_known_only_from_the_replicated_state_exists():
    state, _ = state_with_job_in("emails")
    directory = TubeDirectory(replicated_names=["emails"])
    assert directory.names() == [DEFAULT_TUBE, "emails"]
    # And one only in the state, not yet listed, exists too.
    assert TubeDirectory().exists("emails", state)


def test_names_keep_beanstalkds_order_when_a_tube_in_the_middle_goes():
    directory, state = TubeDirectory(), QueueState()
    for name in ("a", "b", "c"):
        directory.ref(name)
    directory.unref("a", state)
    # beanstalkd's ms.c moves the last tube into the hole.
    assert directory.names() == [DEFAULT_TUBE, "c", "b"]


def test_use_and_watch_counts_move_independently():
    directory = TubeDirectory()
    directory.count_use("emails", 1)
    directory.count_use("emails", 1)
    directory.count_watch("emails", 1)
    directory.count_use("emails", -1)
    assert directory.using == {"emails": 1}
    assert directory.watching == {"emails": 1}
    directory.count_watch("emails", -1)
    assert directory.watching == {"emails": 0}
