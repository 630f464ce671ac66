"""Coverage-guided fuzzing (atheris/libFuzzer) for a bounded time, and the corpus and every
regression replayed in plain pytest.

The corpus lives in tests/fuzz/corpus/TARGET and is read, never written, by CI: libFuzzer
writes what it finds to a temporary directory first in its argument list. A crash leaves
its input in the test's tmp_path (named in the failure); copy it into
tests/fuzz/regressions/TARGET/ so it is replayed here from then on, and fix the bug.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fuzz.harness import check_codec, check_gearman_codec, check_gearman_session, check_session

HERE = Path(__file__).parent
CHECKS = {"codec": check_codec, "gearman": check_gearman_codec, "gearman_session": check_gearman_session,
          "session": check_session}
FUZZ_SECONDS = int(os.environ.get("HAQUEUE_FUZZ_SECONDS", "15"))


def inputs(target: str) -> list[Path]:
    found = []
    for kind in ("corpus", "regressions"):
        where = HERE / kind / target
        if where.is_dir():
            found += sorted(p for p in where.iterdir() if p.is_file())
    return found


@pytest.mark.parametrize("target", sorted(CHECKS))
def test_corpus_and_regressions_replay(target):
    paths = inputs(target)
    assert paths, f"no corpus for {target}"
    for path in paths:
        CHECKS[target](path.read_bytes())


@pytest.mark.slow
@pytest.mark.parametrize("target", sorted(CHECKS))
def test_fuzz_for_a_bounded_time(target, tmp_path):
    pytest.importorskip("atheris", reason="atheris is a test dependency (pyproject [test])")
    found = tmp_path / "new"
    found.mkdir()
    result = subprocess.run(
        [sys.executable, str(HERE / "fuzz.py"), target, str(found), str(HERE / "corpus" / target),
         f"-max_total_time={FUZZ_SECONDS}", "-timeout=10", "-rss_limit_mb=1024", "-max_len=4096",
         f"-artifact_prefix={tmp_path}/", "-print_final_stats=1"],
        capture_output=True, text=True, timeout=FUZZ_SECONDS + 120, cwd=tmp_path)
    crashes = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(("crash-", "timeout-", "oom-")))
    assert result.returncode == 0 and not crashes, (
        f"fuzz.py {target} found {crashes} in {tmp_path}:\n{result.stderr[-4000:]}")
    runs = [line for line in result.stderr.splitlines() if "stat::number_of_executed_units" in line]
    assert runs and int(runs[0].split(":")[-1]) > 100, result.stderr[-2000:]
