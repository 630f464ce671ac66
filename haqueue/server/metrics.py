"""GET /metrics: the node's state in the Prometheus text format, read at scrape time.

Nothing is updated on the hot path for this: a custom prometheus-client
collector reads the queue state, the Raft node and the counters the
replication layer already keeps (haqueue/replication/observed.py) when
Prometheus asks. Every node serves its own, followers too.

Names follow the beanstalkd exporters (messagebird/beanstalkd_exporter and
its forks): the `stats` key with dashes as underscores under `beanstalkd_`,
and the `stats-tube` keys under `beanstalkd_tube_` with a `tube` label.
Cumulative counts are Prometheus counters and so end in `_total`. The
mapping is documented in docs/operations.md ("Metrics"); the cluster's own
series are `haqueue_*`.

Per-tube series dominate a scrape (a dozen per tube: 12,000 lines for 1,000
tubes), and prometheus-client formats a sample in several microseconds —
tens of milliseconds per scrape, on the node's event loop. So the tube
families alone are written by `TubeSeries`, which keeps a format string per
family for the current list of tubes and fills in only the integer values
each scrape; everything else (server, Raft, histograms, process) goes
through prometheus-client.
"""

from __future__ import annotations

import os
import threading
import time

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
)
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.utils import floatToGoString

from haqueue import __version__
from haqueue.core.tube import Tube
from haqueue.server.batcher import wall_ms
from haqueue.server.beanstalk.stats import COUNTED_COMMANDS

CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4
ROLES = ("leader", "follower", "candidate")
VIP_RECHECK_SECONDS = 10.0

# (metric name, type, help) of each per-tube family, in the order of tube_rows' columns.
TUBE_FAMILIES = (
    ("beanstalkd_tube_current_jobs_urgent", "gauge", "Ready jobs with priority < 1024 (stats-tube current-jobs-urgent)."),
    ("beanstalkd_tube_current_jobs_ready", "gauge", "Ready jobs (stats-tube current-jobs-ready)."),
    ("beanstalkd_tube_current_jobs_reserved", "gauge", "Reserved jobs (stats-tube current-jobs-reserved)."),
    ("beanstalkd_tube_current_jobs_delayed", "gauge", "Delayed jobs (stats-tube current-jobs-delayed)."),
    ("beanstalkd_tube_current_jobs_buried", "gauge", "Buried jobs (stats-tube current-jobs-buried)."),
    ("beanstalkd_tube_current_using", "gauge", "Connections using the tube (stats-tube current-using)."),
    ("beanstalkd_tube_current_watching", "gauge", "Connections watching the tube (stats-tube current-watching)."),
    ("beanstalkd_tube_current_waiting", "gauge", "Workers waiting in reserve on the tube (stats-tube current-waiting)."),
    ("beanstalkd_tube_pause_time_left", "gauge", "Seconds until the tube unpauses; 0 when not paused."),
    ("beanstalkd_tube_jobs_total", "counter", "Jobs put into the tube (stats-tube total-jobs)."),
    ("beanstalkd_tube_cmd_delete_total", "counter", "delete commands on the tube (stats-tube cmd-delete)."),
    ("beanstalkd_tube_cmd_pause_tube_total", "counter", "pause-tube commands on the tube (stats-tube cmd-pause-tube)."),
)


# Server-wide job counts: the sum of these tube columns.
JOB_COUNT_COLUMNS = {"urgent": 0, "ready": 1, "delayed": 3, "buried": 4}


def _label_value(text: str) -> str:
    # The text format's escaping (beanstalkd tube names never need it, but a
    # label value must stay one line whatever a name holds).
    return text.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


class TubeSeries:
    """Writes the per-tube families with one %-format per family.

    While the list of tubes stays the same from one scrape to the next (the
    usual case), each family is a single bytes format with one `%d` per tube,
    made once, so a scrape formats all of a family's values in one C call.
    """

    def __init__(self) -> None:
        self._names: list[str] | None = None
        self._formats: tuple[bytes, ...] = ()
        self._headers = tuple(f"# HELP {name} {help_}\n# TYPE {name} {kind}\n".encode()
                              for name, kind, help_ in TUBE_FAMILIES)

    def _make_formats(self, names: list[str]) -> None:
        labels = [_label_value(name).replace("%", "%%") for name in names]
        self._formats = tuple(
            "".join(f'{metric}{{tube="{label}"}} %d\n' for label in labels).encode()
            for metric, _, _ in TUBE_FAMILIES
        )
        self._names = names

    def render(self, names: list[str], columns: list[tuple[int, ...]]) -> list[bytes]:
        """The families' text as chunks (joining 650 KB for 1,000 tubes would only copy it)."""
        if names != self._names:
            self._make_formats(names)
        chunks = []
        for header, fmt, column in zip(self._headers, self._formats, columns):
            chunks.append(header)
            chunks.append(fmt % column)
        return chunks


