"""What a bench run measured, and how it is shown: latency percentiles, a table, JSON.

Rules: latencies are kept exactly, in nanoseconds, as (value, count) pairs — many
replies parsed from one read share both their send time and their reply time, so
pairs are far fewer than replies, and percentiles need no histogram rounding.
Percentiles use the nearest-rank definition, so each one is a latency that some
command actually had, and p50 <= p90 <= p99 <= max always holds.
"""

from __future__ import annotations

import json
import math
from fractions import Fraction
from array import array
from dataclasses import dataclass, field
from typing import Any, Protocol

PERCENTILES = (50, 90, 99, 99.9)
_COLUMNS = ("p50", "p90", "p99", "p99.9", "max")  # latency columns, in milliseconds


class Latencies:
    """Latency samples in nanoseconds, as (value, count) pairs."""

    __slots__ = ("values", "counts")

    def __init__(self) -> None:
        self.values = array("q")
        self.counts = array("q")

    def add(self, value_ns: int, count: int = 1) -> None:
        self.values.append(value_ns)
        self.counts.append(count)

    def extend(self, other: Latencies) -> None:
        self.values.extend(other.values)
        self.counts.extend(other.counts)

    def __len__(self) -> int:
        return sum(self.counts)

    def summary(self) -> dict[str, float] | None:
        """p50/p90/p99/max in milliseconds, and the sample count; None when empty."""
        total = len(self)
        if total == 0:
            return None
        pairs = sorted(zip(self.values, self.counts))
        # Nearest rank, in exact arithmetic (0.999 * 2000 is 1998.0000000000002 in floats).
        ranks = [(f"{p:g}", max(1, math.ceil(Fraction(str(p)) * total / 100))) for p in PERCENTILES]
        out: dict[str, float] = {}
        seen = 0
        i = 0
        for value, count in pairs:
            seen += count
            while i < len(ranks) and seen >= ranks[i][1]:
                out[f"p{ranks[i][0]}"] = value / 1e6
                i += 1
            if i == len(ranks):
                break
        out["max"] = pairs[-1][0] / 1e6
        out["count"] = total
        return out


class Measured(Protocol):
    """What a part of a run measured: one process's share (load.ShareResult) or a whole run."""

    measured_puts: int
    measured_cycles: int
    put_latency: Latencies
    e2e_latency: Latencies
    totals: dict[str, int]


@dataclass
class RunResult:
    """One workload against one server, merged over every connection and process."""

    workload: str
    address: str
    server: str = ""  # "beanstalkd" / "haqueue" when bench started it, else ""
    measured_puts: int = 0
    measured_cycles: int = 0
    put_seconds: float = 0.0
    cycle_seconds: float = 0.0
    put_latency: Latencies = field(default_factory=Latencies)
    e2e_latency: Latencies = field(default_factory=Latencies)
    totals: dict[str, int] = field(default_factory=dict)
    runs: list[float] = field(default_factory=list)  # jobs/s of each pooled run

    @property
    def puts_per_s(self) -> float:
        return self.measured_puts / self.put_seconds if self.put_seconds > 0 else 0.0

    @property
    def cycles_per_s(self) -> float:
        return self.measured_cycles / self.cycle_seconds if self.cycle_seconds > 0 else 0.0

    @property
    def jobs_per_s(self) -> float:
        """The headline figure: puts/s for `put`, completed cycles/s for `cycle`."""
        return self.cycles_per_s if self.workload == "cycle" else self.puts_per_s

    def add_measured(self, part: Measured) -> None:
        """Add a part's counts, latency samples and totals. Its seconds are the caller's to
        combine: a run's shares overlap in time, pooled runs follow one another."""
        self.measured_puts += part.measured_puts
        self.measured_cycles += part.measured_cycles
        self.put_latency.extend(part.put_latency)
        self.e2e_latency.extend(part.e2e_latency)
        for k, v in part.totals.items():
            self.totals[k] = self.totals.get(k, 0) + v

    def latency_summaries(self) -> dict[str, dict[str, float] | None]:
        out = {"put": self.put_latency.summary()}
        if self.workload == "cycle":
            out["end_to_end"] = self.e2e_latency.summary()
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "server": self.server or None,
            "address": self.address,
            "jobs_per_s": round(self.jobs_per_s, 1),
            "puts_per_s": round(self.puts_per_s, 1),
            "cycles_per_s": round(self.cycles_per_s, 1) if self.workload == "cycle" else None,
            "measured": {
                "puts": self.measured_puts,
                "put_seconds": round(self.put_seconds, 6),
                "cycles": self.measured_cycles,
                "cycle_seconds": round(self.cycle_seconds, 6),
            },
            "latency_ms": self.latency_summaries(),
            "totals": dict(self.totals),
            "jobs_per_s_of_each_run": [round(r, 1) for r in self.runs or [self.jobs_per_s]],
        }


