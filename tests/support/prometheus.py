"""A real Prometheus (Debian's package) for tests: started on loopback, queried, stopped by PID.

`running_prometheus(workdir, jobs)` writes a scrape config for `jobs`
({job name: [(target "host:port", {label: value})]}) into `workdir`, starts
`prometheus` with its storage there and its web API on a free loopback port,
waits until /-/ready answers, and stops it (by PID) however the block ends.
`Prometheus.query(promql)` runs an instant query through the HTTP API.
Tests call `require_prometheus()` first: it skips, naming the package, only
when the binary is truly absent (scripts/setup installs it).
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Iterator

from tests.support.servers import HOST, free_port
from tests.support.tools import require, stop

READY_TIMEOUT = 30.0


def require_prometheus() -> str:
    return require("prometheus")


def scrape_config(jobs: dict[str, list[tuple[str, dict]]], interval: str = "250ms",
                  token: str | None = None) -> str:
    """prometheus.yml as JSON (YAML's subset): one static_config per target, with its labels;
    with `token`, every job sends it as a bearer token (as gen-prometheus renders it)."""
    config = {
        "global": {"scrape_interval": interval, "scrape_timeout": interval, "evaluation_interval": interval},
        "scrape_configs": [
            {"job_name": job, "static_configs": [{"targets": [target], "labels": labels}
                                                for target, labels in targets],
             **({"authorization": {"type": "Bearer", "credentials": token}} if token else {})}
            for job, targets in jobs.items()
        ],
    }
    return json.dumps(config, indent=2)


class Prometheus:
    def __init__(self, port: int, proc: subprocess.Popen, log_path: Path) -> None:
        self.port = port
        self.proc = proc
        self.pid = proc.pid
        self.log_path = log_path

    def get(self, path: str, timeout: float = 5.0) -> tuple[int, bytes]:
        try:
            with urllib.request.urlopen(f"http://{HOST}:{self.port}{path}", timeout=timeout) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()

    def query(self, promql: str) -> list[dict]:
        """The instant vector's samples: [{"metric": {labels}, "value": [time, "value"]}]."""
        code, body = self.get("/api/v1/query?" + urllib.parse.urlencode({"query": promql}))
        answer = json.loads(body)
        assert code == 200 and answer["status"] == "success", (code, body[:500])
        return answer["data"]["result"]

    def wait_for(self, promql: str, condition, timeout: float = 30.0, what: str = "") -> list[dict]:
        """Poll `promql` until condition(result) holds; fail with the last result after `timeout`."""
        deadline = time.monotonic() + timeout
        result: list[dict] = []
        while time.monotonic() < deadline:
            result = self.query(promql)
            if condition(result):
                return result
            time.sleep(0.1)  # polling a condition, bounded by the deadline
        raise AssertionError(f"{what or promql}: not met within {timeout:g} s; last result {result}\n"
                             f"prometheus log tail:\n{self.log_tail()}")

    def log_tail(self, limit: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-limit:]
        except OSError:
            return ""


@contextlib.contextmanager
def running_prometheus(workdir: Path, jobs: dict[str, list[tuple[str, dict]]],
                       token: str | None = None) -> Iterator[Prometheus]:
    executable = require_prometheus()
    workdir.mkdir(parents=True, exist_ok=True)
    config = workdir / "prometheus.yml"
    config.write_text(scrape_config(jobs, token=token))
    log_path = workdir / "prometheus.log"
    port = free_port()
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [executable, f"--config.file={config}", f"--storage.tsdb.path={workdir / 'data'}",
             f"--web.listen-address={HOST}:{port}", "--log.level=warn"],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
        )
    prometheus = Prometheus(port, proc, log_path)
    try:
        deadline = time.monotonic() + READY_TIMEOUT
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"prometheus exited with {proc.returncode}:\n{prometheus.log_tail()}")
            try:
                if prometheus.get("/-/ready", timeout=1)[0] == 200:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"prometheus not ready after {READY_TIMEOUT:g} s:\n{prometheus.log_tail()}")
            time.sleep(0.1)  # polling readiness, bounded by the deadline
        yield prometheus
    finally:
        stop(proc)
