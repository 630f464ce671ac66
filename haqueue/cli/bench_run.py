"""What `haqueue bench` runs: one set of settings in, one benchmark run and printed.

Every subcommand (cli/bench.py) and the old single-command flag spelling
(cli/bench_legacy.py) fill a Settings and call run(), so `bench compare ...` and
`bench --compare ...` are the same code. Settings' defaults are the options'
defaults (cli/bench_options.py reads them from here). Thin over haqueue.bench: every
BenchError becomes a click.ClickException, which haqueue.cli.main prints as one line
with a non-zero exit (imported from click, not main, to avoid an import cycle).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import time
from collections.abc import Iterator

import click

from haqueue.bench import disk
from haqueue.bench.compare import (
    bench_address,
    bench_cluster,
    bench_cluster_against_beanstalkd,
    bench_servers,
)
from haqueue.bench.load import BenchError, LoadSpec, parse_address
from haqueue.bench.memory import measure_memory
from haqueue.bench.report import format_memory, format_runs, format_startup, format_timers, to_json
from haqueue.progress import Progress, elapsed

PEER_SYSTEMS = ("haqueue-f0", "haqueue-f50", "rabbitmq", "nats")


@dataclasses.dataclass
class Settings:
    """Every bench setting; a subcommand sets its own, the rest keep these defaults
    (which are also its options' defaults)."""

    what: str | None = None  # "ids": the id service's benchmark
    id_mode: str = "both"
    clients: int | None = None
    address: str = "127.0.0.1:11300"
    workload: str = "put"
    rate: float = 2000.0
    tube: str = "bench"
    connections: int = 8
    window: int = 64
    producers: int = 4
    consumers: int = 4
    body_size: int = 100
    duration: float | None = None
    jobs: int | None = None
    warmup: float = 1.0
    backlog: int | None = None
    processes: int = 1
    repeat: int = 1
    timeout: float = 10.0
    json_path: str | None = None
    server: str | None = None
    compare: bool = False
    compare_with: str = "haqueue"
    durable: bool = False
    memory_jobs: int | None = None
    scrape_tubes: int | None = None
    timer_count: int | None = None
    startup_count: int | None = None
    startup_unix: bool = False
    flood: bool = False
    server_cpus: str | None = None
    cluster: str | None = None
    gearman_workload: str | None = None
    gearman_nodes: int = 3
    peers: bool = False
    peer_systems: str = ",".join(PEER_SYSTEMS)


def run(settings: Settings) -> None:
    """Run the benchmark `settings` choose and print its figures."""
    _run(**dataclasses.asdict(settings))


def _run(
    what: str | None,
    id_mode: str,
    clients: int | None,
    address: str,
    workload: str,
    rate: float,
    tube: str,
    connections: int,
    window: int,
    producers: int,
    consumers: int,
    body_size: int,
    duration: float | None,
    jobs: int | None,
    warmup: float,
    backlog: int | None,
    processes: int,
    repeat: int,
    timeout: float,
    json_path: str | None,
    server: str | None,
    compare: bool,
    compare_with: str,
    durable: bool,
    memory_jobs: int | None,
    scrape_tubes: int | None,
    timer_count: int | None,
    startup_count: int | None,
    startup_unix: bool,
    flood: bool,
    server_cpus: str | None,
    cluster: str | None,
    gearman_workload: str | None,
    gearman_nodes: int,
    peers: bool,
    peer_systems: str,
) -> None:
    """The benchmark the settings choose (the old single command's body, kept whole:
    every subcommand and the old flag spelling run through it)."""
    if what == "ids":
        from haqueue.bench.ids import bench_ids

        modes = ["segment", "exact"] if id_mode == "both" else [id_mode]
        try:
            progress, started = Progress(), time.monotonic()
            with _sigterm_as_interrupt(), progress.ticking(lambda: f"bench ids: {elapsed(started)} elapsed"):
                runs = bench_ids(modes, clients, None, warmup, duration or 5.0)
        except BenchError as exc:
            raise click.ClickException(str(exc)) from None
        for run in runs:
            click.echo(run.describe())
        return
    if peers:
        _bench_peers(peer_systems, server_cpus, duration or 5.0, warmup, timeout, json_path,
                     others=[n for n, on in (("--server", server), ("--compare", compare), ("--cluster", cluster),
                                             ("--memory", memory_jobs), ("--scrape", scrape_tubes),
                                             ("--timers", timer_count), ("--startup", startup_count),
                                             ("--flood", flood), ("--gearman", gearman_workload)) if on])
        return
    if server_cpus is not None:
        from haqueue.bench.servers import pin_servers

        try:
            cpus = {int(part) for part in server_cpus.split(",") if part.strip()}
        except ValueError:
            raise click.ClickException(f"--server-cpus {server_cpus!r}: expected CPU numbers, e.g. 0 or 0,1")
        try:
            pin_servers(cpus or {-1})
        except BenchError as exc:
            raise click.ClickException(str(exc)) from None
    if gearman_workload is not None:
        _bench_gearman(gearman_workload, gearman_nodes, connections, producers, consumers, body_size,
                       duration or 5.0, warmup, backlog, timeout, repeat, json_path,
                       others=[n for n, on in (("--server", server), ("--compare", compare),
                                               ("--cluster", cluster), ("--memory", memory_jobs)) if on])
        return
    if scrape_tubes is not None:
        from haqueue.bench.scrape import bench_scrape

        others = [n for n, on in (("--server", server), ("--compare", compare), ("--cluster", cluster),
                                  ("--memory", memory_jobs), ("--json", json_path)) if on]
        if others:
            raise click.ClickException(f"--scrape starts its own node: it excludes {' and '.join(others)}")

        try:
            progress, started = Progress(), time.monotonic()
            with _sigterm_as_interrupt(), progress.ticking(lambda: f"bench scrape: {elapsed(started)} elapsed"):
                result = bench_scrape(scrape_tubes)
            click.echo(result.describe())
        except BenchError as exc:
            raise click.ClickException(str(exc)) from None
        return
    chosen = [n for n, on in (("--server", server), ("--compare", compare), ("--cluster", cluster)) if on]
    compare_cluster = compare and cluster is not None
    if compare_cluster:
        # The cluster against beanstalkd in memory and beanstalkd -b DIR -f0,
        # both started here, in the same run.
        chosen = [n for n in chosen if n != "--compare"]
        compare = False
    if len(chosen) > 1:
        raise click.ClickException(f"{' and '.join(chosen)} exclude each other")
    if compare_cluster and (durable or memory_jobs):
        raise click.ClickException("--compare --cluster always runs beanstalkd both in memory and with -f0")
    kinds = ["beanstalkd", compare_with] if compare else [server] if server else []
    if durable and not kinds:
        raise click.ClickException(
            "--durable applies to servers bench starts: add --server or --compare"
        )
    if memory_jobs and cluster:
        raise click.ClickException("--memory starts its own servers: use --server or --compare")
    if startup_count and (timer_count or memory_jobs or cluster or not kinds):
        raise click.ClickException("--startup starts its own servers: use it with --server or "
                                   "--compare alone")
    if startup_unix and not startup_count:
        raise click.ClickException("--unix goes with --startup")
    if timer_count and memory_jobs:
        raise click.ClickException("--timers and --memory are separate benchmarks: run one at a time")
    if timer_count and compare_cluster:
        raise click.ClickException("--timers takes --cluster or --compare, not both")
    if flood and ((not kinds and not cluster) or compare_cluster or memory_jobs or durable):
        raise click.ClickException("--flood takes --server, --compare or --cluster, alone")
    if flood:
        from haqueue.bench.flood import SAMPLES, flood_cluster, flood_servers, format_flood

        try:
            with _sigterm_as_interrupt():
                if cluster:
                    results = flood_cluster(cluster, jobs or SAMPLES, repeat, timeout)
                else:
                    results = flood_servers(kinds, jobs or SAMPLES, repeat)
                click.echo(format_flood(results))
        except BenchError as exc:
            raise click.ClickException(str(exc)) from None
        return
    if memory_jobs and not kinds:
        raise click.ClickException("--memory reads a server's RSS by PID: add --server or --compare")
    if json_path is not None:
        folder = os.path.dirname(os.path.abspath(json_path))
        if not os.path.isdir(folder) or not os.access(folder, os.W_OK):
            raise click.ClickException(f"cannot write {json_path}: {folder} is not a writable directory")
    if duration is None and jobs is None:
        duration = 5.0
    sync_ms = None
    try:
        host, port = parse_address(address)
        spec = LoadSpec(
            host=host,
            port=port,
            workload=workload,
            tube=tube,
            connections=connections,
            window=window,
            producers=producers,
            consumers=consumers,
            body_size=body_size,
            duration=duration,
            jobs=jobs,
            warmup=warmup,
            backlog=backlog,
            processes=processes,
            timeout=timeout,
            rate=rate,
        )
        spec.validate()
        # A per-second line on a terminal (quiet when piped): runs take seconds to minutes.
        progress = Progress()
        started = time.monotonic()
        with _sigterm_as_interrupt(), progress.ticking(lambda: f"bench: {elapsed(started)} elapsed"):
            if startup_count:
                from haqueue.bench.startup import measure_startup

                started_runs = measure_startup(kinds, startup_count, durable, unix=startup_unix)
                click.echo(format_startup(started_runs, startup_count, durable, unix=startup_unix))
                if json_path is not None:
                    _write_doc_json(json_path, {"settings": {"starts": startup_count, "durable": durable,
                                                             "unix": startup_unix},
                                                "startup": [r.to_json() for r in started_runs]})
                return
            if timer_count:
                results = measure_timers_on(spec, kinds, durable, cluster, timer_count)
                click.echo(format_timers(results, _timers_headline(timer_count, durable if kinds else None)))
                if json_path is not None:
                    _write_doc_json(json_path, {"settings": {"timers": timer_count, "durable": durable},
                                                "timers": [r.to_json() for r in results]})
                return
            if memory_jobs:
                memory = measure_memory(spec, kinds, durable, memory_jobs)
                runs = []
                click.echo(format_memory(memory))
            else:
                if compare_cluster:
                    runs = bench_cluster_against_beanstalkd(spec, cluster, repeat)
                elif kinds:
                    runs = bench_servers(spec, kinds, durable, repeat)
                elif cluster:
                    runs = [bench_cluster(spec, cluster, repeat)]
                else:
                    runs = [bench_address(spec, repeat)]
                memory = []
                click.echo(format_runs(runs, _headline(spec, durable if kinds else None, repeat)))
                if compare_cluster or (durable and kinds):
                    # Where bench's own servers keep their -b data directories.
                    line, sync_ms = disk.describe()
                    click.echo(line)
    except BenchError as exc:
        raise click.ClickException(str(exc)) from None
    if json_path is not None:
        _write_json(json_path, spec, kinds, durable, repeat, memory_jobs, runs, memory, sync_ms)


def measure_timers_on(spec: LoadSpec, kinds: list[str], durable: bool, cluster: str | None,
                      count: int) -> list:
    """The timer benchmark on each started server in turn, the cluster's leader, or the address."""
    from haqueue.bench.cluster import find_leader
    from haqueue.bench.servers import started
    from haqueue.bench.timers import measure_timers

    if kinds:
        results = []
        for kind in kinds:
            with started(kind, durable) as server:
                results.append(measure_timers(server.host, server.port, count, server=kind))
        return results
    if cluster:
        leader, size = find_leader(cluster, spec.timeout)
        return [measure_timers(leader.address, leader.client_port, count, server=f"haqueue {size}-node")]
    return [measure_timers(spec.host, spec.port, count)]


def _timers_headline(count: int, durable: bool | None) -> str:
    from haqueue.bench.timers import DEFAULT_LANES

    where = "" if durable is None else (", durable (-b DIR -f0)" if durable else ", in memory")
    return (f"timers: {count:,} or more, {DEFAULT_LANES} lanes at most; lateness = reply time - "
            f"command sent - asked time (early < 0){where}")


def _write_doc_json(path: str, doc: dict) -> None:
    import json

    try:
        with open(path, "w", encoding="utf-8") as f:
            f.write(json.dumps(doc, indent=2) + "\n")
    except OSError as exc:
        raise click.ClickException(f"cannot write {path}: {exc.strerror or exc}") from None


def _write_json(path, spec, kinds, durable, repeat, memory_jobs, runs, memory, sync_ms=None) -> None:
    settings = {
        "workload": spec.workload,
        "address": None if kinds else spec.address,
        "servers": kinds or None,
        "durable": durable,
        "tube": spec.tube,
        "connections": spec.connections if spec.workload != "cycle" else None,
        "rate": spec.rate if spec.workload == "openloop" else None,
        "producers": spec.producers if spec.workload == "cycle" else None,
        "consumers": spec.consumers if spec.workload == "cycle" else None,
        "window": spec.window,
        "backlog": spec.backlog_cap if spec.workload == "cycle" else None,
        "body_size": spec.body_size,
        "duration": spec.duration,
        "jobs": spec.jobs,
        "warmup": spec.warmup,
        "processes": spec.processes,
        "repeat": repeat,
        "memory_jobs": memory_jobs,
        "fdatasync_ms": round(sync_ms, 4) if sync_ms is not None else None,
    }
    try:
        with open(path, "w", encoding="utf-8") as f:
            f.write(to_json(settings, runs, memory))
    except OSError as exc:
        raise click.ClickException(f"cannot write {path}: {exc.strerror or exc}") from None


def _bench_gearman(workload: str, nodes: int, connections: int, producers: int, consumers: int,
                   body_size: int, duration: float, warmup: float, backlog: int | None, timeout: float,
                   repeat: int, json_path: str | None, others: list[str]) -> None:
    from haqueue.bench.gearman import bench_gearman, format_gearman

    if others:
        raise click.ClickException(f"--gearman starts its own servers: it excludes {' and '.join(others)}")
    try:
        progress, started = Progress(), time.monotonic()
        with _sigterm_as_interrupt(), progress.ticking(lambda: f"bench gearman: {elapsed(started)} elapsed"):
            results = bench_gearman(workload, nodes, connections if workload == "submit" else producers,
                                    consumers, body_size, duration, warmup, backlog or 256, timeout, repeat)
        click.echo(format_gearman(results))
        if json_path is not None:
            _write_doc_json(json_path, {"settings": {"gearman": workload, "nodes": nodes, "duration": duration},
                                        "gearman": [r.to_json() for r in results]})
    except BenchError as exc:
        raise click.ClickException(str(exc)) from None


def _bench_peers(systems_text: str, server_cpus: str | None, duration: float, warmup: float, timeout: float,
                 json_path: str | None, others: list[str]) -> None:
    from haqueue.bench import peers
    from haqueue.bench.servers import pin_servers

    if others:
        raise click.ClickException(f"--peers starts its own servers: it excludes {' and '.join(others)}")
    systems = [s.strip() for s in systems_text.split(",") if s.strip()]
    unknown = [s for s in systems if s not in peers.SYSTEMS]
    if unknown or not systems:
        raise click.ClickException(f"--peer-systems {systems_text!r}: expected some of {', '.join(peers.SYSTEMS)}")
    if json_path is not None:
        folder = os.path.dirname(os.path.abspath(json_path))
        if not os.path.isdir(folder) or not os.access(folder, os.W_OK):
            raise click.ClickException(f"cannot write {json_path}: {folder} is not a writable directory")
    try:
        if server_cpus is not None:
            try:
                cpus = {int(part) for part in server_cpus.split(",") if part.strip()}
            except ValueError:
                raise BenchError(f"--server-cpus {server_cpus!r}: expected CPU numbers, e.g. 0 or 0,1") from None
        else:
            cpus = peers.default_server_cpus()
        if cpus is not None:
            pin_servers(cpus or {-1})
        progress, started = Progress(), time.monotonic()
        step = ["starting"]
        with _sigterm_as_interrupt(), progress.ticking(lambda: f"bench peers: {step[0]}, {elapsed(started)} elapsed"):
            sitting = peers.bench_peers(systems, duration, warmup, timeout, on_step=lambda m: step.__setitem__(0, m))
        where = (f"servers on CPU {','.join(map(str, sorted(cpus)))}, the load (one process) on the others"
                 if cpus else "unpinned")
        click.echo(peers.format_sitting(sitting, systems, f"peers, one sitting: {where}; 100 B bodies; each "
                                        f"workload measured {duration:g} s after {warmup:g} s warmup"))
        # -f0 and RabbitMQ wait for a sync per acknowledgement: the disk's sync time frames them.
        line, sync_ms = disk.describe()
        click.echo(line)
        if json_path is not None:
            _write_doc_json(json_path, peers.sitting_json(sitting, systems, {
                "duration": duration, "warmup": warmup, "server_cpus": sorted(cpus) if cpus else None,
                "fdatasync_ms": round(sync_ms, 4)}))
        if sitting.errors:
            total = len(systems) * len(peers.WORKLOADS)
            raise BenchError(f"bench peers: {total - len(sitting.runs)} of {total} runs failed (listed above)")
    except BenchError as exc:
        raise click.ClickException(str(exc)) from None


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM ends bench as Ctrl-C does, so the servers it started are stopped by PID."""

    def interrupt(signum: int, frame: object) -> None:
        # Exactly as Ctrl-C: inside asyncio.run, Python 3.11's runner has its own
        # SIGINT handler, which cancels the load's main task and raises
        # KeyboardInterrupt once it has unwound. Raising it here instead landed
        # anywhere inside the event loop's machinery, and the loop's shutdown then
        # sometimes hung (tests/bench/test_servers.py saw bench outlive 10 s).
        on_ctrl_c = signal.getsignal(signal.SIGINT)
        if callable(on_ctrl_c):  # Python's default raises KeyboardInterrupt; asyncio's cancels
            on_ctrl_c(signal.SIGINT, frame)
            return
        raise KeyboardInterrupt  # Ctrl-C ignored here (SIG_IGN): SIGTERM still stops bench

    try:
        previous = signal.signal(signal.SIGTERM, interrupt)
    except ValueError:  # not the main thread: leave signals alone
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _headline(spec: LoadSpec, durable: bool | None, repeat: int) -> str:
    if spec.workload == "put":
        load = f"put: {spec.connections} connections x window {spec.window}"
    elif spec.workload == "openloop":
        load = f"open loop: {spec.rate:,.0f} puts/s over {spec.connections} connections"
    else:
        load = (
            f"cycle: {spec.producers} producers (window {spec.window}, backlog "
            f"{spec.backlog_cap or 'unbounded'}) + {spec.consumers} consumers"
        )
    stop = []
    if spec.duration is not None:
        stop.append(f"{spec.duration:g} s")
    if spec.jobs is not None:
        stop.append(f"{spec.jobs:,} put{'s' if spec.jobs != 1 else ''}")
    parts = [
        load,
        f"{spec.body_size} B bodies",
        f"measured {' or '.join(stop)} after {spec.warmup:g} s warmup",
        f"{spec.processes} load process{'es' if spec.processes > 1 else ''}",
    ]
    if repeat > 1:
        parts.append(f"{repeat} runs per server, pooled")
    if durable is not None:
        parts.append("durable (-b DIR -f0)" if durable else "in memory")
    return ", ".join(parts)