def tube_rows(server) -> tuple[list[str], list[tuple[int, ...]]]:
    """Tube names and one column of values per TUBE_FAMILIES entry, read under the state lock.

    Column by column, one comprehension each: a scrape reads every tube, and
    this is several times cheaper than building a row per tube.
    """
    waiting: dict[str, int] = {}
    for session in server.waiters:
        for name in session.watch:
            waiting[name] = waiting.get(name, 0) + 1
    directory = server.directory
    now = wall_ms()
    tubes = server.state.tubes
    names = tube_names(directory.order, tubes)
    records = [tubes.get(name) or Tube(name) for name in names]
    columns = [
        tuple([tube.urgent_count for tube in records]),
        tuple([tube.ready_count for tube in records]),
        tuple([tube.reserved_count for tube in records]),
        tuple([tube.delayed_count for tube in records]),
        tuple([len(tube.buried) for tube in records]),
        None, None, None,  # using, watching, waiting: the leader's, not replicated
        tuple([(tube.unpause_at - now) // 1000 if tube.pause and tube.unpause_at > now else 0
               for tube in records]),
        tuple([tube.total_jobs for tube in records]),
        tuple([tube.cmd_delete for tube in records]),
        tuple([tube.cmd_pause for tube in records]),
    ]
    for slot, counts in ((5, directory.using), (6, directory.watching), (7, waiting)):
        columns[slot] = tuple([counts.get(name, 0) for name in names])
    return names, columns


def tube_names(listed, replicated) -> list[str]:
    """The tubes clients see (the leader's directory; a follower's holds only
    "default"), then any replicated tube with a record that is not among them,
    so every node reports every tube that holds jobs."""
    names = list(listed)
    seen = set(names)
    return names + [name for name in replicated if name not in seen]


class VipWatch:
    """Whether this host holds the cluster's virtual IP, as `haqueue ops check` sees it.

    Reading the host's addresses through netlink takes milliseconds, so it is
    done in a thread at most every VIP_RECHECK_SECONDS and a scrape reports
    the last answer (None until the first one).
    """

    def __init__(self, vip: str) -> None:
        self.vip = vip
        self.held: bool | None = None
        self._checked = float("-inf")
        self._running = False

    def current(self) -> bool | None:
        now = time.monotonic()
        if not self._running and now - self._checked >= VIP_RECHECK_SECONDS:
            self._running, self._checked = True, now
            threading.Thread(target=self._check, name="vip-watch", daemon=True).start()
        return self.held

    def _check(self) -> None:
        from haqueue.ops import check

        try:
            self.held = self.vip in check.local_addresses(check.read_links())
        except Exception:  # netlink unavailable: report nothing rather than a guess
            self.held = None
        finally:
            self._running = False


