"""Replica: the replicated queue as the server and the command line see it.

The whole seam between the protocol front ends and Raft. A front end builds
entries (haqueue/core/commands.py encodes them), submits them here, and learns
what applying each did: its results and its effects, as one value
(`haqueue.core.effects.Applied`), or None when the outcome is unknown
(leadership lost, the node stopping), in which case the front end must not
guess an answer. It reads the queue state, asks whether this node leads
(`is_leader`, `term`) and whether its read lease holds, and hears of role
changes and fatal errors through the two callbacks it passes in. One thread
does all of it: a replica is started on the server's event loop and ticks
there (on_loop.py; a lone node's submit applies at once, lone.py), so entries
are applied, and callbacks run, between the loop's other callbacks; nobody
reads the state half-way through an entry, and there is no lock.

pysyncobj stays behind this class: raft_node.ReplicatedQueue is its only
subclass, and the attributes pysyncobj names (raftCurrentTerm, _isLeader,
raftCommitIndex...) are read here and nowhere else.
"""

from __future__ import annotations

import asyncio
import sys
import time
from typing import Any, Callable, Protocol, runtime_checkable

from haqueue.config.replication import ReplicationSettings
from haqueue.core.effects import Applied
from haqueue.replication.snapshot import WRITER_NICENESS  # background writers' niceness (server/backup.py)
# Whether this node was removed from the group, for server/removal_watch.py (pure).
from haqueue.replication.removal import REMOVED_EXIT, message as removal_message, operator_of, removed_by

__all__ = ["MembershipRefused", "REMOVED_EXIT", "Replica", "ReplicaLike", "WRITER_NICENESS", "open_replica",
           "operator_of", "removal_message", "removed_by", "startup_errors"]


class MembershipRefused(Exception):
    """A membership change the leader will not make (membership.py); str() is one line."""


OnApplied = Callable[[Applied | None], None]


@runtime_checkable
class ReplicaLike(Protocol):
    """What a front end may use of a replica: Replica and lone.LoneReplica both are one."""

    observations: Any  # observed.RaftObservations
    leader_fallback: float

    @property
    def state(self) -> Any: ...  # core.state.QueueState, applied on the loop's thread
    @property
    def journal(self) -> Any: ...  # journal.DurableJournal, or None in memory
    @property
    def term(self) -> int: ...
    @property
    def ticked_at(self) -> float: ...  # when the node last ticked (time.monotonic())
    def start(self) -> None: ...
    def stop(self) -> None: ...
    def submit(self, entry: bytes, on_applied: OnApplied) -> None: ...
    def is_leader(self) -> bool: ...
    def leads_in(self, term: int) -> bool: ...
    def read_lease_valid(self) -> bool: ...
    def is_followed(self) -> bool: ...
    def status(self) -> dict: ...
    def peers_connected(self) -> dict[str, bool]: ...
    def follower_lag(self) -> dict[str, dict]: ...


def preload(has_partners: bool, data_dir: str | None = None) -> None:
    """Import what `open_replica` will need now: `serve -u` drops privileges
    before the replica opens, and the new user may not be able to read the
    interpreter's files (a Python installed under /root)."""
    from haqueue.replication.member_dir import is_member_dir

    if has_partners or is_member_dir(data_dir):  # a member alone still runs Raft (open_replica)
        import haqueue.replication.raft_node  # noqa: F401
    else:
        import haqueue.replication.lone  # noqa: F401
    startup_errors()


def _term_of(role: str, current_term: int) -> int:
    """The term a role change is about. pysyncobj announces a candidate before it raises its
    term for the election (syncobj.py: __setState, then __setCurrentTerm(term + 1)), so a
    candidate stands for the next term; the logs said "candidate (term 0)" on every start."""
    return current_term + 1 if role == "candidate" else current_term


def open_replica(settings: ReplicationSettings, *, on_role_change: Callable[[str, int], None],
                 on_fatal: Callable[[str], None]) -> ReplicaLike:
    """This node's replica: a Raft member if it has partners, else a cluster of one
    (lone.py), which needs no Raft and never imports pysyncobj."""
    from haqueue.replication.member_dir import is_member_dir

    if not settings.partners and not is_member_dir(settings.data_dir):
        from haqueue.replication.lone import LoneReplica

        return LoneReplica(settings, on_role_change=on_role_change, on_fatal=on_fatal)
    return Replica(settings, on_role_change=on_role_change, on_fatal=on_fatal)


