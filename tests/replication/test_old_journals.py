"""Data directories written by old versions still read as they did (core/commands.py, checklist item 4).

tests/testdata/journals/NAME/ is a lone node's data directory (snapshot plus
journal) that the code of an old commit wrote, and NAME.json what that old code
said of it (scripts/write-old-journal made both). For each one, the current
code must (a) replay it offline to the same state the old code replayed, and
(b) serve it, as a restarted node, exactly as the old code served it, and go on
doing so after a restart that leaves old and new entries in one journal. Other
tests check the data itself: what each snapshot holds, and that each journal
uses every opcode its format has.

The last tests keep the checklist honest: raising LOG_FORMAT_VERSION or
SNAPSHOT_FORMAT_VERSION without storing a directory of the version before
fails here, and so does an opcode of an old version no stored journal uses.
"""

from __future__ import annotations

import json
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import haqueue.replication.pysyncobj_patches  # noqa: F401  (pysyncobj imported safely first)
from haqueue.core import commands as C
from haqueue.core.job import BURIED, RESERVED
from haqueue.core.state import SNAPSHOT_FORMAT_VERSION
from haqueue.config.fsync_policy import NEVER
from haqueue.replication.journal import DurableJournal, unframe
from haqueue.replication.replay import replay_with_tail
from haqueue.replication.snapshot import SNAPSHOT_MAGIC
from tests.support.gearman import start_haqueue_gearman
from tests.support.old_journals import TEN_YEARS, observe
from tests.support.servers import free_udp_port, start_haqueue

JOURNALS = Path(__file__).resolve().parent.parent / "testdata" / "journals"
NAMES = sorted(p.stem for p in JOURNALS.glob("*.json"))

# Opcodes of an old log format that no stored journal holds, and why that is acceptable.
NOT_IN_ANY_JOURNAL = {
    # A node commits its id rules as it first takes office, before anything else,
    # so the entry always ends up inside the snapshot, never in the journal's tail;
    # the snapshot's id section carries its effect. Reaching it needs a node run
    # from a cluster file whose rules change between two starts.
    C.ID_SET_RULES: "committed at a node's first start, so always inside the snapshot",
}
# Opcodes a later format no longer writes (the first format that does not): they are in
# the journals of the formats before it.
SUPERSEDED = {
    C.GM_SUBMIT: 4,  # version 4 submits with GM_SUBMIT_KEEP (gearmand's coalescing and maxqueue)
}


def manifest(name: str) -> dict:
    return json.loads((JOURNALS / f"{name}.json").read_text())


def copy_of(name: str, tmp_path: Path) -> Path:
    target = tmp_path / name
    shutil.copytree(JOURNALS / name, target)
    return target


def plain(value):
    """As scripts/write-old-journal writes records into JSON."""
    if isinstance(value, bytes):
        return {"bytes": value.decode("latin-1")}
    if isinstance(value, (tuple, list)):
        return [plain(v) for v in value]
    return value


def journal_commands(data_dir: Path) -> list[tuple[int, list[tuple]]]:
    """(entry's log format version, its commands) of every batch in the journal."""
    journal = DurableJournal(str(data_dir / "raft.journal"), NEVER)
    try:
        out = []
        for command, _idx, _term in journal.entries:
            entry = unframe(command)
            if entry is not None:
                version = pickle.loads(entry)[0]
                out.append((version, C.decode_batch(entry)[1]))
        return out
    finally:
        journal._destroy()


