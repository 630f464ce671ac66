"""Run a LoadSpec in this process or split over `processes` worker processes.

Rules: every worker connects (and checks its setup replies) before any starts
sending, then all start from one `t_start` chosen by the parent, so their
measured windows coincide and their figures can be added up (load.merge). The
first worker to fail fails the run with its one-line message; the parent stops
the other workers (its own children, by PID) on failure and on Ctrl-C. Workers
are started with `spawn`, so they inherit no threads or event loop.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import multiprocessing.connection
from typing import Any

from haqueue.bench.load import BenchError, LoadSpec, ShareResult, merge, monotonic_ns, run_share
from haqueue.bench.report import RunResult

# Spawning a worker imports Python afresh; a slow machine may need a few seconds.
WORKER_START_TIMEOUT = 30.0


def run(spec: LoadSpec) -> RunResult:
    """Run `spec` to the end and return the merged figures, or raise BenchError."""
    spec.validate()
    if spec.processes == 1:
        return merge(spec, [asyncio.run(run_share(spec))])
    return merge(spec, _run_workers(spec.shares()))


def _worker(spec: LoadSpec, pipe: multiprocessing.connection.Connection) -> None:
    async def ready() -> int:
        pipe.send(("ready", None))
        message, t_start = await asyncio.get_running_loop().run_in_executor(None, pipe.recv)
        if message != "go":
            raise BenchError(f"load process told {message!r} instead of go")
        return t_start

    try:
        pipe.send(("result", asyncio.run(run_share(spec, ready))))
    except KeyboardInterrupt:
        pass
    except BenchError as exc:
        pipe.send(("error", str(exc)))
    except Exception as exc:  # noqa: BLE001 - reported to the parent as one line
        pipe.send(("error", f"load process failed: {type(exc).__name__}: {exc}"))


def _run_workers(shares: list[LoadSpec]) -> list[ShareResult]:
    ctx = multiprocessing.get_context("spawn")
    workers: list[tuple[Any, multiprocessing.connection.Connection]] = []
    try:
        for share in shares:
            parent_end, child_end = ctx.Pipe()
            proc = ctx.Process(target=_worker, args=(share, child_end), daemon=True)
            proc.start()
            child_end.close()
            workers.append((proc, parent_end))
        _collect(workers, "ready", WORKER_START_TIMEOUT + shares[0].timeout)
        t_start = monotonic_ns()
        for _, pipe in workers:
            pipe.send(("go", t_start))
        return _collect(workers, "result", None)
    finally:
        for proc, pipe in workers:
            if proc.is_alive():
                proc.terminate()
            proc.join(5)
            if proc.is_alive():
                proc.kill()
                proc.join()
            pipe.close()


def _collect(workers: list, kind: str, timeout: float | None) -> list[Any]:
    """Wait for one `kind` message from every worker; the first error wins."""
    got: dict[int, Any] = {}
    deadline = None if timeout is None else monotonic_ns() + int(timeout * 1e9)
    while len(got) < len(workers):
        waiting = [i for i in range(len(workers)) if i not in got]
        handles = [workers[i][1] for i in waiting] + [workers[i][0].sentinel for i in waiting]
        left = None if deadline is None else max(0.0, (deadline - monotonic_ns()) / 1e9)
        if not multiprocessing.connection.wait(handles, left):
            raise BenchError(f"load processes not {kind} after {timeout:g} s")
        for i in waiting:
            proc, pipe = workers[i]
            if pipe.poll():
                try:
                    message, value = pipe.recv()
                except EOFError:
                    message, value = "error", None
                if message == "error":
                    raise BenchError(value or f"load process {proc.pid} exited")
                got[i] = value
            elif not proc.is_alive():
                raise BenchError(f"load process {proc.pid} exited with status {proc.exitcode}")
    return [got[i] for i in range(len(workers))]