class Replica:
    """A member of a Raft group (pysyncobj, behind raft_node.ReplicatedQueue)."""

    def __init__(self, settings: ReplicationSettings, *, on_role_change: Callable[[str, int], None],
                 on_fatal: Callable[[str], None]) -> None:
        from haqueue.replication.raft_node import FAIL_SUCCESS, ReplicatedQueue

        self._succeeded = FAIL_SUCCESS
        self._raft = raft = ReplicatedQueue(
            settings,
            on_role_change=lambda role: on_role_change(role, _term_of(role, raft.raftCurrentTerm)),
            on_fatal=on_fatal,
        )
        self.observations = raft.observations  # elections, snapshots, commit times (observed.py)
        self.leader_fallback = raft.leader_fallback

    # ------------------------------------------------------------ lifecycle
    def start(self) -> None:
        """Start ticking on the running event loop (on_loop.py): call it from a coroutine."""
        self._raft.start(asyncio.get_running_loop())

    def stop(self) -> None:
        """Stop ticking and release the node's files (from the loop's thread, if it ticks on one)."""
        self._raft.stop()

    # ---------------------------------------------------------------- state
    @property
    def state(self):
        """The queue state (read it on the loop's thread, where entries are applied)."""
        return self._raft.state

    @property
    def journal(self):
        """This node's DurableJournal (sizes, fsync times), or None in memory."""
        return self._raft.journal

    # ---------------------------------------------------------------- write
    def submit(self, entry: bytes, on_applied: OnApplied) -> None:
        """Append an encoded entry; `on_applied` runs on the loop's thread
        once it is applied here, with its Applied, or with None if its outcome
        is unknown."""

        succeeded = self._succeeded

        def done(applied, error) -> None:
            on_applied(applied if error == succeeded else None)

        self._raft.submit(entry, done)

    # ----------------------------------------------------------- leadership
    def is_leader(self) -> bool:
        return self._raft._isLeader()

    @property
    def term(self) -> int:
        return self._raft.raftCurrentTerm

    @property
    def ticked_at(self) -> float:
        """When the node last finished a tick (server/turns.py yields to its ticker)."""
        return self._raft.ticked_at

    def tick_now(self) -> None:
        """Tick Raft now, if it ticks on the loop (server/turns.py: an overdue tick goes first)."""
        ticker = self._raft._ticker
        if ticker is not None:
            ticker.tick_now()

    def leads_in(self, term: int) -> bool:
        """Still the leader, and of this term (no re-election in between)?"""
        raft = self._raft
        return raft._isLeader() and raft.raftCurrentTerm == term

    def read_lease_valid(self) -> bool:
        """May this leader answer a read or hand out a reservation now? (docs/pysyncobj.md D12)"""
        return self._raft.read_lease_valid()

    def is_followed(self) -> bool:
        """Leader, and a majority acknowledged its appends within the leader
        fallback: what the VIP's health check asks (raft_node.followed_within)."""
        return self._raft.followed_within(self.leader_fallback)

    # ----------------------------------------------------------- membership
    def members(self) -> list[str]:
        """Every member's Raft address as this node knows it now (membership.py)."""
        return self._raft.members()

    def change_members(self, op: str, address: str, done: Callable[[str | None], None],
                       info: dict | None = None) -> None:
        """On the leader: add ("add") or remove ("rem") one member; `done(error)` once
        committed (None) or failed; raises membership.MembershipRefused at once.
        `info`: an added node's id, host, admin and client ports, carried in the entry."""
        self._raft.change(op, address, done, info)

    def removed_by_entry(self) -> bool:
        """Has this node applied a committed entry removing itself? (removal.py)"""
        return self._raft.removed_by_entry

    def hand_off(self, done: Callable[[str | None, str | None], None]) -> None:
        """On the leader: hand leadership to a follower once one holds its whole log,
        new entries held meanwhile; `done(target, error)` on the loop (membership.py).
        Raises membership.MembershipRefused at once if there is nobody to hand off to."""
        self._raft.hand_off(done)

    # --------------------------------------------------------------- status
    def status(self) -> dict:
        """Role, term, leader, commit and applied index, log length, quorum, members
        (and whether their last change is settled, and what additions said of them)."""
        status = self._raft.status()
        status["members_settled"] = self._raft.members_settled()
        info = self._raft.member_info()
        if info:
            status["member_info"] = info
        return status

    def peers_connected(self) -> dict[str, bool]:
        """Each peer's Raft address, and whether its link is up."""
        return self._raft.peers_connected()

    def follower_lag(self) -> dict[str, dict]:
        """On the leader: each follower's lag in entries and seconds, by Raft address; else {}."""
        raft = self._raft
        matches = raft.peer_match_indexes()
        now, commit = time.monotonic(), raft.raftCommitIndex
        return {peer: {"entries": max(0, commit - match), "seconds": self.observations.lag_seconds(match, now)}
                for peer, match in sorted(matches.items())}


def startup_errors() -> tuple[type[BaseException], ...]:
    """What opening a replica raises for a journal, snapshot or log this node
    cannot trust: the command line reports them in one line and exits non-zero."""
    from haqueue.core.commands import LogFormatError
    from haqueue.replication.journal import JournalError
    from haqueue.replication.snapshot import SnapshotError

    errors = (JournalError, SnapshotError, LogFormatError)
    if "pysyncobj" in sys.modules:  # a lone node never loads it
        from haqueue.replication.pysyncobj_patches import SyncObjException

        errors += (SyncObjException,)
    return errors
