"""QueueState against a naive reference model, on random command sequences.

The reference model below is meant to be obviously right rather than fast:
a dict of job dicts, linear scans, sorting where beanstalkd orders things, no
heaps, no lazy cleaning, no counters kept on the side. After every batch the
results and everything a client or the server can observe must agree: per-tube
counts, each job's state, priority, counters and time left, what peek-ready,
peek-delayed and peek-buried would answer, the next deadline, the edge signals.

Also: replaying the same batches (through the log encoding, as a follower
does) gives the same digest, and a snapshot taken at any point then continued
from gives the same digest as never taking it.
"""

from __future__ import annotations

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from haqueue.core import commands as C
from haqueue.core.job import MIN_TTR_MS, STATE_NAMES, URGENT_THRESHOLD
from haqueue.core.state import QueueState

TUBES = ("a", "b", "c")
# Connection ids are (leader epoch << 32 | serial); epochs 0, 1 and 2.
CONNS = (1, 2, 3, 1 << 32 | 1, 2 << 32 | 1)
START = 1_000_000


# ------------------------------------------------------------------------------
# the reference model
class Reference:
    def __init__(self) -> None:
        self.jobs: dict[int, dict] = {}
        self.tubes: dict[str, dict] = {}  # exists from put/pause-tube until forgotten
        self.next_id = 1
        self.now = 0
        self.total_jobs = 0
        self.job_timeouts = 0
        self.floor = 0
        self.bury_seq = 0  # orders the buried jobs first in first out
        self.woken: set[str] = set()  # tubes where a job became ready in this entry
        self.emptied: set[str] = set()

    def in_tube(self, name, state=None):
        return [j for j in self.jobs.values() if j["tube"] == name and (state is None or j["state"] == state)]

    def paused(self, name):
        tube = self.tubes.get(name)
        return tube is not None and tube["pause"] > 0 and self.now < tube["unpause_at"]

    def make_tube(self, name):
        if name not in self.tubes:
            self.tubes[name] = {"total_jobs": 0, "cmd_delete": 0, "cmd_pause": 0, "pause": 0, "unpause_at": 0}
        return self.tubes[name]

    def to_ready(self, job):
        job.update(state="ready", reserver=None, deadline=0)
        self.woken.add(job["tube"])

    def to_reserved(self, job, conn):
        job.update(state="reserved", reserver=conn, deadline=self.now + job["ttr"])
        job["reserves"] += 1
        return ("RESERVED", job["id"], job["body"])

    def ready_or_delayed(self, job, delay):
        if delay > 0:
            job.update(state="delayed", reserver=None, deadline=self.now + delay)
        else:
            self.to_ready(job)

    def reserved_by(self, conn, job_id):
        job = self.jobs.get(job_id)
        if job is not None and job["state"] == "reserved" and job["reserver"] == conn:
            return job
        return None

    def advance(self, stamp):
        self.now = max(self.now, stamp)
        for job in self.jobs.values():
            if job["state"] == "delayed" and job["deadline"] <= self.now:
                self.to_ready(job)
            elif job["state"] == "reserved" and job["deadline"] <= self.now:
                job["timeouts"] += 1
                self.job_timeouts += 1
                self.to_ready(job)
        for name, tube in self.tubes.items():
            if tube["pause"] and tube["unpause_at"] <= self.now:
                tube.update(pause=0, unpause_at=0)
                if self.in_tube(name, "ready"):
                    self.woken.add(name)

    def apply_batch(self, stamp, commands):
        self.advance(stamp)
        return [getattr(self, "do_" + C.NAMES[cmd[0]].replace("-", "_"))(*cmd[1:]) for cmd in commands]

    def do_tick(self):
        return ("OK",)

    def do_put(self, tube, pri, delay, ttr, body):
        job_id = self.next_id
        self.next_id += 1
        self.make_tube(tube)["total_jobs"] += 1
        self.total_jobs += 1
        self.jobs[job_id] = job = dict(
            id=job_id, tube=tube, pri=pri, delay=delay, ttr=max(ttr, MIN_TTR_MS), body=body, created=self.now,
            state=None, deadline=0, reserver=None, reserves=0, timeouts=0, releases=0, buries=0, kicks=0, seq=0,
        )
        self.ready_or_delayed(job, delay)
        return ("INSERTED", job_id)

    def do_reserve(self, conn, tubes):
        if conn >> 32 < self.floor:
            return ("NO_JOB",)
        ready = [j for name in set(tubes) if not self.paused(name) for j in self.in_tube(name, "ready")]
        if not ready:
            return ("NO_JOB",)
        return self.to_reserved(min(ready, key=lambda j: (j["pri"], j["id"])), conn)

    def do_reserve_job(self, conn, job_id):
        job = self.jobs.get(job_id)
        if job is None or job["state"] == "reserved" or conn >> 32 < self.floor:
            return ("NOT_FOUND",)
        return self.to_reserved(job, conn)

    def do_delete(self, conn, job_id):
        job = self.jobs.get(job_id)
        if job is None or (job["state"] == "reserved" and job["reserver"] != conn):
            return ("NOT_FOUND",)
        del self.jobs[job_id]
        self.tubes[job["tube"]]["cmd_delete"] += 1
        if not self.in_tube(job["tube"]):
            self.emptied.add(job["tube"])
        return ("DELETED",)

    def do_release(self, conn, job_id, pri, delay):
        job = self.reserved_by(conn, job_id)
        if job is None:
            return ("NOT_FOUND",)
        job.update(pri=pri, delay=delay)
        job["releases"] += 1
        self.ready_or_delayed(job, delay)
        return ("RELEASED",)

    def do_bury(self, conn, job_id, pri):
        job = self.reserved_by(conn, job_id)
        if job is None:
            return ("NOT_FOUND",)
        self.bury_seq += 1
        job.update(pri=pri, state="buried", reserver=None, deadline=0, seq=self.bury_seq)
        job["buries"] += 1
        return ("BURIED",)

    def do_touch(self, conn, job_id):
        job = self.reserved_by(conn, job_id)
        if job is None:
            return ("NOT_FOUND",)
        job["deadline"] = self.now + job["ttr"]
        return ("TOUCHED",)

    def kick_one(self, job):
        job["kicks"] += 1
        self.to_ready(job)

    def do_kick(self, tube, bound):
        buried = sorted(self.in_tube(tube, "buried"), key=lambda j: j["seq"])
        if buried:
            chosen = buried[:bound]
        else:
            chosen = sorted(self.in_tube(tube, "delayed"), key=lambda j: (j["deadline"], j["id"]))[:bound]
        for job in chosen:
            self.kick_one(job)
        return ("KICKED", len(chosen))

    def do_kick_job(self, job_id):
        job = self.jobs.get(job_id)
        if job is None or job["state"] not in ("buried", "delayed"):
            return ("NOT_FOUND",)
        self.kick_one(job)
        return ("KICKED",)

    def do_pause_tube(self, name, delay):
        tube = self.make_tube(name)
        tube["cmd_pause"] += 1
        if delay > 0:
            tube.update(pause=delay, unpause_at=self.now + delay)
        else:
            tube.update(pause=0, unpause_at=0)
            if self.in_tube(name, "ready"):
                self.woken.add(name)
        return ("PAUSED",)

    def requeue(self, conns):
        for job in self.jobs.values():
            if job["state"] == "reserved" and job["reserver"] in conns:
                self.to_ready(job)

    def do_drop_conn(self, conn):
        self.requeue({conn})
        return ("OK",)

    def do_release_orphans(self, keep, epoch=0):
        self.floor = max(self.floor, epoch)
        self.requeue({j["reserver"] for j in self.jobs.values()} - set(keep))
        return ("OK",)

    def do_forget_tube(self, name):
        if name in self.tubes and not self.in_tube(name):
            del self.tubes[name]
        return ("OK",)

    # what can be observed ------------------------------------------------------
    def observe(self):
        tubes = {}
        for name, t in self.tubes.items():
            ready = self.in_tube(name, "ready")
            delayed = self.in_tube(name, "delayed")
            buried = self.in_tube(name, "buried")
            tubes[name] = dict(
                ready=len(ready),
                urgent=sum(j["pri"] < URGENT_THRESHOLD for j in ready),
                reserved=len(self.in_tube(name, "reserved")),
                delayed=len(delayed),
                buried=len(buried),
                total_jobs=t["total_jobs"],
                cmd_delete=t["cmd_delete"],
                cmd_pause=t["cmd_pause"],
                pause=t["pause"],
                pause_left=max(0, t["unpause_at"] - self.now) if t["pause"] else 0,
                paused=self.paused(name),
                peek_ready=min(((j["pri"], j["id"]) for j in ready), default=(None, None))[1],
                peek_delayed=min(((j["deadline"], j["id"]) for j in delayed), default=(None, None))[1],
                peek_buried=min(((j["seq"], j["id"]) for j in buried), default=(None, None))[1],
            )
        jobs = {}
        for job_id, j in self.jobs.items():
            timed = j["state"] in ("reserved", "delayed")
            jobs[job_id] = dict(
                tube=j["tube"], state=j["state"], pri=j["pri"], delay=j["delay"], ttr=j["ttr"], body=j["body"],
                created=j["created"], reserver=j["reserver"], reserves=j["reserves"], timeouts=j["timeouts"],
                releases=j["releases"], buries=j["buries"], kicks=j["kicks"],
                time_left=max(0, j["deadline"] - self.now) if timed else 0,
            )
        deadlines = [j["deadline"] for j in self.jobs.values() if j["state"] in ("reserved", "delayed")]
        deadlines += [t["unpause_at"] for t in self.tubes.values() if t["pause"]]
        return dict(
            now=self.now,
            next_id=self.next_id,
            total_jobs=self.total_jobs,
            job_timeouts=self.job_timeouts,
            floor=self.floor,
            counts=dict(
                urgent=sum(t["urgent"] for t in tubes.values()),
                ready=sum(t["ready"] for t in tubes.values()),
                reserved=sum(t["reserved"] for t in tubes.values()),
                delayed=sum(t["delayed"] for t in tubes.values()),
                buried=sum(t["buried"] for t in tubes.values()),
            ),
            tubes=tubes,
            jobs=jobs,
            reservations={c: sorted(i for i, j in self.jobs.items() if j["reserver"] == c) for c in CONNS},
            soonest={c: min((j["deadline"] for j in self.jobs.values() if j["reserver"] == c), default=None)
                     for c in CONNS},
            has_ready={name: not self.paused(name) and bool(self.in_tube(name, "ready")) for name in TUBES},
            next_deadline=min(deadlines, default=None),
            tube_order=list(self.tubes),  # list-tubes answers in this order
        )


