"""The bodies of `stats-job`, `stats-tube` and `stats` (haqueue/server/beanstalk/stats.py).

Keys and their order are beanstalkd 1.12's (prot.c JOB_STATS_FMT, STATS_TUBE_FMT,
STATS_FMT); tests/differential compares them with a real beanstalkd where one is
installed, these check them, and the values, without one. The state is a real
QueueState driven by log entries; times are milliseconds shown as whole seconds.
"""

from __future__ import annotations

from types import SimpleNamespace

from haqueue.core import commands as C
from haqueue.core.state import QueueState
from haqueue.server.beanstalk.stats import COUNTED_COMMANDS, ServerCounters, job_stats, server_stats, tube_stats
from haqueue.server.beanstalk.tubes import TubeDirectory

S = 1_000_000  # the stamp the jobs are put at (ms)
CONN = 7

JOB_KEYS = ["id", "tube", "state", "pri", "age", "delay", "ttr", "time-left", "file",
            "reserves", "timeouts", "releases", "buries", "kicks"]
TUBE_KEYS = ["name", "current-jobs-urgent", "current-jobs-ready", "current-jobs-reserved",
             "current-jobs-delayed", "current-jobs-buried", "total-jobs", "current-using",
             "current-watching", "current-waiting", "cmd-delete", "cmd-pause-tube", "pause",
             "pause-time-left"]
SERVER_KEYS = (
    ["current-jobs-urgent", "current-jobs-ready", "current-jobs-reserved", "current-jobs-delayed",
     "current-jobs-buried"]
    + ["cmd-put", "cmd-peek", "cmd-peek-ready", "cmd-peek-delayed", "cmd-peek-buried", "cmd-reserve",
       "cmd-reserve-with-timeout", "cmd-delete", "cmd-release", "cmd-use", "cmd-watch", "cmd-ignore",
       "cmd-bury", "cmd-kick", "cmd-touch", "cmd-stats", "cmd-stats-job", "cmd-stats-tube",
       "cmd-list-tubes", "cmd-list-tube-used", "cmd-list-tubes-watched", "cmd-pause-tube"]
    + ["job-timeouts", "total-jobs", "max-job-size", "current-tubes", "current-connections",
       "current-producers", "current-workers", "current-waiting", "total-connections", "pid",
       "version", "rusage-utime", "rusage-stime", "uptime", "binlog-oldest-index",
       "binlog-current-index", "binlog-records-migrated", "binlog-records-written",
       "binlog-max-size", "draining", "id", "hostname", "os", "platform"]
)


def parse(body: bytes) -> list[tuple[str, str]]:
    text = body.decode()
    assert text.startswith("---\n") and text.endswith("\n")
    return [tuple(line.split(": ", 1)) for line in text[4:-1].split("\n")]


def apply(state: QueueState, stamp: int, *commands: tuple) -> list[tuple]:
    return state.apply_batch(stamp, list(commands)).results


def busy_tube() -> tuple[QueueState, dict[str, int]]:
    """"emails" with one job in every state: urgent/ready, reserved, delayed, buried."""
    state = QueueState()
    ids = {}
    for name, pri, delay, ttr in (("reserved", 5, 0, 60_000), ("buried", 2000, 0, 10_000),
                                  ("delayed", 10, 30_000, 5_000)):
        (result,) = apply(state, S, (C.PUT, "emails", pri, delay, ttr, b"body"))
        ids[name] = result[1]
    apply(state, S, (C.RESERVE, CONN, ("emails",)), (C.RESERVE, CONN, ("emails",)))
    apply(state, S, (C.BURY, CONN, ids["buried"], 2000))
    for name, pri in (("ready", 3000), ("urgent", 100)):
        (result,) = apply(state, S, (C.PUT, "emails", pri, 0, 60_000, b"body"))
        ids[name] = result[1]
    return state, ids


def test_job_stats_keys_in_beanstalkds_order_with_seconds_truncated():
    state, ids = busy_tube()
    now = S + 2_999
    reserved = dict(parse(job_stats(state.job(ids["reserved"]), state, now)))
    assert list(reserved) == JOB_KEYS
    assert reserved == {
        "id": str(ids["reserved"]), "tube": "emails", "state": "reserved", "pri": "5",
        "age": "2", "delay": "0", "ttr": "60", "time-left": "57", "file": "0",
        "reserves": "1", "timeouts": "0", "releases": "0", "buries": "0", "kicks": "0",
    }