def pool(results: list[RunResult]) -> RunResult:
    """Several runs of one workload against one server as one: counts, seconds and
    latency samples add up, so the pooled rate is total jobs / total measured time."""
    first = results[0]
    out = RunResult(workload=first.workload, address=first.address, server=first.server)
    for r in results:
        out.add_measured(r)
        out.put_seconds += r.put_seconds
        out.cycle_seconds += r.cycle_seconds
        out.runs.extend(r.runs or [r.jobs_per_s])
    if len({r.address for r in results}) > 1:
        out.address = "(fresh each run)"
    return out


@dataclass
class MemoryResult:
    """Resident memory of one server process before and after it queued `jobs` jobs."""

    server: str
    address: str
    jobs: int
    body_size: int
    rss_before: int
    rss_after: int

    @property
    def bytes_per_job(self) -> float:
        return (self.rss_after - self.rss_before) / self.jobs

    def to_json(self) -> dict[str, Any]:
        return {
            "server": self.server,
            "address": self.address,
            "jobs": self.jobs,
            "body_size": self.body_size,
            "rss_before": self.rss_before,
            "rss_after": self.rss_after,
            "bytes_per_job": round(self.bytes_per_job, 1),
        }


_LATENCY_LABELS = {"put": "put", "end_to_end": "put->delete"}


def _ms(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.3f}" if value < 10 else f"{value:.1f}"


def _ratio(a: float | None, b: float | None) -> str:
    if a is None or b is None or b == 0:
        return "-"
    return f"{a / b:.2f}x"


def format_runs(runs: list[RunResult], headline: str) -> str:
    """A small table: one row per (server, latency kind); a ratio row for two runs."""
    rate = "cycles/s" if runs and runs[0].workload == "cycle" else "puts/s"
    header = ["server", "address", rate, "latency", *(f"{k} ms" for k in _COLUMNS)]
    rows: list[list[str]] = []
    for run in runs:
        first = True
        for kind, summary in run.latency_summaries().items():
            s = summary or {}
            rows.append(
                [
                    (run.server or "-") if first else "",
                    run.address if first else "",
                    f"{run.jobs_per_s:,.0f}" if first else "",
                    _LATENCY_LABELS[kind],
                    *(_ms(s.get(k)) for k in _COLUMNS),
                ]
            )
            first = False
    # The last run against each earlier one (with two runs: second/first).
    for b in runs[:-1] if len(runs) >= 2 else ():
        a = runs[-1]
        first = True
        for kind, sa in a.latency_summaries().items():
            sb = b.latency_summaries()[kind] or {}
            sa = sa or {}
            rows.append(
                [
                    f"{a.server or 'second'}/{b.server or 'first'}" if first else "",
                    "",
                    _ratio(a.jobs_per_s, b.jobs_per_s) if first else "",
                    _LATENCY_LABELS[kind],
                    *(_ratio(sa.get(k), sb.get(k)) for k in _COLUMNS),
                ]
            )
            first = False
    spread = [
        f"{run.server or run.address}: " + ", ".join(f"{r:,.0f}" for r in run.runs)
        for run in runs
        if len(run.runs) > 1
    ]
    if spread:
        rows_text = _table(header, rows)
        return "\n".join([headline, rows_text, f"{rate} of each run: " + "; ".join(spread)])
    return headline + "\n" + _table(header, rows)