def observe(state: QueueState) -> dict:
    """The same observations, read from QueueState through what the server uses."""
    now = state.now
    tubes = {}
    for name, t in state.tubes.items():
        peeks = [t.peek_ready(), t.peek_delayed(), t.peek_buried()]
        tubes[name] = dict(
            ready=t.ready_count,
            urgent=t.urgent_count,
            reserved=t.reserved_count,
            delayed=t.delayed_count,
            buried=len(t.buried),
            total_jobs=t.total_jobs,
            cmd_delete=t.cmd_delete,
            cmd_pause=t.cmd_pause,
            pause=t.pause,
            pause_left=max(0, t.unpause_at - now) if t.pause else 0,
            paused=t.paused(now),
            peek_ready=peeks[0] and peeks[0].id,
            peek_delayed=peeks[1] and peeks[1].id,
            peek_buried=peeks[2] and peeks[2].id,
        )
        assert t.job_count == t.ready_count + t.reserved_count + t.delayed_count + len(t.buried)
    jobs = {}
    for job_id, j in state.jobs.items():
        assert j.id == job_id and state.tubes[j.tube.name] is j.tube
        jobs[job_id] = dict(
            tube=j.tube.name, state=STATE_NAMES[j.state], pri=j.pri, delay=j.delay, ttr=j.ttr, body=j.body,
            created=j.created, reserver=j.reserver, reserves=j.reserves, timeouts=j.timeouts,
            releases=j.releases, buries=j.buries, kicks=j.kicks, time_left=state.job_time_left(j, now),
        )
    assert state.reserved_count == sum(t.reserved_count for t in state.tubes.values())
    return dict(
        now=now,
        next_id=state.next_id,
        total_jobs=state.total_jobs,
        job_timeouts=state.job_timeouts,
        floor=state.conn_epoch_floor,
        counts=state.counts(),
        tubes=tubes,
        jobs=jobs,
        reservations={c: sorted(state.reservations_of(c)) for c in CONNS},
        soonest={c: state.soonest_reservation_deadline(c) for c in CONNS},
        has_ready={name: state.has_ready([name], now) for name in TUBES},
        next_deadline=state.next_deadline(),
        tube_order=list(state.tubes),
    )