@pytest.mark.parametrize("name", NAMES)
def test_the_stored_directory_is_what_its_manifest_says(name):
    """Guards the data itself: a mislabelled directory would make the other tests prove nothing."""
    m = manifest(name)
    data = JOURNALS / name
    entries = journal_commands(data)
    assert max(version for version, _ in entries) == m["log_format"]
    assert m["has_snapshot"] is True
    magic, records, _raft = pickle.loads((data / "raft.snapshot").read_bytes())
    assert magic == SNAPSHOT_MAGIC
    assert records[0] == m["snapshot_format"]
    # the scenario's landmarks, as the old code served them after a restart
    served = m["served"]
    assert served["jobs"]["3"] == {"body": "a3 delayed ten years", "stats": {
        "id": "3", "tube": "alpha", "state": "delayed", "pri": "100", "delay": str(TEN_YEARS), "ttr": "30",
        "reserves": "0", "timeouts": "0", "releases": "0", "buries": "0", "kicks": "0"}}
    assert served["tubes"]["gamma"]["pause"] == str(TEN_YEARS)
    assert served["tubes"]["gamma"]["current-jobs-buried"] == "1"
    left = str(m["written"]["left_reserved"])
    assert served["jobs"][left]["stats"]["state"] == "ready"  # a restart gives reservations back
    # Snapshot format 1 kept no buried order: read back, the buried queue is in id
    # order (core/state.py says so); from format 2 it is first in first out.
    buried = m["written"]["in_snapshot"]["buried_in_order"]
    first = min(buried) if m["snapshot_format"] == 1 else buried[0]
    assert served["tubes"]["delta"]["peek-buried"] == first


@pytest.mark.parametrize("name", NAMES)
def test_the_snapshot_holds_the_state_meant_for_it(name):
    """So that reading the old snapshot format is really exercised, not only its journal."""
    m = manifest(name)
    meant = m["written"]["in_snapshot"]
    _magic, records, _raft = pickle.loads((JOURNALS / name / "raft.snapshot").read_bytes())
    states = {record[0]: record[6] for record in records[6]}
    assert [states[job] for job in meant["buried_in_order"]] == [BURIED, BURIED]
    assert states[meant["reserved"]] == RESERVED
    tubes = {record[0]: record for record in records[5]}
    assert tubes[meant["paused_tube"]][4] > 0  # its pause
    if m["snapshot_format"] >= 2:
        assert list(tubes[meant["paused_tube"]][6]) == meant["buried_in_order"]
    if m["snapshot_format"] >= 3:
        counters = records[8][5]  # core/ids.py's records, id formats 1 and 2 alike
        assert [c[:2] for c in counters] == [("counter", "orders")]
    if m["snapshot_format"] >= 4:
        assert [job[1] for job in records[9][2]] == ["thumb"]  # the Gearman job queued before it


@pytest.mark.parametrize("name", NAMES)
def test_the_journal_uses_every_opcode_of_its_format(name):
    used = {command[0] for _version, commands in journal_commands(JOURNALS / name) for command in commands}
    known = {op for op in C.NAMES if C.entry_version(op) <= manifest(name)["log_format"]}
    superseded = {op for op, since in SUPERSEDED.items() if manifest(name)["log_format"] >= since}
    missing = known - used - set(NOT_IN_ANY_JOURNAL) - superseded
    assert not missing, sorted(C.NAMES[op] for op in missing)


@pytest.mark.parametrize("name", NAMES)
def test_offline_replay_gives_the_state_the_old_code_replayed(name, tmp_path):
    m = manifest(name)
    expected = m["replay"]
    state, applied, tail = replay_with_tail(str(copy_of(name, tmp_path)), uncommitted=True)
    assert tail == 0
    assert applied == expected["applied_index"]
    assert state.next_id == expected["next_id"]
    assert len(state.jobs) == expected["jobs"]
    assert state.counts() == expected["counts"]
    records = state.to_records()
    assert plain(records[6]) == expected["job_records"]
    tubes = plain(records[5])
    if m["snapshot_format"] == 1:
        # format 1 kept no buried order: compare the rest; the order is by id now
        assert [t[:6] for t in tubes] == expected["tube_records"]
    else:
        assert tubes == expected["tube_records"]
    if m["snapshot_format"] == SNAPSHOT_FORMAT_VERSION:
        assert state.digest() == expected["digest"]  # the digest covers the format number too


