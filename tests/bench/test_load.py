"""The load generator against a real beanstalkd, and against servers that misbehave."""

from __future__ import annotations

import asyncio
import gc
import socket
import threading
import time
import warnings

import pytest

from haqueue.bench.load import BenchError, LoadSpec, run_share
from haqueue.bench.runner import run
from tests.bench.conftest import CLOSE, honest_use, scripted_server, server_stats


def spec(server_or_port, **kw) -> LoadSpec:
    port = server_or_port if isinstance(server_or_port, int) else server_or_port.port
    base = dict(duration=None, jobs=2000, warmup=0.0, timeout=5.0)
    base.update(kw)
    return LoadSpec("127.0.0.1", port, **base)


def assert_ordered(summary):
    assert summary["p50"] <= summary["p90"] <= summary["p99"] <= summary["max"]


def test_put_run_makes_exactly_the_jobs_it_counts(bs):
    before = server_stats(bs)
    result = run(spec(bs, tube="put-exact"))
    after = server_stats(bs)
    assert result.measured_puts == 2000
    assert result.totals["put"] == 2000
    assert after["cmd-put"] - before["cmd-put"] == 2000
    assert server_stats(bs, "put-exact")["current-jobs-ready"] == 2000
    summary = result.put_latency.summary()
    assert summary["count"] == 2000
    assert_ordered(summary)
    assert result.puts_per_s > 0


def test_cycle_run_deletes_every_job_it_put(bs):
    before = server_stats(bs)
    result = run(spec(bs, workload="cycle", tube="cycle-exact"))
    after = server_stats(bs)
    assert result.measured_cycles == result.measured_puts == 2000
    assert after["cmd-put"] - before["cmd-put"] == 2000
    assert after["cmd-delete"] - before["cmd-delete"] == 2000
    assert result.totals["delete"] == result.totals["reserve"] == 2000
    # Each consumer still waits in one reserve when the run ends.
    assert after["cmd-reserve"] - before["cmd-reserve"] == result.totals["reserve_sent"] == 2004
    assert server_stats(bs, "cycle-exact").get("current-jobs-ready", 0) == 0
    assert_ordered(result.put_latency.summary())
    e2e = result.e2e_latency.summary()
    assert e2e["count"] == 2000
    assert_ordered(e2e)


def test_warmup_puts_reach_the_server_but_are_not_measured(bs):
    before = server_stats(bs)
    result = run(spec(bs, tube="warm", jobs=500, warmup=0.2))
    sent = server_stats(bs)["cmd-put"] - before["cmd-put"]
    assert result.measured_puts == 500
    assert result.put_latency.summary()["count"] == 500
    assert sent == result.totals["put"] > 500


def test_duration_run_stops_issuing_when_time_is_up(bs):
    started = time.monotonic()
    result = run(spec(bs, tube="timed", jobs=None, duration=0.5, connections=2))
    assert 0.5 <= time.monotonic() - started < 3
    assert 0.5 <= result.put_seconds < 1.0
    assert result.measured_puts > 0


def test_backlog_bounds_jobs_put_but_not_deleted(bs):
    # The server's own count of queued jobs, sampled while the run goes on.
    seen = []
    stop = threading.Event()

    def sample():
        while not stop.is_set():
            stats = server_stats(bs, "tight")
            seen.append(stats.get("current-jobs-ready", 0) + stats.get("current-jobs-reserved", 0))

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        result = run(spec(bs, workload="cycle", tube="tight", jobs=3000, backlog=3,
                          producers=2, consumers=1))
    finally:
        stop.set()
        sampler.join()
    assert result.measured_cycles == 3000
    assert len(seen) > 10
    assert max(seen) <= 3


def test_two_processes_add_up_to_one_run(bs):
    before = server_stats(bs)
    result = run(spec(bs, tube="split", processes=2, connections=3))
    assert result.measured_puts == 2000
    assert server_stats(bs)["cmd-put"] - before["cmd-put"] == 2000
    assert result.put_latency.summary()["count"] == 2000