def differences(core, ref, path="") -> list[str]:
    """Where two observations differ, one line each (a plain == diff is truncated)."""
    if isinstance(core, dict) and isinstance(ref, dict):
        out = []
        for key in sorted(set(core) | set(ref), key=repr):
            where = f"{path}/{key}"
            if key not in core or key not in ref:
                out.append(f"{where}: only in {'reference' if key not in core else 'core'}")
            else:
                out += differences(core[key], ref[key], where)
        return out
    return [] if core == ref else [f"{path}: core {core!r}, reference {ref!r}"]


def assert_agree(core: dict, ref: dict) -> None:
    diff = differences(core, ref)
    assert not diff, "\n".join(diff)


# ------------------------------------------------------------------------------
# random command sequences
# Commands are drawn with the reference model at hand, so most of them name
# a job that exists, and a release, bury or touch usually comes from the
# connection that holds the reservation: blind draws are almost all NOT_FOUND.
# Times are mostly multiples of 500 ms, so deadlines often fall exactly on a
# stamp, where off-by-one mistakes show.
tube = st.sampled_from(TUBES[:1] * 3 + TUBES)  # jobs meet in one tube more often
conn = st.sampled_from(CONNS)
pri = st.one_of(st.sampled_from([0, 1023, 1024, 2**32 - 1]), st.integers(min_value=0, max_value=5))
delay = st.sampled_from([0, 0, 0, 1, 500, 1000, 2500])
ttr = st.sampled_from([0, 1, 999, 1000, 1500, 3000])
watch = st.lists(tube, min_size=1, max_size=3).map(tuple)
step = st.one_of(
    st.sampled_from([0, 500, 500, 1000, 1500]),
    st.sampled_from([1, 499, 999, 1001]),
    st.integers(min_value=0, max_value=4000),
    st.integers(min_value=-4000, max_value=-1),  # a new leader whose clock is behind
)
KINDS = (
    ["put"] * 5 + ["reserve"] * 4 + ["bury"] * 3 + ["release", "delete"] * 2
    + ["touch", "reserve-job", "kick", "kick-job", "pause-tube", "drop-conn", "release-orphans", "forget-tube", "tick"]
)


