"""The lab's Gearman workload (haqueue/lab/gearmanworkload.py) against real gearmand on loopback:
its history, judged by the queue's checker, is clean, and every submitted job was worked."""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from haqueue.lab import checker
from haqueue.lab.lab import wait_for
from tests.support.servers import free_port

GEARMAND = shutil.which("gearmand") or "/usr/sbin/gearmand"


@contextlib.contextmanager
def running_gearmand(tmp_path: Path):
    if not Path(GEARMAND).exists():
        pytest.skip("gearmand is not installed (scripts/setup installs gearman-job-server)")
    port = free_port()
    proc = subprocess.Popen([GEARMAND, "--listen=127.0.0.1", f"--port={port}", "--threads=0",
                             f"--log-file={tmp_path / 'gearmand.log'}", "--queue-type=builtin"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        def listening() -> bool:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return True
            return False

        assert wait_for(listening, timeout=10), "gearmand did not listen"
        yield port
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def workload(mode: str, port: int, history: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "haqueue.lab.gearmanworkload", mode, "--host", "127.0.0.1",
            "--port", str(port), "--history", str(history), *extra]


def test_the_gearman_workload_records_a_history_the_queue_checker_passes(tmp_path):
    history, drained = tmp_path / "history.jsonl", tmp_path / "drain.jsonl"
    with running_gearmand(tmp_path) as port:
        run = subprocess.Popen(workload("run", port, history, "--submit-rate", "200", "--work-rate", "100"))
        try:
            def counted(kind: str) -> int:
                return history.read_text().count(kind) if history.exists() else 0

            # Submits outpace the workers, so the drain has work left to do.
            assert wait_for(lambda: counted('"type":"ok","f":"delete"') >= 30, timeout=30)
        finally:
            run.terminate()
            assert run.wait(timeout=15) == 0
        done = subprocess.run(workload("drain", port, drained), capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
    events = [json.loads(line) for path in (history, drained) for line in path.read_text().splitlines()]
    result = checker.check(events)
    counts = result["counts"]
    assert result["ok"], result["examples"]
    assert counts["puts_ok"] >= 30 and counts["lost"] == 0 and counts["remaining"] == 0
    assert counts["drained"] > 0
    assert counts["deliveries"] == counts["puts_ok"] + counts["puts_unknown_landed"]