def test_two_process_cycle_drains_one_tube_per_process(bs):
    before = server_stats(bs)
    result = run(spec(bs, workload="cycle", tube="pcycle", processes=2, jobs=1001))
    assert result.measured_cycles == 1001
    assert result.totals["delete"] == 1001
    assert server_stats(bs)["cmd-delete"] - before["cmd-delete"] == 1001
    assert all(server_stats(bs, t) == {} for t in ("pcycle", "pcycle-0", "pcycle-1"))


def test_cycle_refuses_a_tube_that_already_holds_jobs(bs):
    run(spec(bs, tube="busy", jobs=7))
    with pytest.raises(BenchError, match="tube 'busy' already holds 7 jobs"):
        run(spec(bs, workload="cycle", tube="busy"))


def test_unreachable_address_fails_naming_the_reason():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, never listening: refused
        with pytest.raises(BenchError, match=rf"^127\.0\.0\.1:{port}: cannot connect: Connection refused$"):
            run(spec(port))


def test_reply_other_than_inserted_mid_run_fails_naming_it():
    def respond(line, puts):
        if line.startswith(b"put"):
            return b"INSERTED %d\r\n" % puts if puts <= 100 else b"OUT_OF_MEMORY\r\n"
        return honest_use(line)

    with scripted_server(respond) as port:
        with pytest.raises(BenchError, match=r"unexpected reply to put: 'OUT_OF_MEMORY'$"):
            run(spec(port, connections=1))


def test_wrong_reply_to_setup_fails_naming_the_command():
    with scripted_server(lambda line, puts: b"USING elsewhere\r\n") as port:
        with pytest.raises(BenchError, match=r"unexpected reply to use bench: 'USING elsewhere'"):
            run(spec(port, tube="bench"))


def test_server_closing_the_connection_fails_the_run():
    def respond(line, puts):
        return CLOSE if puts >= 5 else (b"INSERTED 1\r\n" if puts else honest_use(line))

    with scripted_server(respond) as port:
        with pytest.raises(BenchError, match="the server closed the connection"):
            run(spec(port, connections=1, window=1))


def test_silent_server_fails_after_the_timeout():
    respond = lambda line, puts: honest_use(line)  # noqa: E731 - never answers a put
    with scripted_server(respond) as port:
        started = time.monotonic()
        with pytest.raises(BenchError, match=r"no reply from the server for 0\.3 s"):
            run(spec(port, timeout=0.3))
        assert time.monotonic() - started < 2


def test_consumer_rejects_a_body_of_the_wrong_length():
    def respond(line, puts):
        if line.startswith(b"put"):
            return b"INSERTED %d\r\n" % puts
        if line == b"reserve":
            return b"RESERVED 1 3\r\nabc\r\n"
        if line.startswith(b"watch"):
            return b"WATCHING 2\r\n"
        if line.startswith(b"ignore"):
            return b"WATCHING 1\r\n"
        if line.startswith(b"stats-tube"):
            return b"NOT_FOUND\r\n"
        return honest_use(line)

    with scripted_server(respond) as port:
        with pytest.raises(BenchError, match=r"a 3-byte body, expected 100"):
            run(spec(port, workload="cycle", producers=1, consumers=1))


def test_ready_callback_sets_the_start_of_the_run(bs):
    # The multi-process runner relies on this: nothing is sent before ready() returns.
    before = server_stats(bs)["cmd-put"]
    seen = {}

    async def ready():
        seen["puts before start"] = server_stats(bs)["cmd-put"] - before
        return time.monotonic_ns()

    asyncio.run(run_share(spec(bs, tube="gate", jobs=10), ready))
    assert seen == {"puts before start": 0}


def test_a_run_cancelled_while_its_connections_start_leaves_no_coroutine_unawaited():
    # Ctrl-C cancels the load's main task. Cancelled before the tasks that open
    # the connections took their first step, a run must not leave behind a
    # coroutine that was made and never awaited: Python prints a RuntimeWarning
    # for it at exit, after bench's "haqueue: interrupted" (CI saw it once).
    async def cancel_as_connections_start():
        task = asyncio.create_task(run_share(spec(1, workload="cycle", producers=3, consumers=3)))
        await asyncio.sleep(0)  # the run's first step: the connection tasks exist, none started
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        asyncio.run(cancel_as_connections_start())
        gc.collect()
    assert [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)] == []