def test_job_stats_time_left_of_a_delayed_job_is_its_delay_left_and_zero_when_ready():
    state, ids = busy_tube()
    now = S + 2_999
    delayed = dict(parse(job_stats(state.job(ids["delayed"]), state, now)))
    assert (delayed["state"], delayed["delay"], delayed["ttr"], delayed["time-left"]) == ("delayed", "30", "5", "27")
    ready = dict(parse(job_stats(state.job(ids["ready"]), state, now)))
    assert (ready["state"], ready["time-left"]) == ("ready", "0")
    buried = dict(parse(job_stats(state.job(ids["buried"]), state, now)))
    assert (buried["state"], buried["reserves"], buried["buries"]) == ("buried", "1", "1")


def test_tube_stats_keys_in_beanstalkds_order_with_every_count():
    state, _ = busy_tube()
    directory = TubeDirectory(replicated_names=["emails"])
    directory.count_use("emails", 1)
    directory.count_use("emails", 1)
    directory.count_watch("emails", 1)
    pairs = parse(tube_stats("emails", state, directory, waiting=3, now=S + 1_000))
    assert [key for key, _ in pairs] == TUBE_KEYS
    assert dict(pairs) == {
        "name": "emails", "current-jobs-urgent": "1", "current-jobs-ready": "2",
        "current-jobs-reserved": "1", "current-jobs-delayed": "1", "current-jobs-buried": "1",
        "total-jobs": "5", "current-using": "2", "current-watching": "1", "current-waiting": "3",
        "cmd-delete": "0", "cmd-pause-tube": "0", "pause": "0", "pause-time-left": "0",
    }


def test_tube_stats_of_a_paused_tube_show_the_pause_and_the_seconds_left():
    state, _ = busy_tube()
    apply(state, S, (C.PAUSE_TUBE, "emails", 10_000))
    stats = dict(parse(tube_stats("emails", state, TubeDirectory(), waiting=0, now=S + 2_999)))
    assert (stats["cmd-pause-tube"], stats["pause"], stats["pause-time-left"]) == ("1", "10", "7")
    # Once the pause is over both read 0 again, as in beanstalkd.
    stats = dict(parse(tube_stats("emails", state, TubeDirectory(), waiting=0, now=S + 10_001)))
    assert (stats["pause"], stats["pause-time-left"]) == ("0", "0")


def test_tube_stats_of_a_tube_with_no_replicated_record_are_zeros():
    directory = TubeDirectory()
    directory.ref("fresh")
    directory.count_use("fresh", 1)
    stats = dict(parse(tube_stats("fresh", QueueState(), directory, waiting=0, now=S)))
    assert stats["name"] == "fresh" and stats["current-using"] == "1"
    assert all(stats[key] == "0" for key in TUBE_KEYS if key not in ("name", "current-using"))


def test_server_stats_keys_in_beanstalkds_order_then_haqueues_own():
    state, _ = busy_tube()
    counters = ServerCounters()
    counters.commands["put"] = 5
    sessions = [SimpleNamespace(is_producer=True, is_worker=False),
                SimpleNamespace(is_producer=False, is_worker=True)]
    pairs = parse(server_stats(state, TubeDirectory(replicated_names=["emails"]), counters, sessions,
                               waiting=1, now=S, max_job_size=65535, draining=False,
                               raft={"state": "leader"}))
    keys = [key for key, _ in pairs]
    assert keys[:len(SERVER_KEYS)] == SERVER_KEYS
    assert [f"cmd-{name}" for name in COUNTED_COMMANDS] == SERVER_KEYS[5:27]
    assert all(key.startswith(("haqueue-", "raft-")) for key in keys[len(SERVER_KEYS):])
    stats = dict(pairs)
    assert (stats["current-jobs-urgent"], stats["current-jobs-ready"], stats["current-jobs-reserved"],
            stats["current-jobs-delayed"], stats["current-jobs-buried"]) == ("1", "2", "1", "1", "1")
    assert (stats["cmd-put"], stats["total-jobs"], stats["current-tubes"]) == ("5", "5", "2")
    assert (stats["current-producers"], stats["current-workers"], stats["current-waiting"]) == ("1", "1", "1")
    assert (stats["version"], stats["draining"], stats["raft-state"]) == ('"1.12"', "false", "leader")


def test_a_delay_shortened_by_its_wait_for_a_starting_node_shows_the_seconds_asked_for():
    # A `put 0 1 ...` that arrived while the node started is logged with 1 s less
    # the wait (session.py _duration_ms): 999 ms. beanstalkd shows `delay: 1`;
    # the floor that age and time-left use showed 0 (the [delay] differential case).
    state = QueueState()
    (shortened,) = apply(state, S, (C.PUT, "default", 0, 999, 60_000, b"x"))
    (exact,) = apply(state, S, (C.PUT, "default", 0, 3_000, 60_000, b"x"))
    assert dict(parse(job_stats(state.job(shortened[1]), state, S)))["delay"] == "1"
    assert dict(parse(job_stats(state.job(exact[1]), state, S)))["delay"] == "3"