@pytest.mark.parametrize("name", NAMES)
def test_node_replay_command_reads_it(name, tmp_path):
    expected = manifest(name)["replay"]
    result = subprocess.run([sys.executable, "-m", "haqueue", "node", "replay", "--uncommitted",
                             "-b", str(copy_of(name, tmp_path))], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    lines = dict(line.split(": ", 1) for line in result.stdout.splitlines())
    assert lines["applied-index"] == str(expected["applied_index"])
    assert lines["next-id"] == str(expected["next_id"])
    assert lines["jobs"] == str(expected["jobs"])
    for key in ("ready", "reserved", "delayed", "buried"):
        assert lines[key] == str(expected["counts"][key])


@pytest.mark.parametrize("name", NAMES)
def test_a_current_node_serves_it_as_the_old_node_did(name, tmp_path):
    m = manifest(name)
    server, port, id_port, gearman_port = start_current(m, str(copy_of(name, tmp_path)))
    try:
        served = observe(port, id_port, gearman_port)
    finally:
        server.stop()
    assert served == m["served"]


def start_current(m: dict, data: str):
    """A current lone node on `data`: (server, beanstalk port, id port, Gearman port)."""
    id_port = free_udp_port() if m["ids"] else None
    extra = ("-f", "0") + (("--id-port", str(id_port)) if id_port else ())
    if m["gearman"]:
        server = start_haqueue_gearman(*extra, data_dir=data)
        return server, server.beanstalk_port, id_port, server.port
    server = start_haqueue(*extra, data_dir=data)
    return server, server.port, id_port, None


@pytest.mark.parametrize("name", NAMES)
def test_the_upgraded_directory_survives_a_restart_of_the_current_node(name, tmp_path):
    """After a current node has run on it, the directory holds old entries then new ones."""
    m = manifest(name)
    data = str(copy_of(name, tmp_path))
    views = []
    for _ in range(2):
        server, port, id_port, gearman_port = start_current(m, data)
        try:
            views.append(observe(port, id_port, gearman_port))
        finally:
            server.stop()
    first, second = views
    if m["ids"]:
        # each view took an id: the second one the next
        assert int(second.pop("next_id")) == int(first.pop("next_id")) + 1
    assert second == first == {k: v for k, v in m["served"].items() if k != "next_id"}


def test_every_older_log_format_has_a_stored_journal():
    """Raising LOG_FORMAT_VERSION needs a directory written by the version before
    (scripts/write-old-journal with the last commit of that version)."""
    stored = {manifest(name)["log_format"] for name in NAMES}
    missing = set(range(1, C.LOG_FORMAT_VERSION)) - stored
    assert not missing, (f"no journal of log format {sorted(missing)} in {JOURNALS}: "
                         f"write one with scripts/write-old-journal")


def test_every_older_snapshot_format_has_a_stored_snapshot():
    stored = {manifest(name)["snapshot_format"] for name in NAMES if manifest(name)["has_snapshot"]}
    missing = set(range(1, SNAPSHOT_FORMAT_VERSION)) - stored
    assert not missing, (f"no snapshot of format {sorted(missing)} in {JOURNALS}: "
                         f"write one with scripts/write-old-journal")


def test_every_opcode_of_an_older_log_format_is_in_a_stored_journal():
    """An old version's stored journal must use all of that version's opcodes, or a
    journal written before the version's last opcode was added would pass for it."""
    used = set()
    for name in NAMES:
        for _version, commands in journal_commands(JOURNALS / name):
            used.update(command[0] for command in commands)
    old = {op for op in C.NAMES if C.entry_version(op) < C.LOG_FORMAT_VERSION}
    missing = old - used - set(NOT_IN_ANY_JOURNAL)
    assert not missing, f"opcodes no stored journal uses: {sorted(C.NAMES[op] for op in missing)}"
