"""A backup's state records: the snapshot's records with remaining times, and back.

Pure (no clock, no I/O): every time is an argument.

What a backup holds is QueueState.to_records() (the snapshot's serialisation,
core/state.py) with the times the queue keeps on the leader's clock made
relative to the instant the backup was taken (`taken_at`, the leader's wall
clock then):

- a delayed job's and a reserved job's deadline become the milliseconds left
  (0 when already due), a job's creation time its age, a paused tube's end
  the pause left;
- the id service's counters and Gearman's scheduled run times stay absolute:
  they are calendar times (an id renders the date of its cycle; a Gearman
  epoch job runs at a wall-clock time), and a restore must not move them;
- the connection-epoch floor is left out: it is the old cluster's, and a new
  cluster's first leader has a lower term (state.py, conn_epoch_floor).

`restored_records` turns them back into QueueState records on the clock of the
restore (`now`): each deadline is now + what was left. Reserved jobs stay
reserved by the old cluster's connections, whose epoch is above the floor of
0 the new cluster starts with: the new cluster's first leader releases them,
as every new leader releases a dead leader's reservations (RELEASE_ORPHANS),
and Gearman's foreground jobs and running jobs are dropped or requeued the
same way. `skip` is added to every id counter (docs/backup.md, "Ids").
"""

from __future__ import annotations

from haqueue.core import ids as I
from haqueue.core.idrules import IdRule
from haqueue.core.job import DELAYED, RESERVED
from haqueue.core.state import SNAPSHOT_FORMAT_VERSION, QueueState

# The state records this module reads: a new snapshot format needs a new mapping here.
STATE_RECORDS_VERSION = 4
assert SNAPSHOT_FORMAT_VERSION == STATE_RECORDS_VERSION, "core/state.py changed its records: update backup/records.py"

# The fastest rate ids can be handed out at, with a wide margin (a leader commits
# tens of thousands of puts a second, docs/benchmarks.md): what `auto_skip` counts
# a running old cluster as having used per second after its backup.
IDS_PER_SECOND_BOUND = 1_000_000
# Clock difference allowed between the leader that took the backup and the host that restores it.
CLOCK_MARGIN_MS = 60_000


def from_state(state: QueueState, taken_at: int) -> tuple:
    """The backup's records of `state`, with times relative to `taken_at` (leader's wall ms)."""
    taken_at = max(taken_at, state.now)  # the state's clock never runs back; neither do backups
    records = state.to_records()
    (version, next_id, _now, total_jobs, job_timeouts, tubes, jobs, _floor, ids, gearman) = records
    rel_tubes = tuple((name, total, cmd_delete, cmd_pause, pause, max(0, unpause_at - taken_at) if pause else 0,
                       buried)
                      for name, total, cmd_delete, cmd_pause, pause, unpause_at, buried in tubes)
    rel_jobs = tuple(
        (job_id, tube, pri, delay, ttr, body, job_state,
         max(0, deadline - taken_at) if job_state in (DELAYED, RESERVED) else 0,
         max(0, taken_at - created), *rest)
        for (job_id, tube, pri, delay, ttr, body, job_state, deadline, created, *rest) in jobs)
    return (version, next_id, total_jobs, job_timeouts, rel_tubes, rel_jobs, ids, gearman)


def check_shape(records) -> str | None:
    """Why `records` are not a backup's state records (one line), or None."""
    if type(records) is not tuple or len(records) != 8:
        return "the state is not a tuple of 8 sections"
    if records[0] != STATE_RECORDS_VERSION:
        return f"state records of version {records[0]!r}, this haqueue reads {STATE_RECORDS_VERSION}"
    if type(records[1]) is not int or records[1] < 1:
        return "the next job id is not a positive integer"
    return None


def restored_records(records: tuple, now: int, skip: int = 0) -> tuple:
    """QueueState records (the snapshot's) for a new cluster whose clock reads `now`,
    every id counter moved on by `skip` values."""
    version, next_id, total_jobs, job_timeouts, tubes, jobs, ids, gearman = records
    abs_tubes = tuple((name, total, cmd_delete, cmd_pause, pause, now + left if pause else 0, buried)
                      for name, total, cmd_delete, cmd_pause, pause, left, buried in tubes)
    abs_jobs = tuple(
        (job_id, tube, pri, delay, ttr, body, job_state,
         now + left if job_state in (DELAYED, RESERVED) else 0, now - age, *rest)
        for (job_id, tube, pri, delay, ttr, body, job_state, left, age, *rest) in jobs)
    return (version, next_id + skip, now, total_jobs, job_timeouts, abs_tubes, abs_jobs, 0,
            skipped_ids(ids, now, skip), gearman)


def skipped_ids(ids: tuple, now: int, skip: int) -> tuple:
    """The id service's records with each counter `skip` values further on, in the cycle
    current at `now` (never past its max_counter: a counter skipped past its end answers
    EXHAUSTED until its next cycle, rather than repeat an id), and used at `now`, so that
    the new cluster never goes back to an earlier cycle."""
    if not skip:
        return ids
    state = I.IdState.from_records(ids)
    rules: dict[str, IdRule] = {**state.retired, **state.rules}
    for (rule_name, _app), counter in state.counters.items():
        rule = rules.get(rule_name)
        if rule is None:  # a counter without its rule cannot be handed out from: leave it
            continue
        cycle, high, last = counter
        last = max(last, now)
        if rule.cycle(last) != cycle:
            cycle, high = rule.cycle(last), state.first_value(rule) - state.step
        room = max(0, (rule.max_counter - high) // state.step)
        counter[:] = [cycle, high + min(skip, room) * state.step, last]
    return state.to_records()


def auto_skip(taken_at: int, now: int) -> int:
    """Ids an old cluster still serving after its backup can have handed out by `now`:
    IDS_PER_SECOND_BOUND for every second since `taken_at`, plus CLOCK_MARGIN_MS."""
    elapsed_ms = max(0, now - taken_at) + CLOCK_MARGIN_MS
    return -(-elapsed_ms * IDS_PER_SECOND_BOUND // 1000)


def summary(records: tuple) -> dict:
    """Counts for a person: jobs by state, tubes, paused tubes, next id, Gearman jobs."""
    from haqueue.core.job import STATE_NAMES

    _, next_id, _total, _timeouts, tubes, jobs, ids, gearman = records
    by_state = {name: 0 for name in STATE_NAMES[:4]}
    for job in jobs:
        by_state[STATE_NAMES[job[6]]] += 1
    return {"jobs": len(jobs), **by_state, "tubes": len(tubes), "paused_tubes": sum(1 for t in tubes if t[4]),
            "next_job_id": next_id, "id_counters": len(ids[5]), "gearman_jobs": len(gearman[2])}
