"""The disk reserve (haqueue/server/disk_reserve.py): the rule, and the decision driven by hand.

`observe` takes each reading as arguments, so these tests need no file system and
no clock; the real file systems are in tests/cluster/test_disk_reserve.py.
"""

from __future__ import annotations

import pytest

from haqueue import events
from haqueue.server import disk_reserve as D
from haqueue.server.disk_reserve import DiskReserve, reserve_bytes
from tests.support.ticked import VirtualClock

MiB = 1 << 20


@pytest.mark.parametrize("floor, limit, snapshot, journal, expected", [
    # A journal below its fold point grows to max(-s, snapshot), then the new snapshot
    # (up to snapshot + journal) is written beside both: 3x the state in all.
    (0, 10 * MiB, 30 * MiB, 5 * MiB, 30 * MiB + 30 * MiB),
    (0, 10 * MiB, 30 * MiB, 30 * MiB, 30 * MiB + 30 * MiB),
    # -s above the snapshot: the journal may grow to -s first.
    (0, 100 * MiB, 30 * MiB, 5 * MiB, 100 * MiB + 30 * MiB),
    # A journal already past its fold point (a fold overdue): all of it goes into the snapshot.
    (0, 10 * MiB, 30 * MiB, 50 * MiB, 50 * MiB + 30 * MiB),
    # No snapshot yet: room for the journal to reach -s, folded into a snapshot as big.
    (0, 10 * MiB, 0, 0, 10 * MiB),
    # The floor comes on top.
    (64 * MiB, 10 * MiB, 30 * MiB, 5 * MiB, 64 * MiB + 60 * MiB),
    # -n: the journal is never folded, so only the floor is kept.
    (64 * MiB, None, 30 * MiB, 5 * MiB, 64 * MiB),
])
def test_the_reserve_is_room_to_fold_the_journal_into_a_new_snapshot(floor, limit, snapshot, journal, expected):
    assert reserve_bytes(floor, limit, snapshot, journal) == expected


def test_a_node_at_the_reserve_after_a_fold_holds_a_third_of_its_disk():
    """The 3x rule: just after a fold (journal empty) used + reserve = 3 x the snapshot;
    just before one, with a journal of puts as big as the snapshot, the new snapshot may
    be twice the old, and the reserve still covers it (floor aside)."""
    snapshot = 100 * MiB
    assert snapshot + reserve_bytes(0, 10 * MiB, snapshot, 0) == 3 * snapshot
    used = snapshot + snapshot
    assert used + reserve_bytes(0, 10 * MiB, snapshot, snapshot) == snapshot + snapshot + 2 * snapshot


def test_the_default_floor_is_a_sixteenth_of_the_file_system_at_most_64_mib():
    assert D.default_floor(32 * MiB) == 2 * MiB
    assert D.default_floor(100 * 1024 * MiB) == 64 * MiB


def gauge(floor: int | None = 0, limit: int | None = 1 * MiB) -> DiskReserve:
    # A clock that stands still: every decision is on the reading the test gave.
    return DiskReserve(loop=None, data_dir="/data", floor=floor, journal_limit=limit, sizes=lambda: (0, 0),
                       clock=lambda: 0.0)


def test_below_the_reserve_puts_are_refused_and_counted():
    reserve = gauge()
    assert not reserve.observe(free=2 * MiB, filesystem_bytes=100 * MiB, snapshot_bytes=0, journal_bytes=0)
    assert reserve.admits(1000)
    assert reserve.observe(free=MiB - 1, filesystem_bytes=100 * MiB, snapshot_bytes=0, journal_bytes=0)
    assert not reserve.admits(1000) and not reserve.admits(0)
    assert reserve.refused == 2


def test_puts_resume_only_once_free_space_passes_the_reserve_by_the_margin():
    reserve = gauge()
    reading = dict(filesystem_bytes=100 * MiB, snapshot_bytes=0, journal_bytes=0)
    assert reserve.observe(free=MiB - 1, **reading)
    margin = D.resume_margin(MiB)
    assert reserve.observe(free=MiB + margin - 1, **reading)  # back at the line: still refused (no flapping)
    assert not reserve.observe(free=MiB + margin, **reading)
    assert reserve.admits(1000)


def test_admitted_puts_count_against_the_free_space_until_the_next_reading():
    reserve = gauge()
    reserve.observe(free=MiB + 10 * (1000 + D.PUT_OVERHEAD), filesystem_bytes=100 * MiB, snapshot_bytes=0,
                    journal_bytes=0)
    admitted = 0
    while reserve.admits(1000):
        admitted += 1
    assert admitted == 10  # a burst stops at the line, not at the next reading
    assert reserve.below


