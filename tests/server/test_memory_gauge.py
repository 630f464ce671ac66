"""The resident-memory gauge behind max_memory (haqueue/server/limits.py MemoryGauge).

It reads this process's real resident set (/proc/self/statm); the clock is given,
so when it reads again is the test's to say. No timer runs: a put asks.
The whole node, filling up with big puts, is tests/server/test_hostile_clients.py.
"""

from __future__ import annotations

from haqueue.server import limits
from haqueue.server.limits import MemoryGauge, resident_bytes

MiB = 1 << 20


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now

    def wait(self, seconds: float) -> None:
        self.now += seconds + 1e-9  # (0.1 is not exact in binary)


def test_over_the_limit_a_put_is_refused():
    gauge = MemoryGauge(resident_bytes() // 2, clock=Clock())
    assert not gauge.admits(0) and gauge.over


def test_under_the_limit_puts_count_against_it_until_the_next_reading():
    clock = Clock()
    gauge = MemoryGauge(resident_bytes() + 64 * MiB, clock=clock)
    room = gauge.limit - gauge.rss
    cost = 2 * MiB + MemoryGauge.PUT_OVERHEAD
    admitted = 0
    while gauge.admits(MiB):
        admitted += 1
    assert admitted == room // cost  # a burst stops at the limit, not at the next reading
    assert gauge.over
    clock.wait(limits.MEMORY_POLL_S)  # a new reading: the estimates are dropped (nothing was held)
    assert gauge.admits(MiB) and not gauge.over and gauge.pending == cost


def test_a_put_reads_the_resident_set_once_the_reading_is_older_than_the_poll(monkeypatch):
    clock, readings = Clock(), iter([100 * MiB, 100 * MiB, 300 * MiB, 100 * MiB])
    monkeypatch.setattr(limits, "resident_bytes", lambda: next(readings))
    gauge = MemoryGauge(200 * MiB, clock=clock)  # reads 100 MiB
    clock.wait(limits.MEMORY_POLL_S)
    assert gauge.admits(10)  # reads 100 MiB
    gauge.rss = 0  # (not read again within the poll: this stands)
    clock.wait(limits.MEMORY_POLL_S / 2)
    assert gauge.admits(10) and gauge.rss == 0
    clock.wait(limits.MEMORY_POLL_S / 2)
    assert not gauge.admits(10) and gauge.rss == 300 * MiB  # memory grew while nobody asked: refused
    clock.wait(limits.MEMORY_POLL_S)
    assert gauge.admits(10) and not gauge.over  # and back under: accepted again


def test_without_a_limit_puts_never_read_and_stats_read_when_stale(monkeypatch):
    clock = Clock()
    gauge = MemoryGauge(0, clock=clock)
    monkeypatch.setattr(limits, "resident_bytes", lambda: 7 * MiB)
    clock.wait(10)
    assert gauge.admits(MiB) and gauge.rss != 7 * MiB  # no limit: nothing to read for
    assert gauge.resident() == 7 * MiB  # `stats` (haqueue-memory-rss) reads a stale gauge
