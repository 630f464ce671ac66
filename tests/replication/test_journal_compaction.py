"""Compaction in the journal's worker: the loop never waits for the copy, and no crash loses a synced entry.

After a snapshot, pysyncobj drops the journal's covered prefix (deleteEntriesTo).
The kept records are copied to a new file by the journal's worker while the
loop goes on appending; the loop then copies the little appended since and
swaps the file in (journal.py, `_compact_in_worker` and `_swap_compacted`;
docs/reliability.md, "Blocking work on the loop"). These tests hold the worker
at chosen points with events, so what they check does not depend on timing.
"""

from __future__ import annotations

import os
import threading

import pytest

from haqueue.core import commands as C
from haqueue.replication import journal as journal_module
from haqueue.config.fsync_policy import DURABLE, NEVER
from haqueue.replication.journal import MAGIC, DurableJournal, frame
from tests.replication.test_journal_worker import finishes
from tests.support.power_loss import PowerLoss

STAMP = 1_700_000_000_000


def filled(path: str, policy=DURABLE, count: int = 20) -> DurableJournal:
    journal = DurableJournal(path, policy)
    for i in range(1, count + 1):
        journal.add(b"command %d " % i * 5, i, 1)
    journal.sync()
    return journal


class HeldCopy:
    """Holds the worker's first copy of a compaction until released."""

    def __init__(self, monkeypatch) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        real = journal_module._copy_range
        worker_copies = []

        def copy_range(src, dst, offset, length):
            if threading.current_thread().name == "journal-sync" and not worker_copies:
                worker_copies.append(length)
                self.entered.set()
                assert self.release.wait(10), "the test never released the worker"
            real(src, dst, offset, length)

        monkeypatch.setattr(journal_module, "_copy_range", copy_range)


def test_the_loop_appends_and_syncs_while_the_worker_copies_and_nothing_is_lost(tmp_path, monkeypatch):
    path = str(tmp_path / "j")
    journal = filled(path)
    held = HeldCopy(monkeypatch)
    positions = {i: journal.end_of_index(i) for i in range(13, 21)}
    journal.deleteEntriesTo(12)  # returns at once: the copy is the worker's
    assert held.entered.wait(10)
    # Meanwhile the loop appends and syncs on its own (it does not wait for the copy).
    for i in range(21, 26):
        journal.add(b"later %d" % i, i, 1)
    kind, _ = finishes(journal.sync, seconds=5)
    assert kind == "returned" and not journal.dirty
    held.release.set()
    assert journal.settle_compaction()
    # Positions are logical: what waited for an offset (an acknowledgement) still means the same entry.
    assert {i: journal.end_of_index(i) for i in range(13, 21)} == positions
    assert journal.file_bytes == journal.size == os.path.getsize(path)
    journal.add(b"after the swap", 26, 2)
    journal._destroy()
    reopened = DurableJournal(path, NEVER)
    assert [e[1] for e in reopened.entries] == list(range(13, 27))
    assert reopened[0] == (b"command 13 " * 5, 13, 1) and reopened[-1] == (b"after the swap", 26, 2)
    assert not os.path.exists(path + ".compact")
    reopened._destroy()


def test_a_cut_during_the_copy_abandons_it_and_compacts_again_after(tmp_path, monkeypatch):
    path = str(tmp_path / "j")
    journal = filled(path)
    held = HeldCopy(monkeypatch)
    journal.deleteEntriesTo(10)
    assert held.entered.wait(10)
    releaser = threading.Timer(0.05, held.release.set)  # the cut waits for the worker to stop copying
    releaser.start()
    journal.deleteEntriesFrom(5)  # Raft drops entries 16..20: the copy had them
    releaser.join()
    journal.add(b"new 16", 16, 2)
    assert journal.settle_compaction()  # the cut asked for the prefix to go again
    assert not os.path.exists(path + ".compact")
    journal._destroy()
    with open(path, "rb") as f:
        assert f.read(len(MAGIC)) == MAGIC
    reopened = DurableJournal(path, NEVER)
    assert [e[1] for e in reopened.entries] == [11, 12, 13, 14, 15, 16]
    assert reopened[-1] == (b"new 16", 16, 2)
    reopened._destroy()