def format_memory(results: list[MemoryResult]) -> str:
    header = ["server", "address", "jobs", "body B", "RSS before", "RSS after", "bytes/job"]
    rows = [
        [
            r.server,
            r.address,
            f"{r.jobs:,}",
            str(r.body_size),
            _mib(r.rss_before),
            _mib(r.rss_after),
            f"{r.bytes_per_job:,.1f}",
        ]
        for r in results
    ]
    if len(results) == 2:
        a, b = results[1], results[0]
        rows.append(
            [f"{a.server}/{b.server}", "", "", "", "", "", _ratio(a.bytes_per_job, b.bytes_per_job)]
        )
    return "memory: resident set size of the server process, by PID\n" + _table(header, rows)


def format_timers(results: list, headline: str) -> str:
    """Timer lateness per server and kind (haqueue.bench.timers.TimerResult)."""
    header = ["server", "timer", "count", "early", "min ms", "p50 ms", "p99 ms", "max ms"]
    rows = []
    for r in results:
        for kind in (*r.samples, None):
            s = r.summary(kind)
            if s is not None:
                rows.append([r.server or r.address, kind or "all", str(s["count"]), str(s["early"]),
                             f"{s['min']:.2f}", f"{s['p50']:.2f}", f"{s['p99']:.2f}", f"{s['max']:.2f}"])
    return headline + "\n" + _table(header, rows)


def format_startup(results: list, starts: int, durable: bool, unix: bool = False) -> str:
    """Start-up times per server (haqueue.bench.startup.StartupResult)."""
    header = ["server", "from exec to", "starts", "min ms", "p50 ms", "p90 ms", "max ms"]
    rows = []
    for r in results:
        for which, label in (("listening", "listening"), ("answered", "put answered"),
                             ("cpu", "reply (cpu)")):
            s = r.summary(which)
            rows.append([r.server, label, str(s["count"]), f"{s['min']:.1f}", f"{s['p50']:.1f}",
                         f"{s['p90']:.1f}", f"{s['max']:.1f}"])
    mode = ("durable (-b DIR)" if durable else "in memory") + (", on a Unix socket" if unix else "")
    return (f"start-up: {starts} starts per server, taking turns, {mode}; connect polled every 1 ms;\n"
            "reply (cpu): the CPU time the server used until its reply\n"
            + _table(header, rows))


def _mib(n: int) -> str:
    return f"{n / 2**20:,.1f} MiB"


def _table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    # Text columns are left-aligned, figures right-aligned.
    left = {0, 1, 3} if "latency" in header else {0, 1}

    def fmt(row: list[str]) -> str:
        cells = [c.ljust(w) if i in left else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))]
        return "  ".join(cells).rstrip()

    return "\n".join(fmt(r) for r in [header, *rows])


def to_json(settings: dict[str, Any], runs: list[RunResult], memory: list[MemoryResult]) -> str:
    """The same figures as the tables, for machines: one JSON document."""
    doc: dict[str, Any] = {"settings": settings}
    if runs:
        doc["runs"] = [r.to_json() for r in runs]
        if len(runs) == 2:
            a, b = runs[1], runs[0]
            ratio: dict[str, Any] = {
                "of": f"{a.server or 'second'}/{b.server or 'first'}",
                "jobs_per_s": _num_ratio(a.jobs_per_s, b.jobs_per_s),
                "latency": {},
            }
            for kind, sa in a.latency_summaries().items():
                sb = b.latency_summaries()[kind] or {}
                sa = sa or {}
                ratio["latency"][kind] = {
                    k: _num_ratio(sa.get(k), sb.get(k)) for k in _COLUMNS
                }
            doc["ratio"] = ratio
    if memory:
        doc["memory"] = [m.to_json() for m in memory]
        if len(memory) == 2:
            doc["memory_ratio"] = _num_ratio(memory[1].bytes_per_job, memory[0].bytes_per_job)
    return json.dumps(doc, indent=2) + "\n"


def _num_ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b == 0:
        return None
    return round(a / b, 4)
