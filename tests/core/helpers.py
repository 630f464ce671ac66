"""Small builders shared by the core tests: command tuples and a batch runner."""

from __future__ import annotations

from haqueue.core import commands as C
from haqueue.core.state import QueueState

BODY = b"hello"
TTR = 60_000


def put(tube="default", pri=100, delay=0, ttr=TTR, body=BODY):
    return (C.PUT, tube, pri, delay, ttr, body)


def reserve(conn, *tubes):
    return (C.RESERVE, conn, tubes or ("default",))


def reserve_job(conn, job_id):
    return (C.RESERVE_JOB, conn, job_id)


def delete(conn, job_id):
    return (C.DELETE, conn, job_id)


def release(conn, job_id, pri=100, delay=0):
    return (C.RELEASE, conn, job_id, pri, delay)


def bury(conn, job_id, pri=100):
    return (C.BURY, conn, job_id, pri)


def touch(conn, job_id):
    return (C.TOUCH, conn, job_id)


def kick(bound, tube="default"):
    return (C.KICK, tube, bound)


def kick_job(job_id):
    return (C.KICK_JOB, job_id)


def pause(tube, delay_ms):
    return (C.PAUSE_TUBE, tube, delay_ms)


def drop_conn(conn):
    return (C.DROP_CONN, conn)


def release_orphans(*keep):
    return (C.RELEASE_ORPHANS, tuple(keep))


def forget(tube):
    return (C.FORGET_TUBE, tube)


TICK = (C.TICK,)


def run(state: QueueState, stamp: int, *commands) -> list[tuple]:
    """Apply one batch and insist no bug was caught at the apply boundary."""
    before = state.internal_errors
    results = state.apply_batch(stamp, list(commands)).results
    assert state.internal_errors == before, f"internal error applying {commands}"
    return results


def one(state: QueueState, stamp: int, command) -> tuple:
    return run(state, stamp, command)[0]


def job_state(state: QueueState, job_id: int) -> str:
    from haqueue.core.job import STATE_NAMES

    return STATE_NAMES[state.jobs[job_id].state]
