"""The memory benchmark: resident memory a server spends per queued job.

Method: start a fresh server, read its RSS by PID (psutil), put N jobs with the
`put` workload and no warmup, confirm with `stats-tube` that the N jobs are
queued, read the RSS again: bytes/job = (RSS after - RSS before) / N. RSS counts
what the process touched, so allocator slack and (for haqueue) Raft log entries
kept in memory are included — that is the cost an operator pays.
"""

from __future__ import annotations

import re
import socket
from dataclasses import replace

import psutil

from haqueue.bench.load import BenchError, LoadSpec
from haqueue.bench.report import MemoryResult
from haqueue.bench.runner import run
from haqueue.bench.servers import started


def rss(pid: int) -> int:
    try:
        return psutil.Process(pid).memory_info().rss
    except psutil.Error as exc:
        raise BenchError(f"cannot read the memory of process {pid}: {exc}") from None


def tube_stats(host: str, port: int, tube: str, timeout: float = 10.0) -> dict[str, str]:
    """`stats-tube TUBE` over a fresh connection, as a dict of its YAML lines."""
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.sendall(b"stats-tube " + tube.encode() + b"\r\n")
        data = b""
        while True:
            m = re.match(rb"OK (\d+)\r\n", data)
            if m and len(data) >= m.end() + int(m.group(1)) + 2:
                body = data[m.end() : m.end() + int(m.group(1))]
                break
            if data and not m and b"\r\n" in data:
                first = data.split(b"\r\n")[0].decode("ascii", "replace")
                raise BenchError(f"stats-tube {tube}: unexpected reply {first!r}")
            chunk = sock.recv(65536)
            if not chunk:
                raise BenchError(f"stats-tube {tube}: the server closed the connection")
            data += chunk
    pairs = (line.partition(":") for line in body.decode("ascii", "replace").splitlines())
    return {k.strip(): v.strip() for k, sep, v in pairs if sep}


def measure_memory(
    spec: LoadSpec, kinds: list[str], durable: bool, jobs: int
) -> list[MemoryResult]:
    """For each kind in order: start it, fill it with `jobs` jobs, report RSS growth."""
    load = replace(spec, workload="put", jobs=jobs, duration=None, warmup=0.0)
    results = []
    for kind in kinds:
        with started(kind, durable) as server:
            # Listening is not ready: a lone haqueue node listens before it has loaded
            # its code (haqueue/cli/early.py). A first answer is.
            tube_stats(server.host, server.port, "default")
            before = rss(server.pid)
            run(replace(load, host=server.host, port=server.port))
            queued = int(tube_stats(server.host, server.port, load.tube).get("current-jobs-ready", -1))
            if queued != jobs:
                raise BenchError(f"{kind} holds {queued} ready jobs after {jobs} puts")
            after = rss(server.pid)
            results.append(
                MemoryResult(
                    server=kind,
                    address=server.address,
                    jobs=jobs,
                    body_size=load.body_size,
                    rss_before=before,
                    rss_after=after,
                )
            )
    return results
