"""The durable journal: what survives a crash, what a torn tail becomes."""

from __future__ import annotations

import os

import pytest

from haqueue.replication.fsync_policy import DURABLE, NEVER, FsyncPolicy
from haqueue.replication.journal import PREALLOCATE, DurableJournal, JournalError


def test_entries_survive_reopening(tmp_path):
    path = str(tmp_path / "j")
    j = DurableJournal(path, DURABLE)
    for i in range(1, 6):
        j.add(b"cmd%d" % i, i, 1)
    j.sync()
    j._destroy()
    j = DurableJournal(path, DURABLE)
    assert [e[1] for e in j.entries] == [1, 2, 3, 4, 5]
    assert j[2] == (b"cmd3", 3, 1)


def test_a_torn_tail_is_cut_off_at_open(tmp_path):
    path = str(tmp_path / "j")
    j = DurableJournal(path, DURABLE)
    j.add(b"one", 1, 1)
    j.add(b"two", 2, 1)
    end = j.end  # where the records end: zeros written ahead follow (PREALLOCATE)
    j._destroy()
    with open(path, "r+b") as f:
        f.truncate(end - 2)  # a crash in the middle of the last record
    j = DurableJournal(path, DURABLE)
    assert [e[0] for e in j.entries] == [b"one"]
    j.add(b"three", 2, 2)
    j._destroy()
    assert [e[0] for e in DurableJournal(path, NEVER).entries] == [b"one", b"three"]


def test_a_corrupt_record_ends_the_journal_there(tmp_path):
    path = str(tmp_path / "j")
    j = DurableJournal(path, DURABLE)
    j.add(b"one", 1, 1)
    j.add(b"two", 2, 1)
    end = j.end
    j._destroy()
    with open(path, "r+b") as f:
        f.seek(end - 1)
        f.write(b"X")
    assert [e[0] for e in DurableJournal(path, NEVER).entries] == [b"one"]


def test_truncating_a_suffix_and_compacting_a_prefix(tmp_path):
    path = str(tmp_path / "j")
    j = DurableJournal(path, DURABLE)
    for i in range(1, 11):
        j.add(b"c%d" % i, i, 1)
    j.deleteEntriesFrom(7)  # Raft drops a conflicting suffix
    j.deleteEntriesTo(3)  # a snapshot covers the first three
    assert j.settle_compaction()
    j.add(b"c8'", 8, 2)
    j._destroy()
    j = DurableJournal(path, NEVER)
    assert [e[1] for e in j.entries] == [4, 5, 6, 7, 8]
    assert j[-1] == (b"c8'", 8, 2)


def test_durable_policy_syncs_and_never_policy_does_not(tmp_path):
    durable = DurableJournal(str(tmp_path / "a"), DURABLE)
    opened = durable.syncs
    durable.add(b"x", 1, 1)
    durable.sync()
    assert durable.syncs == opened + 1 and not durable.dirty
    never = DurableJournal(str(tmp_path / "b"), NEVER)
    never.add(b"x", 1, 1)
    never.sync()
    assert never.syncs == 0


def test_periodic_policy_waits_for_its_interval(tmp_path):
    j = DurableJournal(str(tmp_path / "a"), FsyncPolicy(60_000))
    opened = j.syncs
    j.add(b"x", 1, 1)
    j.sync()
    assert j.syncs == opened and j.dirty  # not yet: at most every 60 s
    j.force_sync()
    assert j.syncs == opened + 1


def test_term_and_vote_are_stored_at_once(tmp_path):
    path = str(tmp_path / "j")
    j = DurableJournal(path, DURABLE)
    j.setCurrentTerm(7, "127.0.0.1:1")
    # No _destroy: a crash right after the vote must not lose it.
    assert DurableJournal(path, NEVER).getCurrentTerm() == 7
    assert DurableJournal(path, NEVER).getVotedForNodeId() == "127.0.0.1:1"


