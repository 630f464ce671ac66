"""The Raft engine's per-entry path, lean: what a tick for messages or a command does.

pysyncobj (0.3.17) spends most of a replicated entry's CPU outside the work the
entry needs (issue 24): its `_onTick` walks every periodic check on every tick,
and a leader ticks two or three times per entry (the submit, each follower's
acknowledgement); its `__sendAppendEntries` re-reads the log's ends through
method calls, builds a set, slices and re-slices the log, and reads the clock
twice per follower. `HotPathMixin`, mixed into ReplicatedQueue before SyncObj,
does the same work with the same effects, in fewer steps:

- `light_tick` (docs/pysyncobj.md D32): for messages and commands, the part of
  `_onTick` they need, in its order: the leader's commit index
  (`advance_commit`), applying, a heartbeat if one is due, the queued commands,
  the sockets' events. The periodic checks (election deadline, leader
  fallback, connection attempts, the one-second timer, log compaction, and
  raft_node's own) are left to full ticks: raft_node runs one whenever the last
  is FULL_PERIOD old, and the loop's timer ticks are full (on_loop.py).
- `_SyncObj__sendAppendEntries` (D34): pysyncobj's, for the usual case where
  every follower is connected or not, wants entries this log still holds, and
  they fit in one message; any other case (a snapshot to send, a big entry in
  chunks, a follower far behind, read-only nodes) goes to pysyncobj's own.
  New entries go only to the followers their commit needs (`send_appends`,
  fanout.py, D38); heartbeats and elections reach every follower.

Everything runs on the node's one thread, as pysyncobj's tick does. Like
membership.py, it reaches pysyncobj's state by its mangled names and imports
nothing of pysyncobj's (raft_node.py and the patches do).
"""

from __future__ import annotations

from haqueue.replication import fanout
from haqueue.replication.pysyncobj_patches import monotonic

_LEADER = 2  # pysyncobj's _RAFT_STATE.LEADER


class HotPathMixin:
    """Mixed into ReplicatedQueue (before SyncObj): see the module docstring."""

    deferring_sends = False  # within _checkCommandsToApply: one send after the commands (D38)

    def light_tick(self) -> bool:
        """Do what messages and commands need (module docstring); False, with
        nothing done, when only a full tick will do (the transport not ready,
        the snapshot file still to load)."""
        if not self._SyncObj__transport.ready or self._SyncObj__needLoadDumpFile:
            return False
        if self._SyncObj__raftState == _LEADER:
            self.advance_commit()
        if self._SyncObj__raftCommitIndex > self._SyncObj__raftLastApplied:
            self._SyncObj__applyLogEntries()
        if (self._SyncObj__raftState == _LEADER
                and monotonic() > self._SyncObj__newAppendEntriesTime):
            self._SyncObj__sendAppendEntries()
        self._checkCommandsToApply()
        self._poller.poll(0)
        return True

    def advance_commit(self) -> None:
        """The leader's commit index, as pysyncobj's tick computes it: the highest
        index a majority holds, if its entry is of the current term (an earlier
        term's entry commits only under one of this term, Raft 5.4.2).

        pysyncobj walks up from the commit index one entry at a time, counting the
        followers that hold each; the count only falls as the index rises, terms
        never decrease along a log, and a leader's log holds no term above its own,
        so checking the highest index a majority holds decides the same."""
        log = self._SyncObj__raftLog
        last = log[-1][1]
        commit = self._SyncObj__raftCommitIndex
        if commit < last:
            others = self._SyncObj__otherNodes
            # With this node (which holds `last`), a majority of len(others) + 1 takes
            # (len(others) + 1) // 2 followers: the index the slowest of them holds.
            needed = (len(others) + 1) // 2
            if needed:
                matches = self._SyncObj__raftMatchIndex
                held = min(sorted([matches[node] for node in others], reverse=True)[needed - 1], last)
            else:
                held = last
            if held > commit:
                first = log[0][1]
                if held >= first and log[held - first][2] == self._SyncObj__raftCurrentTerm:
                    self._SyncObj__raftCommitIndex = held
                    log.setRaftCommitIndex(held)
        self._SyncObj__leaderCommitIndex = self._SyncObj__raftCommitIndex

    def _SyncObj__sendAppendEntries(self):
        # D34: pysyncobj calls this (name-mangled) after each command it logs, for each
        # heartbeat and on election. Commands are logged in _checkCommandsToApply,
        # which sends once after them all, to the followers the commit needs (D38).
        if self.deferring_sends:
            return None  # _checkCommandsToApply sends what it logged
        return self.send_appends(everyone=True)

    def send_appends(self, everyone: bool):
        """The same messages as pysyncobj's __sendAppendEntries, for the usual case.
        Unless `everyone`, new entries go only to the followers fanout.py picks; the
        others get them with the next heartbeat, which then stays due."""
        if self._SyncObj__readonlyNodes:
            return super()._SyncObj__sendAppendEntries()
        log = self._SyncObj__raftLog
        first = log[0][1]
        last = log[-1][1]
        next_index = self._SyncObj__raftNextIndex
        connected = self._SyncObj__connectedNodes
        others = self._SyncObj__otherNodes
        limit = self._SyncObj__conf.appendEntriesBatchSizeBytes
        transport = self._SyncObj__transport
        recipients = None
        if not everyone:
            recipients = fanout.followers_now(others, connected, next_index, self._SyncObj__raftMatchIndex,
                                              transport.round_trip)
        sends = []
        for node in others:
            if node not in connected:
                sends.append((node, None, None))
                continue
            if recipients is not None and node not in recipients:
                continue
            following = next_index[node]
            if not first < following <= last + 1:
                # A snapshot to send (its entries are gone from this log), or an index
                # past this log's end (a follower's longer log, before the reset).
                return super()._SyncObj__sendAppendEntries()
            entries = log[following - first:] if following <= last else []
            if entries and sum([len(entry[0]) for entry in entries]) >= limit:
                return super()._SyncObj__sendAppendEntries()  # more than one message's worth
            sends.append((node, following, entries))
        if recipients is None:
            # A heartbeat's worth: every follower heard now. A partial send leaves the
            # heartbeat due when it was, so the followers left out catch up by then.
            self._SyncObj__newAppendEntriesTime = monotonic() + self._SyncObj__conf.appendEntriesPeriod
        term = self._SyncObj__raftCurrentTerm
        serializer = self._SyncObj__serializer
        for node, following, entries in sends:
            if following is None:
                serializer.cancelTransmisstion(node)
                continue
            if entries:
                next_index[node] = last + 1
            prev = following - 1
            transport.send(node, {
                'type': 'append_entries',
                'term': term,
                'commit_index': self._SyncObj__raftCommitIndex,
                'entries': entries,
                'prevLogIdx': prev,
                'prevLogTerm': log[prev - first][2],
            })
        return None
