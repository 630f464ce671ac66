"""The journal's sync thread: if it cannot start or dies, the node stops instead of waiting forever.

A leader hands its fsyncs to one worker thread (journal.sync_in_background) and
waits for it before it applies an entry. A worker that never started, or that
died, would leave that wait without an end: the loop, and with it the node,
stuck while still holding leadership in its peers' eyes. Storage errors are
fatal (docs/design.md): these are too, with one line.
"""

from __future__ import annotations

import threading

import pytest

from haqueue.core import commands as C
from haqueue.config.fsync_policy import DURABLE
from haqueue.replication.journal import DurableJournal, JournalError
from tests.support.ticked import free_ports
from tests.support.ticked_on_disk import cluster_on_disk

STAMP = 1_700_000_000_000


def finishes(call, seconds: float = 10.0):
    """call() in a thread: what it returned or raised, or a failure if it is still waiting."""
    outcome: list = []

    def run():
        try:
            outcome.append(("returned", call()))
        except BaseException as exc:  # noqa: BLE001 - the outcome is what the test checks
            outcome.append(("raised", exc))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert outcome, f"still waiting after {seconds} s"
    return outcome[0]


def test_a_sync_thread_that_cannot_start_poisons_the_journal_with_one_line(tmp_path, monkeypatch):
    journal = DurableJournal(str(tmp_path / "j"), DURABLE)
    journal.add(b"one", 1, 1)

    def cannot_start(self):
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(threading.Thread, "start", cannot_start)
    with pytest.raises(JournalError) as failure:
        journal.sync_in_background()
    monkeypatch.undo()
    assert str(failure.value) == f"journal {tmp_path / 'j'}: cannot start its sync thread: can't start new thread"
    kind, value = finishes(journal.sync)
    assert kind == "raised" and isinstance(value, JournalError)
    assert journal.dirty  # nothing claimed durable
    journal._destroy()


def test_a_sync_thread_that_dies_poisons_the_journal_and_nobody_waits_for_it(tmp_path):
    journal = DurableJournal(str(tmp_path / "j"), DURABLE)
    journal.add(b"one", 1, 1)

    def broken(fd):
        raise MemoryError("no memory for the fsync timer")

    journal._fdatasync = broken  # in the worker: not an OSError, so not a storage error it knew
    journal.sync_in_background()
    kind, value = finishes(journal.sync)
    assert kind == "raised" and isinstance(value, JournalError)
    assert str(value) == (f"journal {tmp_path / 'j'}: its sync thread died: MemoryError: "
                          f"no memory for the fsync timer")
    assert journal.dirty
    journal._destroy()


def test_a_leader_whose_sync_thread_cannot_start_stops_with_one_line(tmp_path, monkeypatch):
    addresses = [f"127.0.0.1:{p}" for p in free_ports(3)]
    for n in range(3):
        (tmp_path / f"n{n}").mkdir()
    with cluster_on_disk(tmp_path, addresses, DURABLE) as cluster:
        leader = cluster.leader()
        fatal: list = []
        leader.on_fatal = fatal.append
        original_start = threading.Thread.start

        def start(self):
            if self.name == "journal-sync":
                raise RuntimeError("can't start new thread")
            return original_start(self)

        journal = leader.journal
        if journal._sync_worker is not None:  # started during the election: end it, as _destroy does
            with journal._sync_state:
                journal._closing = True
                journal._sync_state.notify_all()
            journal._sync_worker.join()
            journal._closing, journal._sync_worker = False, None
        monkeypatch.setattr(threading.Thread, "start", start)
        outcome = cluster.submit(leader, C.encode_batch(STAMP, [(C.TICK,)]))


        def ticked_as_the_loop_ticks() -> int:
            # on_loop.LoopTicker's way: tick_once handles a tick's failures, and a
            # node it reports stopped is ticked no more.
            for rounds in range(1, 201):
                cluster.clock.advance(cluster.step)
                for node in cluster.nodes:
                    if node.fatal_error is None:
                        node.tick_once()
                if fatal:
                    return rounds
            return 0

        kind, value = finishes(ticked_as_the_loop_ticks)
        assert kind == "returned" and value, value
        assert fatal == [f"journal {leader.journal.path}: cannot start its sync thread: can't start new thread; "
                         f"stopping: this node can no longer make its log durable"]
        assert outcome in ([], [(None, None)]) or outcome[0][0] is None  # nothing was applied


def test_synced_through_waits_for_a_slow_sync_at_most_its_timeout_and_is_true_once_the_bytes_are_on_disk(tmp_path):
    # A follower's acknowledgements (transport.flush_acknowledgements, docs/pysyncobj.md D3):
    # the loop asks, waits at most ACK_SYNC_WAIT, and asks again on its next poll.
    journal = DurableJournal(str(tmp_path / "j"), DURABLE)
    gate = threading.Event()
    real = journal._fdatasync

    def slow(fd):
        gate.wait(10.0)
        real(fd)

    journal._fdatasync = slow
    journal.add(b"one", 1, 1)
    target = journal.end
    try:
        kind, value = finishes(lambda: journal.synced_through(target, 0.02), seconds=5.0)
        assert (kind, value) == ("returned", False)  # the sync still runs: not on disk, not waited for
        assert journal.synced_end < target
    finally:
        gate.set()
    kind, value = finishes(lambda: journal.synced_through(target, 5.0))
    assert (kind, value) == ("returned", True) and journal.synced_end >= target
    journal._destroy()
