"""Run one workload against servers bench starts itself, one after the other.

Rules: servers run one at a time (start, measure, stop), so on a small machine an
idle server never takes CPU from the one being measured. Both runs use the same
LoadSpec apart from the address, so their figures can be divided.
"""

from __future__ import annotations

from dataclasses import replace

from haqueue.bench.load import LoadSpec
from haqueue.bench.report import RunResult
from haqueue.bench.runner import run
from haqueue.bench.servers import started


def bench_servers(spec: LoadSpec, kinds: list[str], durable: bool) -> list[RunResult]:
    """For each kind in order: start a fresh server, run `spec` against it, stop it."""
    results = []
    for kind in kinds:
        with started(kind, durable) as server:
            result = run(replace(spec, host=server.host, port=server.port))
            result.server = kind
            results.append(result)
    return results
