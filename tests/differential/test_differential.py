"""Differential tests: every script in scripts/ is sent to real beanstalkd 1.12 and to
haqueue in the same run, and the normalised reply streams must be identical.

Two beanstalkd instances are also compared with each other, so each script is proven
deterministic and the normalisation sound before haqueue is judged by it. The haqueue
comparison skips (with the server's stderr) when `python -m haqueue serve` cannot start;
set HAQUEUE_REQUIRE_SERVER=1 to make that a failure instead.

Coverage: every command of protocol.txt, and every reply a client can provoke.

  command               scripts (beyond the happy path: its error replies); not_found has
                        NOT_FOUND from every command that names a job or a tube
  put                   put_peek, pipelining, job_size (JOB_TOO_BIG), expected_crlf
                        (EXPECTED_CRLF), number_errors (BAD_FORMAT), delay, drain (DRAINING),
                        half_close (a put cut off by the end of input)
  use / watch / ignore  tubes (NOT_IGNORED for the last watched tube), tube_name_errors
  reserve               reserve_release_bury_delete, blocking_reserve, multi_conn, ttr
                        (DEADLINE_SOON), half_close (TIMED_OUT when half-closed)
  reserve-with-timeout  reserve_timeouts (TIMED_OUT; the strtol-read timeout), blocking_reserve
  reserve-job           reserve_job (NOT_FOUND for reserved/unknown ids)
  delete / release /    reserve_release_bury_delete, multi_conn (NOT_FOUND for another
  bury / touch          connection's job), number_errors
  peek, peek-ready,     put_peek, delay, reserve_release_bury_delete (NOT_FOUND when empty)
  peek-delayed, -buried
  kick / kick-job       kick, delay (delayed jobs), number_errors (NOT_FOUND)
  stats / stats-job /   nearly every script; drain (draining: true)
  stats-tube
  list-tubes,           tubes, multi_conn, pipelining
  list-tube-used,
  list-tubes-watched
  pause-tube            pause (pause 0; NOT_FOUND), number_errors, line_length
  quit                  quit (also "quitx")
  any                   command_errors (UNKNOWN_COMMAND, BAD_FORMAT, NUL bytes),
                        line_length (the 224-byte line buffer)

Not covered, because no client can provoke them on demand: OUT_OF_MEMORY, INTERNAL_ERROR
and put's "BURIED <id>" (beanstalkd out of memory). Differences that remain on purpose are
listed in docs/compatibility.md.

Each script runs on fresh servers, all sides at once (two beanstalkd and, when available,
haqueue), so its timed waits are paid once; the haqueue transcript waits in _PENDING for
its own test. Run one script with e.g. `-k ttr`.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable

import pytest

from tests.differential.harness import Script, diff, load_script, run_script
from tests.support.servers import ServerProcess, ServerStartError, start_beanstalkd, start_haqueue

SCRIPTS = sorted((Path(__file__).parent / "scripts").glob("*.txt"))
Starter = Callable[..., ServerProcess]
# haqueue transcripts computed alongside the beanstalkd self-check, awaiting their test:
# script name -> (beanstalkd transcript, haqueue transcript)
_PENDING: dict[str, tuple[list[str], list[str]]] = {}


def run_side(start: Starter, script: Script) -> list[str]:
    server = start(*script.server_args)
    try:
        return run_script(server, script)
    finally:
        server.stop()


def run_sides(script: Script, *starters: Starter) -> list[list[str]]:
    """Run the script against a fresh server per starter, all at once (the waits overlap)."""
    with ThreadPoolExecutor(len(starters)) as pool:
        futures = [pool.submit(run_side, start, script) for start in starters]
        return [future.result() for future in futures]


@pytest.fixture(scope="module")
def haqueue_starter() -> tuple[Starter | None, str]:
    """(start_haqueue, "") when `haqueue serve` starts and listens, else (None, why not)."""
    try:
        start_haqueue().stop()
    except ServerStartError as exc:
        if os.environ.get("HAQUEUE_REQUIRE_SERVER"):
            raise
        return None, f"haqueue serve not available: {exc}"
    return start_haqueue, ""


@pytest.mark.parametrize("path", SCRIPTS, ids=[p.stem for p in SCRIPTS])
def test_script_is_deterministic_on_beanstalkd(path, haqueue_starter):
    script = load_script(path)
    start_hq, _ = haqueue_starter
    starters = [start_beanstalkd, start_beanstalkd] + ([start_hq] if start_hq else [])
    first, second, *candidate = run_sides(script, *starters)
    if candidate:
        _PENDING[path.name] = (first, candidate[0])
    problems = [line for line in first if line.startswith("!!")]
    assert not problems, f"{path.name} does not run cleanly on beanstalkd:\n" + "\n".join(first)
    if first != second:
        pytest.fail(f"{path.name} gives different normalised replies on two beanstalkd runs:\n"
                    + diff(first, second, "beanstalkd (1st)", "beanstalkd (2nd)"), pytrace=False)


@pytest.mark.parametrize("path", SCRIPTS, ids=[p.stem for p in SCRIPTS])
def test_haqueue_replies_like_beanstalkd(path, haqueue_starter):
    start_hq, why_not = haqueue_starter
    if start_hq is None:
        pytest.skip(why_not)
    if path.name in _PENDING:
        reference, candidate = _PENDING.pop(path.name)
    else:
        reference, candidate = run_sides(load_script(path), start_beanstalkd, start_hq)
    if reference != candidate:
        pytest.fail(f"{path.name}: haqueue's replies differ from beanstalkd 1.12's "
                    f"(- beanstalkd, + haqueue):\n"
                    + diff(reference, candidate, "beanstalkd 1.12", "haqueue"), pytrace=False)
