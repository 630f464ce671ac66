"""The backup file: round trip, a newer format refused, damage refused, each in one line."""

from __future__ import annotations

import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from haqueue.backup import fileformat as F
from haqueue.backup import records as R
from tests.backup.rich_state import T0, rich_state

FACTS = {"taken_at_ms": T0 + 2_000, "index": 812, "term": 3, "cluster": "prod", "node": "n2", "haqueue": "0.1.0"}


def backup_bytes() -> bytes:
    return F.encode(R.from_state(rich_state(), T0 + 2_000), FACTS)


def test_a_backup_reads_back_as_written_with_its_facts():
    data = backup_bytes()
    records, fields = F.decode(data)
    assert records == R.from_state(rich_state(), T0 + 2_000)
    assert {k: fields[k] for k in FACTS} == FACTS and fields["format"] == F.FORMAT_VERSION
    assert data.startswith(b"HAQUEUE-BACKUP 1 {")  # a person can read the first line


def test_a_newer_format_is_refused_in_one_line():
    data = backup_bytes().replace(b"HAQUEUE-BACKUP 1 ", b"HAQUEUE-BACKUP 2 ", 1)
    with pytest.raises(F.BackupFileError) as refused:
        F.decode(data)
    assert "format 2 is newer than this haqueue reads (1)" in str(refused.value)
    assert "\n" not in str(refused.value)


@settings(max_examples=80, deadline=None)
@given(st.data())
def test_any_truncation_is_refused(data):
    whole = backup_bytes()
    cut = data.draw(st.integers(0, len(whole) - 1))
    with pytest.raises(F.BackupFileError) as refused:
        F.decode(whole[:cut])
    assert "\n" not in str(refused.value)


@settings(max_examples=80, deadline=None)
@given(st.data())
def test_any_flipped_byte_in_the_body_is_refused_as_corrupt(data):
    whole = bytearray(backup_bytes())
    start = whole.index(b"\n") + 1
    at = data.draw(st.integers(start, len(whole) - 1))
    whole[at] ^= data.draw(st.integers(1, 255))
    with pytest.raises(F.BackupFileError, match="checksum does not match"):
        F.decode(bytes(whole))


def test_bytes_after_the_body_are_refused():
    with pytest.raises(F.BackupFileError, match="follow the body"):
        F.decode(backup_bytes() + b"x")


@pytest.mark.parametrize("data, says", [
    (b"", "not a haqueue backup"),
    (b"\x89PNG\r\n", "not a haqueue backup"),
    (b"HAQUEUE-BACKUP x {}\n", "is not a number"),
    (b"HAQUEUE-BACKUP 1 {not json\n", "does not parse"),
    (b'HAQUEUE-BACKUP 1 {"length": 3}\n', "lacks the body's length and sha256"),
    (b"HAQUEUE-BACKUP 1 " + b" " * 5000, "cut off or too long"),
])
def test_a_file_that_is_no_backup_is_refused(data, says):
    with pytest.raises(F.BackupFileError, match=says):
        F.decode(data)


def test_a_body_naming_code_is_refused_before_anything_runs():
    class Boom:
        def __reduce__(self):
            return (print, ("ran",))

    body = pickle.dumps(Boom(), protocol=5)
    with pytest.raises(F.BackupFileError, match="refusing builtins.print"):
        F.decode(F.header(body, FACTS) + body)


def test_a_body_of_the_wrong_shape_is_refused():
    body = pickle.dumps((3, 1, 2), protocol=5)
    with pytest.raises(F.BackupFileError, match="not a haqueue state"):
        F.decode(F.header(body, FACTS) + body)


def test_a_stored_format_1_file_still_restores():
    """The checklist's file of each format (fileformat.py): written by the code of
    format 1, it must read and restore with the code of every later one."""
    from pathlib import Path

    from haqueue.backup import restore

    data = (Path(__file__).parent.parent / "testdata" / "backup-v1.haqbackup").read_bytes()
    records, fields = F.decode(data)
    assert (fields["format"], fields["index"], fields["node"]) == (1, 812, "n2")
    state = restore.restored_state(records, now=T0 + 10**9, skip=0)
    assert R.summary(records) == {"jobs": 7, "ready": 3, "delayed": 1, "reserved": 1, "buried": 2, "tubes": 3,
                                  "paused_tubes": 1, "next_job_id": 8, "id_counters": 2, "gearman_jobs": 2}
    assert list(state.tubes["mail"].buried) == [6, 5] and state.jobs[7].body == b"\x00binary\xff"