@pytest.mark.parametrize("moment", ["copied", "swapped", "swapped-and-renamed", "swapped-and-synced-after"])
def test_a_power_loss_at_any_step_of_a_compaction_keeps_every_synced_entry(tmp_path, monkeypatch, moment):
    directory = tmp_path / "data"
    directory.mkdir()
    path = str(directory / "raft.journal")
    with PowerLoss(str(directory)) as loss:
        journal = filled(path)
        held = HeldCopy(monkeypatch)
        after_swap, release, renamed = threading.Event(), threading.Event(), threading.Event()
        real_after_swap = journal._after_swap

        def held_after_swap(old_fd):  # the worker's sync of the rename, held
            after_swap.set()
            assert release.wait(10)
            real_after_swap(old_fd)
            renamed.set()

        journal._after_swap = held_after_swap
        journal.deleteEntriesTo(12)
        assert held.entered.wait(10)
        for i in range(21, 24):  # appended and synced in the old file during the copy
            journal.add(b"tail %d" % i, i, 1)
        journal.sync()
        held.release.set()
        with journal._sync_state:
            while journal._compacted is None:
                journal._sync_state.wait(5)
        must_have = 23
        if moment != "copied":
            journal.add(b"swapped in", 24, 1)  # the add swaps first: its tail, 21..23, synced in the copy
            assert after_swap.wait(5)
            if moment == "swapped-and-renamed":  # the worker makes the rename durable
                release.set()
                assert renamed.wait(5)
            if moment == "swapped-and-synced-after":
                journal.sync()  # must make the rename durable before it counts entry 24 synced
                must_have = 24
        loss.crash()
        release.set()
        journal._destroy()
        loss.restore()
    reopened = DurableJournal(path, NEVER)
    ids = [e[1] for e in reopened.entries]
    # The old file or the new one, either whole: from at most 13 on, no gap, every synced entry.
    assert ids == list(range(ids[0], ids[-1] + 1)) and ids[0] <= 13 and ids[-1] >= must_have, ids
    if moment == "copied":
        assert ids[0] == 1  # the swap never happened
    reopened._destroy()


def test_under_F_a_kept_entry_that_reserved_ids_stays_on_disk_through_the_swap(tmp_path):
    # -F syncs nothing but the entries that hand out ids. A compaction whose copy
    # holds one must sync the copy before it replaces the file where that entry is
    # on disk, or a power loss after the swap hands its ids out again.
    directory = tmp_path / "data"
    directory.mkdir()
    path = str(directory / "raft.journal")
    reserving = frame(C.encode_batch(STAMP, [(C.ID_RESERVE, "counter", "orders", 5)]))
    with PowerLoss(str(directory)) as loss:
        journal = DurableJournal(path, NEVER)
        for i in range(1, 6):
            journal.add(b"plain %d" % i, i, 1)
        journal.add(reserving, 6, 1)
        journal.sync()  # what the node does before handing the ids out
        renamed = threading.Event()
        real_after_swap = journal._after_swap

        def after_swap(old_fd):
            real_after_swap(old_fd)
            renamed.set()

        journal._after_swap = after_swap
        journal.deleteEntriesTo(3)
        assert journal.settle_compaction()
        assert renamed.wait(5)  # the new file's name is durable: only its own bytes count now
        loss.crash()
        journal._destroy()
        loss.restore()
    reopened = DurableJournal(path, NEVER)
    assert (reserving, 6, 1) in reopened.entries
    reopened._destroy()


def test_a_failed_copy_poisons_the_journal_with_one_line(tmp_path, monkeypatch):
    path = str(tmp_path / "j")
    journal = filled(path)

    def no_space(src, dst, offset, length):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(journal_module, "_copy_range", no_space)
    journal.deleteEntriesTo(12)
    with pytest.raises(journal_module.JournalError) as failure:
        journal.settle_compaction()
    assert str(failure.value) == f"journal {path}.compact: compacting failed: ENOSPC: No space left on device"
    with pytest.raises(journal_module.JournalError):
        journal.add(b"more", 21, 1)
    journal._close()


def test_a_compaction_asked_for_before_a_swap_never_takes_the_copy_being_swapped_in(tmp_path, monkeypatch):
    # A snapshot's deleteEntriesTo asks for the next compaction while the last
    # copy waits for its swap; on a loaded machine the worker picks the request
    # up only once the loop's swap has begun. It used to see no copy pending
    # (the swap forgot it before renaming it) and open `<journal>.compact` again,
    # O_TRUNC: the very file about to be renamed into place. Its result then named
    # a path the rename had taken away, and the next swap died with ENOENT.
    path = str(tmp_path / "j")
    journal = filled(path)
    journal.deleteEntriesTo(5)
    with journal._sync_state:  # the copy is ready, not yet swapped in
        while journal._compacted is None or journal._compact_busy:
            assert journal._sync_state.wait(5)
    # The next snapshot's deleteEntriesTo(3), its request not yet seen by the worker:
    # the request is made in the swap below, just before the rename.
    journal.entries, journal.offsets = journal.entries[3:], journal.offsets[3:]
    real_replace = os.replace
    worker_ran = []

    def replace(src, dst):
        if threading.current_thread() is threading.main_thread() and not worker_ran:
            journal._request_compaction()
            with journal._sync_state:  # the worker serves it before the loop renames
                while journal._compact_from is not None or journal._compact_busy:
                    assert journal._sync_state.wait(5)
            worker_ran.append(True)
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    journal.add(b"swapped in", 21, 1)  # the add swaps the first copy in
    assert worker_ran
    monkeypatch.setattr(os, "replace", real_replace)
    assert journal.settle_compaction()  # the second compaction, from the file now in place
    assert not os.path.exists(path + ".compact")
    assert journal.file_bytes == journal.size == os.path.getsize(path)
    journal._destroy()
    reopened = DurableJournal(path, NEVER)
    assert [e[1] for e in reopened.entries] == list(range(9, 22))
    assert reopened[0] == (b"command 9 " * 5, 9, 1) and reopened[-1] == (b"swapped in", 21, 1)
    reopened._destroy()