def test_a_background_sync_covers_what_was_written_before_it_started(tmp_path):
    j = DurableJournal(str(tmp_path / "j"), DURABLE)
    opened = j.syncs
    j.add(b"one", 1, 1)
    j.add(b"two", 2, 1)
    j.sync_in_background()
    j.add(b"three", 3, 1)  # after the sync started: not covered by it
    j.sync(through=j.end_of_index(2))  # waits for the worker, no fsync of its own
    assert j.synced_end >= j.end_of_index(2) and j.syncs == opened + 1
    assert j.dirty  # "three" is written but not yet known durable
    j.sync()
    assert not j.dirty and j.syncs == opened + 2
    j._destroy()
    assert not j._sync_worker.is_alive()


def test_end_of_index_is_the_offset_just_past_that_entry(tmp_path):
    j = DurableJournal(str(tmp_path / "j"), DURABLE)
    for i in range(1, 4):
        j.add(b"c%d" % i, i, 1)
    assert j.end_of_index(1) == j.offsets[1]
    assert j.end_of_index(2) == j.offsets[2]
    assert j.end_of_index(3) == j.end
    assert j.end_of_index(99) == j.end  # unknown: everything
    j._destroy()


def test_truncating_after_a_background_sync_is_durable_and_exact(tmp_path):
    path = str(tmp_path / "j")
    j = DurableJournal(path, DURABLE)
    for i in range(1, 6):
        j.add(b"c%d" % i, i, 1)
    j.sync_in_background()
    j.deleteEntriesFrom(2)  # waits for the worker before cutting the file
    assert j.synced_end == j.end and not j.dirty
    j.add(b"c3'", 3, 2)
    j.sync_in_background()
    j.deleteEntriesTo(1)  # the worker copies once its sync is done
    assert j.settle_compaction()  # the swap replaces the descriptor: no sync of it in flight
    assert not j.dirty
    j._destroy()
    assert [(e[0], e[1]) for e in DurableJournal(path, NEVER).entries] == [(b"c2", 2), (b"c3'", 3)]


def test_a_failed_background_sync_poisons_the_journal_for_good(tmp_path):
    # Linux reports a writeback error to one fdatasync only: a later sync that
    # succeeds proves nothing, so nothing after a failure may be called durable.
    j = DurableJournal(str(tmp_path / "j"), DURABLE)
    j.add(b"one", 1, 1)
    fd = j.fd
    j.fd = os.open(os.devnull, os.O_RDONLY)  # fdatasync on it fails (EINVAL)
    try:
        j.sync_in_background()
        with pytest.raises(JournalError, match="fdatasync failed: EINVAL"):
            j.sync()
        assert j.dirty  # nothing was claimed durable
    finally:
        os.close(j.fd)
        j.fd = fd
    for again in (j.sync, j.force_sync, lambda: j.add(b"two", 2, 1), j.sync_in_background):
        with pytest.raises(JournalError, match=str(tmp_path / "j")):
            again()
    assert j.dirty and len(j) == 1
    j._destroy()  # closes without claiming anything


def test_a_failed_write_names_the_file_and_poisons_the_journal(tmp_path):
    path = str(tmp_path / "j")
    j = DurableJournal(path, DURABLE)
    fd = j.fd
    j.fd = os.open(os.devnull, os.O_RDONLY)  # write on it fails (EBADF)
    try:
        with pytest.raises(JournalError) as failure:
            j.add(b"one", 1, 1)
    finally:
        os.close(j.fd)
        j.fd = fd
    assert str(failure.value) == f"journal {path}: write failed: EBADF: Bad file descriptor"
    assert len(j) == 0  # the entry was never taken
    with pytest.raises(JournalError):
        j.setCurrentTerm(3, None)
    j._destroy()


def test_opening_a_journal_syncs_what_a_killed_process_left_in_the_page_cache(tmp_path):
    path = str(tmp_path / "j")
    j = DurableJournal(path, NEVER)  # written, never synced: as after a kill -9
    j.add(b"one", 1, 1)
    j._destroy()
    assert DurableJournal(path, NEVER).syncs == 0
    reopened = DurableJournal(path, DURABLE)
    assert reopened.syncs == 1 and not reopened.dirty


def test_a_corrupt_record_with_intact_entries_after_it_refuses_to_open(tmp_path):
    path = str(tmp_path / "j")
    j = DurableJournal(path, DURABLE)
    for i in range(1, 6):
        j.add(b"entry %d" % i, i, 1)
    third = j.offsets[2]
    j._destroy()
    with open(path, "r+b") as f:
        f.seek(third + 20)  # inside entry 3's payload: its checksum fails
        f.write(b"\xff")
    with pytest.raises(JournalError, match=rf"corrupt record at offset {third} .*entry 4"):
        DurableJournal(path, NEVER)
    assert os.path.getsize(path) > third + 40  # nothing was cut