def test_crossing_the_reserve_either_way_is_an_event():
    events.clear()
    reserve = gauge()
    reading = dict(filesystem_bytes=100 * MiB, snapshot_bytes=0, journal_bytes=0)
    reserve.observe(free=10 * MiB, **reading)
    reserve.observe(free=MiB // 2, **reading)
    reserve.observe(free=MiB // 4, **reading)  # still below: no second event
    reserve.observe(free=10 * MiB, **reading)
    crossed = [e for e in events.recent() if e["event"] == "disk_reserve_crossed"]
    assert [e["below"] for e in crossed] == [True, False]
    assert crossed[0]["level"] == "warning" and "below the reserve" in crossed[0]["msg"]


def test_a_node_without_a_data_directory_or_with_the_reserve_off_always_admits():
    for reserve in (DiskReserve(None, None, None, 1 * MiB, lambda: (0, 0)), gauge(floor=D.OFF)):
        reserve.observe(free=0, filesystem_bytes=100 * MiB, snapshot_bytes=0, journal_bytes=0)
        assert reserve.admits(1000)


def test_the_snapshot_and_journal_sizes_raise_the_reserve():
    reserve = gauge(floor=0, limit=MiB)
    reading = dict(free=50 * MiB, filesystem_bytes=100 * MiB)
    assert not reserve.observe(snapshot_bytes=10 * MiB, journal_bytes=MiB, **reading)  # needs 20 MiB
    assert reserve.observe(snapshot_bytes=20 * MiB, journal_bytes=35 * MiB, **reading)  # needs 55 MiB
    assert reserve.reserve == 55 * MiB


def test_a_request_reads_the_disk_when_the_last_reading_is_older_than_the_poll(tmp_path):
    """No timer runs here (the reserve is never started): the request itself reads the
    file system once the last reading is POLL_SECONDS old, and not before."""
    clock, reads = VirtualClock(100.0), []

    def sizes():
        reads.append(clock.now)
        return 0, 0

    reserve = DiskReserve(loop=None, data_dir=str(tmp_path), floor=0, journal_limit=MiB, sizes=sizes, clock=clock)
    assert reserve.admits(1000) and len(reads) == 1  # the first request reads
    assert reserve.free > 0
    clock.now += D.POLL_SECONDS / 2
    assert reserve.admits(1000) and len(reads) == 1  # a fresh reading: counted against it
    assert reserve.pending == 2 * (1000 + D.PUT_OVERHEAD)
    clock.now += D.POLL_SECONDS / 2
    assert reserve.admits(1000) and len(reads) == 2 and reserve.pending == 1000 + D.PUT_OVERHEAD


def test_a_disk_that_filled_while_nobody_asked_refuses_the_next_request_at_once(tmp_path):
    """The guarantee the timer gave, kept without it: a reading taken while there was room
    does not admit work once it is POLL_SECONDS old; the request reads again and refuses."""
    clock = VirtualClock(100.0)
    reserve = DiskReserve(loop=None, data_dir=str(tmp_path), floor=0, journal_limit=MiB, sizes=lambda: (0, 0),
                          clock=clock)
    reserve.observe(free=100 * MiB, filesystem_bytes=200 * MiB, snapshot_bytes=0, journal_bytes=0)
    assert reserve.admits(1000)
    reserve.floor_setting = 1 << 60  # the disk "fills": no real free space is above this reserve
    assert reserve.admits(1000)  # on the reading of a moment ago
    clock.now += D.POLL_SECONDS
    assert not reserve.admits(1000) and reserve.below
    assert reserve.free != 100 * MiB  # the file system's own reading
    assert reserve.refused == 1


def test_a_reading_that_fails_is_not_retried_on_every_request():
    clock, reads = VirtualClock(100.0), []

    def sizes():
        reads.append(clock.now)
        return 0, 0

    reserve = DiskReserve(loop=None, data_dir="/nonexistent/haqueue-data", floor=0, journal_limit=MiB,
                          sizes=sizes, clock=clock)
    reserve.observe(free=10 * MiB, filesystem_bytes=100 * MiB, snapshot_bytes=0, journal_bytes=0)
    clock.now += D.POLL_SECONDS
    assert reserve.admits(1000)  # statvfs failed: the last decision stands
    assert reserve.read_at == clock.now  # ...and is asked again only after POLL_SECONDS