class NodeCollector:
    """The server-wide beanstalkd series and the cluster's haqueue_* series."""

    def __init__(self, server) -> None:
        self.server = server
        # Ready/urgent/delayed/buried over all tubes, summed from the tube
        # columns of the same scrape (Metrics.exposition) rather than
        # walking every tube a second time.
        self.job_counts: dict[str, int] = {}
        vip = server.options.listen.vip
        self.vip_watch = VipWatch(vip) if vip else None

    def collect(self):
        server = self.server
        replica = server.replica
        if replica is None:
            return
        yield from self._beanstalkd(server)
        yield from self._raft(server, replica)

    def _beanstalkd(self, server):
        counts = self.job_counts
        state = server.state
        counts["reserved"] = state.reserved_count
        job_timeouts, total_jobs = state.job_timeouts, state.total_jobs
        internal_errors = state.internal_errors
        for key in ("urgent", "ready", "reserved", "delayed", "buried"):
            yield GaugeMetricFamily(f"beanstalkd_current_jobs_{key}", f"{key.capitalize()} jobs, all tubes "
                                    f"(stats current-jobs-{key}).", value=counts[key])
        commands = server.counters.commands
        for name in COUNTED_COMMANDS:
            metric = name.replace("-", "_")
            yield CounterMetricFamily(f"beanstalkd_cmd_{metric}", f"{name} commands served by this "
                                      f"node (stats cmd-{name}).", value=commands[name])
        sessions = server.sessions
        producers = sum(1 for s in sessions if s.is_producer)
        workers = sum(1 for s in sessions if s.is_worker)
        journal = node_journal(server)
        uptime = max(0, wall_ms() - server.counters.started_ms) // 1000
        for name, value, help_ in (
            ("current_tubes", len(server.directory.order), "Tubes (stats current-tubes)."),
            ("current_connections", len(sessions), "Open client connections (stats current-connections)."),
            ("current_producers", producers, "Connections that have put (stats current-producers)."),
            ("current_workers", workers, "Connections that have reserved (stats current-workers)."),
            ("current_waiting", len(server.waiters), "Connections waiting in reserve (stats current-waiting)."),
            ("max_job_size", server.max_job_size, "Largest job body accepted, bytes (stats max-job-size)."),
            ("uptime", uptime, "Seconds this process has run (stats uptime)."),
            ("draining", int(server.draining), "1 in drain mode (stats draining)."),
        ):
            yield GaugeMetricFamily(f"beanstalkd_{name}", help_, value=value)
        for name, value, help_ in (
            ("job_timeouts", job_timeouts, "Reservations that timed out (stats job-timeouts)."),
            ("jobs", total_jobs, "Jobs put (stats total-jobs)."),
            ("connections", server.counters.total_connections, "Connections accepted (stats total-connections)."),
            ("binlog_records_written", journal.records_written if journal else 0,
             "Journal records written (stats binlog-records-written)."),
        ):
            yield CounterMetricFamily(f"beanstalkd_{name}", help_, value=value)
        yield CounterMetricFamily("haqueue_internal_errors", "Commands the core refused as bugs "
                                  "(must stay 0).", value=internal_errors)

    def _raft(self, server, replica):
        status = replica.status()
        info = InfoMetricFamily("haqueue", "This node: haqueue version and name.")
        info.add_metric([], {"version": __version__, "node": server.options.name})
        yield info
        role = GaugeMetricFamily("haqueue_raft_role", "1 for this node's Raft role.", labels=["role"])
        for name in ROLES:
            role.add_metric([name], int(status["role"] == name))
        yield role
        commit, applied = status["commit_index"], status["applied_index"]
        for name, value, help_ in (
            ("haqueue_raft_leader", int(status["role"] == "leader"), "1 on the Raft leader."),
            ("haqueue_serving", int(server.serving), "1 while this node serves clients (the leader, "
                                                     "once it has applied its term's first entry)."),
            ("haqueue_raft_term", status["term"], "Current Raft term."),
            ("haqueue_raft_commit_index", commit, "Highest log index known committed."),
            ("haqueue_raft_applied_index", applied, "Highest log index applied to the queue state."),
            ("haqueue_raft_apply_lag_entries", max(0, commit - applied), "Committed entries not yet applied here."),
            ("haqueue_raft_log_entries", status["log_length"], "Entries in the in-memory Raft log."),
            ("haqueue_raft_has_quorum", int(bool(status["has_quorum"])), "1 while this node sees a quorum."),
            ("haqueue_raft_read_lease", int(replica.read_lease_valid()) if status["role"] == "leader" else 0,
             "1 while the leader has heard a majority recently enough to answer reads locally."),
        ):
            yield GaugeMetricFamily(name, help_, value=value)
        # Peers by their id in the cluster file or their addition's entry (roster.py),
        # else by their Raft address.
        from haqueue.roster import FileNode, directory

        names = {raft: entry.id for raft, entry in directory(
            [FileNode(*m) for m in server.options.members], status.get("member_info") or {}).items()}
        up = GaugeMetricFamily("haqueue_raft_peer_up", "1 while the Raft link to the peer is up.", labels=["peer"])
        for peer, connected in sorted(replica.peers_connected().items()):
            up.add_metric([names.get(peer, peer)], int(connected))
        yield up
        lag = GaugeMetricFamily("haqueue_raft_follower_lag_entries", "On the leader: committed entries the "
                                "follower has not acknowledged.", labels=["peer"])
        lag_seconds = GaugeMetricFamily("haqueue_raft_follower_lag_seconds", "On the leader: how long ago the "
                                        "oldest entry the follower lacks was committed.", labels=["peer"])
        for peer, behind in replica.follower_lag().items():
            lag.add_metric([names.get(peer, peer)], behind["entries"])
            lag_seconds.add_metric([names.get(peer, peer)], behind["seconds"])
        yield lag
        yield lag_seconds
        seen = replica.observations
        yield CounterMetricFamily("haqueue_raft_elections_won", "Elections this node won.", value=seen.elections_won)
        yield CounterMetricFamily("haqueue_raft_elections_lost", "Elections this node stood in and lost.",
                                  value=seen.elections_lost)
        yield _histogram("haqueue_group_commit_commands", "Commands per Raft entry committed by this leader "
                         "(group commit).", seen.batch_commands)
        yield CounterMetricFamily("haqueue_snapshots", "Snapshots written.", value=seen.snapshots)
        yield CounterMetricFamily("haqueue_snapshot_failures", "Snapshot writers that failed.",
                                  value=seen.snapshot_failures)
        yield GaugeMetricFamily("haqueue_snapshot_last_duration_seconds", "How long the last snapshot "
                                "took to write (0 before the first).", value=seen.last_snapshot_seconds or 0)
        yield GaugeMetricFamily("haqueue_snapshot_last_bytes", "Size of the last snapshot this node wrote "
                                "or restored (0 before either).", value=seen.last_snapshot_bytes or 0)
        journal = node_journal(server)
        if journal is not None:
            yield GaugeMetricFamily("haqueue_journal_bytes", "Size of the Raft journal file.", value=journal.file_bytes)
            yield _histogram("haqueue_journal_fsync_seconds", "Time each fsync of the journal took.",
                             journal.fsync_timer.seconds)
        data_dir = server.options.data_dir
        if data_dir:
            try:
                disk = os.statvfs(data_dir)
            except OSError:
                pass
            else:
                yield GaugeMetricFamily("haqueue_data_dir_free_bytes", "Bytes free to unprivileged users "
                                        "on the data directory's file system.", value=disk.f_bavail * disk.f_frsize)
                yield GaugeMetricFamily("haqueue_data_dir_size_bytes", "Size of the data directory's file "
                                        "system.", value=disk.f_blocks * disk.f_frsize)
        reserve = server.disk
        if reserve is not None and reserve.enabled:
            reserve.refresh()  # its timer reads an idle node's disk only every few seconds
            yield GaugeMetricFamily("haqueue_disk_reserve_bytes", "Free bytes the node keeps for its next "
                                    "snapshot (disk_reserve.py), at the last reading.", value=reserve.reserve)
            yield GaugeMetricFamily("haqueue_disk_below_reserve", "1 while free space is below the disk "
                                    "reserve: puts answer OUT_OF_MEMORY.", value=int(reserve.below))
            yield CounterMetricFamily("haqueue_disk_reserve_refusals", "Puts, Gearman submits and id "
                                      "reservations refused below the disk reserve.", value=reserve.refused)
        if self.vip_watch is not None:
            held = self.vip_watch.current()
            if held is not None:
                yield GaugeMetricFamily("haqueue_vip_held", "1 while this host holds the cluster's virtual "
                                        "IP (as haqueue ops check sees it).", value=int(held))


def node_journal(server):
    return server.replica.journal if server.replica is not None else None


def _histogram(name: str, help_: str, histogram) -> HistogramMetricFamily:
    buckets, total, _ = histogram.snapshot()
    return HistogramMetricFamily(name, help_, buckets=[(floatToGoString(b), c) for b, c in buckets],
                                 sum_value=total)


class Metrics:
    """The /metrics body for one node."""

    def __init__(self, server) -> None:
        self.server = server
        self.registry = CollectorRegistry(auto_describe=False)
        self.collector = NodeCollector(server)
        self.registry.register(self.collector)
        self.registry.register(ProcessCollector(registry=None))
        self.tubes = TubeSeries()

    def exposition(self) -> list[bytes]:
        """The body, as chunks to write one after another."""
        if self.server.replica is None:
            return [generate_latest(self.registry)]
        names, columns = tube_rows(self.server)
        self.collector.job_counts = {key: sum(columns[slot]) for key, slot in JOB_COUNT_COLUMNS.items()}
        return [generate_latest(self.registry), *self.tubes.render(names, columns)]