def test_compacting_keeps_the_suffix_byte_for_byte_and_later_cuts_still_land(tmp_path):
    path = str(tmp_path / "j")
    j = DurableJournal(path, DURABLE)
    for i in range(1, 21):
        j.add(b"command %d " % i * i, i, 1 + i // 10)
    with open(path, "rb") as f:
        before = f.read()
    kept_from, end = j.offsets[12], j.end
    j.deleteEntriesTo(12)  # a snapshot covers 1..12
    assert j.settle_compaction()
    with open(path, "rb") as f:
        # The magic, then the same records (not the zeros written ahead of them).
        assert f.read() == before[:8] + before[kept_from:end]
    j.deleteEntriesFrom(5)  # offsets still point at record starts: keep 13..17
    j.add(b"new 18", 18, 3)
    j._destroy()
    reopened = DurableJournal(path, NEVER)
    assert [e[1] for e in reopened.entries] == [13, 14, 15, 16, 17, 18]
    assert reopened[0] == (b"command 13 " * 13, 13, 2) and reopened[-1] == (b"new 18", 18, 3)


def test_compacting_everything_leaves_an_empty_journal(tmp_path):
    path = str(tmp_path / "j")
    j = DurableJournal(path, DURABLE)
    for i in range(1, 4):
        j.add(b"c", i, 1)
    j.deleteEntriesTo(3)
    assert j.settle_compaction()
    assert len(j) == 0 and j.file_bytes == 8
    j.add(b"d", 4, 1)
    j._destroy()
    assert [e[1] for e in DurableJournal(path, NEVER).entries] == [4]


def test_short_writes_are_completed_not_forgotten(tmp_path, monkeypatch):
    # A write may take fewer bytes than asked (a signal, a nearly full disk);
    # the rest must follow, or every later record is shifted and unreadable.
    real_pwrite = os.pwrite
    monkeypatch.setattr(os, "pwrite", lambda fd, data, offset: real_pwrite(fd, bytes(data[:7]), offset))
    path = str(tmp_path / "j")
    j = DurableJournal(path, DURABLE)
    for i in range(1, 4):
        j.add(b"a command of some length %d" % i, i, 1)
    j._destroy()
    monkeypatch.undo()
    assert [e[0] for e in DurableJournal(path, NEVER).entries] == [
        b"a command of some length 1", b"a command of some length 2", b"a command of some length 3"]


def test_records_are_written_over_zeros_written_ahead_and_the_zeros_are_no_tail(tmp_path):
    """The file grows PREALLOCATE bytes at a time, so most fdatasyncs flush data only (no
    new size to commit); reopening reads the zeros as room, not as a torn tail."""
    path = str(tmp_path / "j")
    j = DurableJournal(path, DURABLE)
    j.add(b"one", 1, 1)
    size = os.path.getsize(path)
    assert size >= j.end + PREALLOCATE
    for i in range(2, 50):
        j.add(b"entry %d" % i, i, 1)
        j.sync()
    assert os.path.getsize(path) == size  # every record since went into the room
    end = j.end
    j._destroy()
    reopened = DurableJournal(path, DURABLE)
    assert len(reopened) == 49 and reopened.end == end and reopened.allocated == size
    reopened.add(b"fifty", 50, 1)
    reopened._destroy()
    assert [e[0] for e in DurableJournal(path, NEVER).entries][-2:] == [b"entry 49", b"fifty"]


def test_a_cut_suffix_is_not_left_in_the_room_ahead(tmp_path):
    """deleteEntriesFrom cuts the file: were the cut records left as bytes after the end,
    records of the same indexes would be read back at the next open."""
    path = str(tmp_path / "j")
    j = DurableJournal(path, DURABLE)
    for i in range(1, 6):
        j.add(b"old %d" % i, i, 1)
    j.deleteEntriesFrom(2)  # entries 3..5 conflicted
    j._destroy()
    assert [e[0] for e in DurableJournal(path, NEVER).entries] == [b"old 1", b"old 2"]