def draw_command(draw, ref: Reference) -> tuple:
    kind = draw(st.sampled_from(KINDS))
    held = sorted((j["reserver"], j["id"]) for j in ref.jobs.values() if j["state"] == "reserved")
    ids = sorted(ref.jobs) + [ref.next_id, ref.next_id - 1]  # plus one unknown, one maybe deleted
    some_id = st.sampled_from(ids)
    if kind == "put":
        return (C.PUT, draw(tube), draw(pri), draw(delay), draw(ttr), draw(st.binary(max_size=3)))
    if kind == "reserve":
        return (C.RESERVE, draw(conn), draw(watch))
    if kind in ("release", "bury", "touch", "delete"):
        if held and draw(st.integers(0, 3)):
            c, job_id = draw(st.sampled_from(held))
        else:
            c, job_id = draw(conn), draw(some_id)
        if kind == "release":
            return (C.RELEASE, c, job_id, draw(pri), draw(delay))
        if kind == "bury":
            return (C.BURY, c, job_id, draw(pri))
        return (C.TOUCH if kind == "touch" else C.DELETE, c, job_id)
    if kind == "reserve-job":
        return (C.RESERVE_JOB, draw(conn), draw(some_id))
    if kind == "kick":
        return (C.KICK, draw(tube), draw(st.integers(min_value=0, max_value=4)))
    if kind == "kick-job":
        return (C.KICK_JOB, draw(some_id))
    if kind == "pause-tube":
        return (C.PAUSE_TUBE, draw(tube), draw(st.sampled_from([0, 0, 1, 500, 1000, 2000])))
    if kind == "drop-conn":
        return (C.DROP_CONN, draw(conn))
    if kind == "release-orphans":
        keep = tuple(draw(st.lists(conn, max_size=2)))
        if draw(st.booleans()):
            return (C.RELEASE_ORPHANS, keep)
        return (C.RELEASE_ORPHANS, keep, draw(st.sampled_from([0, 0, 1, 2])))
    if kind == "forget-tube":
        return (C.FORGET_TUBE, draw(tube))
    return (C.TICK,)


