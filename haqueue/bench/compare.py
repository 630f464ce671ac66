"""Run one workload against servers bench starts itself, one after the other, or
against the leader of a running cluster.

Rules: servers run one at a time (start, measure, stop), so on a small machine an
idle server never takes CPU from the one being measured. Both runs use the same
LoadSpec apart from the address, so their figures can be divided. With `repeat`,
the servers take turns (A B A B ...), each run on a fresh server, and each
server's runs are pooled: a slow minute on a shared machine then hurts both
sides alike instead of the one that happened to run in it.
"""

from __future__ import annotations

import time
from dataclasses import replace

from haqueue.bench.cluster import find_leader
from haqueue.bench.load import LoadSpec
from haqueue.bench.report import RunResult, pool
from haqueue.bench.runner import run
from haqueue.bench.servers import started


def bench_servers(
    spec: LoadSpec, kinds: list[str], durable: bool, repeat: int = 1
) -> list[RunResult]:
    """`repeat` rounds of: for each kind, start a fresh server, run `spec`, stop it."""
    results: dict[int, list[RunResult]] = {i: [] for i in range(len(kinds))}
    for _ in range(repeat):
        for i, kind in enumerate(kinds):
            with started(kind, durable) as server:
                result = run(replace(spec, host=server.host, port=server.port))
                result.server = kind
                results[i].append(result)
    return [pool(results[i]) for i in range(len(kinds))]


def bench_address(spec: LoadSpec, repeat: int = 1) -> RunResult:
    """`repeat` runs against the one address in `spec`, pooled."""
    return pool([run(spec) for _ in range(repeat)])


def bench_cluster(spec: LoadSpec, config_path: str, repeat: int = 1) -> RunResult:
    """`repeat` runs against whichever node leads the cluster at the start of each run."""
    results = []
    for _ in range(repeat):
        leader, size = find_leader(config_path, spec.timeout)
        result = run(replace(spec, host=leader.address, port=leader.client_port))
        result.server = f"haqueue {size}-node"
        results.append(result)
    return pool(results)


def bench_cluster_against_beanstalkd(spec: LoadSpec, config_path: str, repeat: int = 1) -> list[RunResult]:
    """beanstalkd in memory, beanstalkd -b DIR -f0, then the cluster: one run, three rows.

    The cycle workload needs an empty tube on the cluster, which keeps its jobs
    between runs, so each cluster run uses a tube of its own.
    """
    memory = bench_servers(spec, ["beanstalkd"], False, repeat)[0]
    durable = bench_servers(spec, ["beanstalkd"], True, repeat)[0]
    durable.server = "beanstalkd -f0"
    results = []
    for i in range(repeat):
        tube = f"{spec.tube}-{time.time_ns():x}-{i}"
        results.append(bench_cluster(replace(spec, tube=tube), config_path, 1))
    cluster = pool(results)
    cluster.server = results[0].server
    return [memory, durable, cluster]
