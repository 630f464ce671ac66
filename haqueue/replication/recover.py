"""`node recover --force-new-cluster`: a survivor of a lost majority becomes a group of one.

When a majority of the members is gone for good, Raft cannot commit anything
again: every change needs a majority's acknowledgement. The operator then
takes one survivor (stopped) and runs this on its data directory, offline:

1. Read its snapshot and journal, as the node itself would at start-up.
2. List the entries past the last index this node knows to be committed
   (the commit index it stored, which lags, or its snapshot). Those may never
   have been committed: a client may never have had a reply for them. Once
   the node serves again it commits every one of them.
3. Append, at a new term (one above any it has seen), one membership entry
   per other member removing it (membership.encode_request), and store that
   term. At start-up the node takes its group from its log (membership.py):
   itself alone, a majority of one, so it elects itself and commits its whole
   log. The entries are ordinary Raft entries: a later add-node replicates
   them (or a snapshot holding their result) to each new member.
4. Mark the directory a Raft member's (member_dir.py), so the node runs Raft
   with a cluster file that names it alone, and can grow again.

What is lost is what only the dead members had: entries they committed that
never reached this node (docs/operations.md, "Recovering from a lost
majority"). That is why the survivor to recover is the one with the highest
last index (the listing says which), and why the command refuses while any
other member answers.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field

from haqueue.replication import snapshot as snapshot_file
from haqueue.config.fsync_policy import DURABLE
from haqueue.replication.journal import DurableJournal, unframe
from haqueue.replication.member_dir import mark_member
from haqueue.replication.membership import ADD, REMOVE, encode_request, parse_request

OPCODE_NAMES = {0: "tick", 1: "put", 2: "reserve", 3: "reserve-job", 4: "delete", 5: "release", 6: "bury",
                7: "touch", 8: "kick", 9: "kick-job", 10: "pause-tube", 11: "drop-conn", 12: "release-orphans",
                13: "forget-tube", 14: "id-reserve", 15: "id-set-rules", 20: "gearman-submit",
                21: "gearman-grab", 22: "gearman-status", 23: "gearman-finish", 24: "gearman-drop-conn",
                25: "gearman-maxqueue", 40: "gearman-submit", 41: "gearman-requeue"}


class RecoverError(Exception):
    """The data directory cannot be recovered; str() is one line."""


@dataclass
class Survey:
    """What a stopped node's data directory holds."""

    members: list[str]  # Raft addresses, from the snapshot and the journal
    last_index: int
    last_term: int
    current_term: int
    committed: int  # the highest index this node knows was committed
    uncommitted: list[tuple[int, int, str]] = field(default_factory=list)  # (index, term, what it does)


def survey(data_dir: str, self_address: str, file_members: list[str]) -> Survey:
    """Read `data_dir` (snapshot and journal) without changing it."""
    journal, raft_data = _open(data_dir)
    try:
        return _survey(journal, raft_data, self_address, file_members)
    finally:
        journal._destroy()


def force_new_cluster(data_dir: str, self_address: str, file_members: list[str]) -> tuple[Survey, list[str]]:
    """Make `data_dir` a group of one (the module docstring's steps); (the survey before, removed addresses)."""
    journal, raft_data = _open(data_dir)
    try:
        before = _survey(journal, raft_data, self_address, file_members)
        others = [m for m in before.members if m != self_address]
        term = max(before.current_term, before.last_term) + 1
        journal.setCurrentTerm(term, None)
        if raft_data is not None and not _continues(journal, raft_data):
            # pysyncobj would start this journal afresh from the snapshot at start-up,
            # and the entries below with it: start it so now (align_journal's rule).
            journal.clear()
            journal.add(*raft_data[1])
            journal.add(*raft_data[0])
        index = before.last_index
        for address in others:
            index += 1
            journal.add(encode_request(REMOVE, address), index, term)
        journal.force_sync()
    finally:
        journal._destroy()
    mark_member(data_dir)
    return before, others


def _open(data_dir: str):
    if not os.path.isdir(data_dir):
        raise RecoverError(f"{data_dir}: no such directory")
    journal_path = os.path.join(data_dir, "raft.journal")
    snapshot_path = os.path.join(data_dir, "raft.snapshot")
    if not os.path.exists(journal_path) and not os.path.exists(snapshot_path):
        raise RecoverError(f"{data_dir}: no raft.journal or raft.snapshot: nothing to recover")
    raft_data = None
    if os.path.exists(snapshot_path):
        _state, raft_data = snapshot_file.read(snapshot_path)
    journal = DurableJournal(journal_path, DURABLE)
    if raft_data is not None:
        snapshot_file.align_journal(journal, raft_data)
    return journal, raft_data


def _continues(journal, raft_data) -> bool:
    """Does the journal start with the snapshot's two entries, as pysyncobj requires?"""
    return len(journal) >= 2 and tuple(journal[0]) == tuple(raft_data[1]) and tuple(journal[1]) == tuple(raft_data[0])


def _survey(journal, raft_data, self_address: str, file_members: list[str]) -> Survey:
    members = list(file_members)
    snapshot_index = 0
    last_index, last_term = 0, 0
    if raft_data is not None:
        (_cmd, snapshot_index, last_term), cluster = raft_data[0], raft_data[2]
        last_index = snapshot_index
        members = [getattr(node, "address", str(node)) for node in cluster]
    if self_address not in members:
        members.append(self_address)
    entries = journal.entries if raft_data is None or _continues(journal, raft_data) else []
    for command, idx, term in entries:
        if idx <= snapshot_index:
            continue
        last_index, last_term = idx, term
        change = parse_request(command)
        if change is not None:
            op, address = change
            if op == ADD and address not in members:
                members.append(address)
            elif op == REMOVE and address in members and address != self_address:
                members.remove(address)
    committed = max(journal.getRaftCommitIndex(), snapshot_index)
    uncommitted = [(idx, term, describe(command)) for command, idx, term in entries if idx > committed]
    return Survey(members=sorted(members), last_index=last_index, last_term=last_term,
                  current_term=journal.getCurrentTerm(), committed=committed, uncommitted=uncommitted)


def describe(command: bytes) -> str:
    """One entry in a few words: its commands counted by kind (put x3, delete x1)."""
    change = parse_request(command)
    if change is not None:
        return f"membership: {'add' if change[0] == ADD else 'remove'} {change[1]}"
    try:
        entry = unframe(command)
    except Exception:
        return "unreadable"
    if entry is None:
        return "no-op (a new leader's first entry)"
    from haqueue.core.commands import decode_batch

    _stamp, commands = decode_batch(entry)
    kinds = Counter(OPCODE_NAMES.get(c[0], f"op {c[0]}") for c in commands)
    return ", ".join(f"{name} x{count}" for name, count in kinds.items()) or "empty"
