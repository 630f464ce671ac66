"""The journal's metadata: the term and vote synced at once, the commit index never on its own.

pysyncobj asks its journal to store metadata once a second (onOneSecondTimer).
Storing the commit index then cost the event loop a rename and two fsyncs
every second on a busy node (8 ms median on the shared machine,
docs/reliability.md "Blocking work on the loop"); it need not be durable, since
a restarted node relearns it. It now rides with the term and vote, and a
clean close.
"""

from __future__ import annotations

import os

from haqueue.config.fsync_policy import DURABLE, FsyncPolicy
from haqueue.replication.journal import DurableJournal


def test_the_one_second_timer_writes_no_metadata(tmp_path):
    journal = DurableJournal(str(tmp_path / "j"), DURABLE)
    journal.setCurrentTerm(3, None)
    stored = os.stat(journal.meta_path).st_ino  # each store renames a new file into place
    journal.setRaftCommitIndex(41)
    journal.onOneSecondTimer()
    assert os.stat(journal.meta_path).st_ino == stored
    assert DurableJournal(str(tmp_path / "j"), DURABLE).getRaftCommitIndex() != 41
    journal._destroy()


def test_the_commit_index_rides_with_the_term_and_a_clean_close(tmp_path):
    path = str(tmp_path / "j")
    journal = DurableJournal(path, FsyncPolicy(50))
    journal.setRaftCommitIndex(7)
    journal.setCurrentTerm(2, "127.0.0.1:1")
    assert DurableJournal(path, DURABLE).getRaftCommitIndex() == 7
    journal.setRaftCommitIndex(9)
    journal._destroy()
    assert DurableJournal(path, DURABLE).getRaftCommitIndex() == 9
