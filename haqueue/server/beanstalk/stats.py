"""The bodies of `stats`, `stats-tube` and `stats-job`, key for key as beanstalkd 1.12.

Keys and their order are beanstalkd's (prot.c STATS_FMT, STATS_TUBE_FMT,
JOB_STATS_FMT in 1.12); haqueue adds its own keys only after them. Times in
the replicated state are milliseconds; the protocol shows whole seconds,
truncated as beanstalkd's integer division does.
"""

from __future__ import annotations

import os
import resource
import socket

from haqueue import __version__
from haqueue.core.job import STATE_NAMES
from haqueue.protocol.beanstalk import yaml_dict

# The protocol version haqueue speaks; clients gate features (reserve-job) on it.
BEANSTALKD_VERSION = '"1.12"'

# Commands counted in `stats` as cmd-<name>, in beanstalkd's order.
COUNTED_COMMANDS = (
    "put", "peek", "peek-ready", "peek-delayed", "peek-buried", "reserve",
    "reserve-with-timeout", "delete", "release", "use", "watch", "ignore", "bury",
    "kick", "touch", "stats", "stats-job", "stats-tube", "list-tubes",
    "list-tube-used", "list-tubes-watched", "pause-tube",
)


def _seconds(ms: int) -> int:
    return ms // 1000 if ms > 0 else 0


def _asked_seconds(ms: int) -> int:
    """The whole seconds a client asked for (put's and release's delay, pause-tube's).
    The logged value is that many seconds, less the time a command waited for a
    starting node (session.py `_duration_ms`: the delay counts from its arrival), so
    it is rounded back, not floored: `put 0 1 ...` sent while the node started shows
    `delay: 1`, as beanstalkd's does (its floor would show 0)."""
    return (ms + 500) // 1000 if ms > 0 else 0


def job_stats(job, state, now: int) -> bytes:
    return yaml_dict((
        ("id", job.id),
        ("tube", job.tube.name),
        ("state", STATE_NAMES[job.state]),
        ("pri", job.pri),
        ("age", _seconds(now - job.created)),
        ("delay", _asked_seconds(job.delay)),
        ("ttr", _seconds(job.ttr)),
        ("time-left", _seconds(state.job_time_left(job, now))),
        ("file", 0),
        ("reserves", job.reserves),
        ("timeouts", job.timeouts),
        ("releases", job.releases),
        ("buries", job.buries),
        ("kicks", job.kicks),
    ))


def tube_stats(name: str, state, directory, waiting: int, now: int) -> bytes:
    tube = state.tubes.get(name)
    if tube is None:
        counts = (0, 0, 0, 0, 0)
        total = cmd_delete = cmd_pause = pause = left = 0
    else:
        counts = (tube.urgent_count, tube.ready_count, tube.reserved_count, tube.delayed_count,
                  len(tube.buried))
        total, cmd_delete, cmd_pause = tube.total_jobs, tube.cmd_delete, tube.cmd_pause
        paused = tube.paused(now)
        pause = _asked_seconds(tube.pause) if paused else 0
        left = _seconds(tube.unpause_at - now) if paused else 0
    return yaml_dict((
        ("name", name),
        ("current-jobs-urgent", counts[0]),
        ("current-jobs-ready", counts[1]),
        ("current-jobs-reserved", counts[2]),
        ("current-jobs-delayed", counts[3]),
        ("current-jobs-buried", counts[4]),
        ("total-jobs", total),
        ("current-using", directory.using.get(name, 0)),
        ("current-watching", directory.watching.get(name, 0)),
        ("current-waiting", waiting),
        ("cmd-delete", cmd_delete),
        ("cmd-pause-tube", cmd_pause),
        ("pause", pause),
        ("pause-time-left", left),
    ))


class ServerCounters:
    """Per-process counters, as beanstalkd keeps them (they restart with the leader)."""

    def __init__(self) -> None:
        self.commands = dict.fromkeys(COUNTED_COMMANDS, 0)
        self.total_connections = 0
        self.rejected_connections = 0  # beyond max_connections
        self.output_limit_closes = 0  # closed for not reading their replies
        self.out_of_memory_replies = 0  # OUT_OF_MEMORY answered (a limit reached)
        self.gearman_connections = 0  # Gearman connections accepted (not in total_connections)
        self.gearman_errors = 0  # Gearman packets answered with ERROR for bad input
        self.started_ms = 0
        self.instance_id = os.urandom(8).hex()


def server_stats(state, directory, counters: ServerCounters, sessions, waiting: int, now: int,
                 max_job_size: int, draining: bool, journal=None, raft: dict | None = None,
                 limits: list[tuple[str, object]] = ()) -> bytes:
    counts = state.counts()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    uname = os.uname()  # what beanstalkd reports: uname(2)
    producers = sum(1 for s in sessions if s.is_producer)
    workers = sum(1 for s in sessions if s.is_worker)
    pairs = [
        ("current-jobs-urgent", counts["urgent"]),
        ("current-jobs-ready", counts["ready"]),
        ("current-jobs-reserved", counts["reserved"]),
        ("current-jobs-delayed", counts["delayed"]),
        ("current-jobs-buried", counts["buried"]),
    ]
    pairs += [(f"cmd-{name}", counters.commands[name]) for name in COUNTED_COMMANDS]
    pairs += [
        ("job-timeouts", state.job_timeouts),
        ("total-jobs", state.total_jobs),
        ("max-job-size", max_job_size),
        ("current-tubes", len(directory.order)),
        ("current-connections", len(sessions)),
        ("current-producers", producers),
        ("current-workers", workers),
        ("current-waiting", waiting),
        ("total-connections", counters.total_connections),
        ("pid", os.getpid()),
        ("version", BEANSTALKD_VERSION),
        ("rusage-utime", "%d.%06d" % (int(usage.ru_utime), int(usage.ru_utime * 1e6) % 1000000)),
        ("rusage-stime", "%d.%06d" % (int(usage.ru_stime), int(usage.ru_stime * 1e6) % 1000000)),
        ("uptime", _seconds(now - counters.started_ms)),
        ("binlog-oldest-index", 0),
        ("binlog-current-index", 0),
        ("binlog-records-migrated", 0),
        ("binlog-records-written", journal.records_written if journal is not None else 0),
        ("binlog-max-size", 0),
        ("draining", draining),
        ("id", counters.instance_id),
        ("hostname", socket.gethostname()),
        ("os", uname.version),
        ("platform", uname.machine),
    ]
    # haqueue's own keys, after beanstalkd's.
    pairs.append(("haqueue-version", __version__))
    pairs.append(("haqueue-internal-errors", state.internal_errors))
    pairs.append(("haqueue-journal-syncs", journal.syncs if journal is not None else 0))
    # The id the next put gets: where `haqueue tube tail` starts following (console/tail.py).
    pairs.append(("haqueue-next-id", state.next_id))
    pairs += [(f"haqueue-{key}", value) for key, value in limits]
    if raft:
        for key, value in raft.items():
            pairs.append((f"raft-{key.replace('_', '-')}", "" if value is None else value))
    return yaml_dict(pairs)