@st.composite
def logs(draw, max_entries=30) -> list[tuple[int, list[tuple]]]:
    """A log: (stamp, commands) entries, drawn against a running reference model."""
    ref = Reference()
    stamp = START
    log = []
    # Drawing the steps as a list lets the shrinker drop whole entries.
    for step_ms in draw(st.lists(step, min_size=1, max_size=max_entries)):
        stamp += step_ms
        ref.advance(stamp)
        commands = []
        for _ in range(draw(st.integers(min_value=0, max_value=10))):
            cmd = draw_command(draw, ref)
            ref.apply_batch(stamp, [cmd])  # time is already at stamp: applies just this one
            commands.append(cmd)
        log.append((stamp, commands))
    return log


# No "explain" phase: on a failure it replays the shrunk log hundreds of times
# more, for a hint that the observation diff already gives.
PHASES = [Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink]
SETTINGS = settings(max_examples=200, deadline=None, phases=PHASES, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(logs())
def test_queue_state_agrees_with_the_reference_model_after_every_batch(log):
    state, ref = QueueState(), Reference()
    for stamp, commands in log:
        ref.woken, ref.emptied = set(), set()
        applied = state.apply_batch(stamp, list(commands))
        assert applied.results == ref.apply_batch(stamp, commands), (stamp, commands)
        assert state.internal_errors == 0
        assert_agree(observe(state), ref.observe())
        # The effects the leader acts on: the tubes to wake and to forget, the next timer.
        assert applied.effects.woken == ref.woken
        assert applied.effects.emptied == ref.emptied
        assert applied.effects.next_deadline == ref.observe()["next_deadline"]


@settings(max_examples=100, deadline=None, phases=PHASES)
@given(logs())
def test_replaying_or_restoring_the_log_gives_the_same_state_after_every_entry(log):
    leader, follower = QueueState(), QueueState()
    for stamp, commands in log:
        results = leader.apply_batch(stamp, list(commands))
        # A follower applies what the log carries: the encoded entry.
        assert follower.apply_batch(*C.decode_batch(C.encode_batch(stamp, list(commands)))) == results
        assert follower.digest() == leader.digest()
        # And a node restored from a snapshot of this moment sees the same.
        restored = QueueState.deserialize(leader.serialize())
        assert restored.digest() == leader.digest()
        assert_agree(observe(restored), observe(leader))
    assert leader.to_records() == follower.to_records()


@settings(max_examples=60, deadline=None, phases=PHASES)
@given(logs(), st.data())
def test_a_snapshot_taken_anywhere_changes_nothing_that_follows(log, data):
    cut = data.draw(st.integers(min_value=0, max_value=len(log)), label="snapshot after entry")
    straight = QueueState()
    for stamp, commands in log[:cut]:
        straight.apply_batch(stamp, list(commands))
    restored = QueueState.deserialize(straight.serialize())
    assert restored.digest() == straight.digest()
    assert_agree(observe(restored), observe(straight))
    for stamp, commands in log[cut:]:
        assert restored.apply_batch(stamp, list(commands)) == straight.apply_batch(stamp, list(commands))
        assert restored.digest() == straight.digest()
        assert_agree(observe(restored), observe(straight))
    assert restored.internal_errors == straight.internal_errors == 0


def reservable(state: QueueState, now: int) -> dict[str, int]:
    return {name: t.ready_count for name, t in state.tubes.items() if not t.paused(now)}


@settings(max_examples=100, deadline=None, phases=PHASES)
@given(logs(), st.lists(st.sampled_from([0, 1, 499, 500, 1000, 1001, 2500, 60_000]), min_size=1,
                        max_size=3))
def test_ready_at_predicts_what_advancing_makes_reservable(log, offsets):
    state = QueueState()
    for stamp, commands in log:
        state.apply_batch(stamp, list(commands))
        for offset in offsets:
            later = state.now + offset
            before = reservable(state, state.now)
            advanced = QueueState.deserialize(state.serialize())
            advanced.advance(later)
            after = reservable(advanced, later)
            gained = {name: n - before.get(name, 0) for name, n in after.items() if n > before.get(name, 0)}
            assert state.ready_at(later) == gained, (later, state.to_records())
