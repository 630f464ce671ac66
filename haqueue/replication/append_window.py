"""One append in flight per follower: under load, an append carries every entry made meanwhile.

pysyncobj's leader sends each follower an append_entries for every entry as it
is appended, advancing the follower's next index as it sends (pipelined), and
each follower acknowledges each one: per entry, two messages per follower, each
decoded, handled and answered by a process sharing the core with the others.
`AppendWindow` keeps at most one append that carries entries in flight to each
follower (docs/pysyncobj.md D31):

- When a follower has such an append unanswered, a new entry is not sent to it
  at once: pysyncobj's send (`SyncObj.__sendAppendEntries`) runs with that
  follower left out (`hide`).
- Once it answers (its match index reaches what was sent, or a refusal moved its
  next index back) the hold ends, and after the tick the entries made meanwhile
  leave in one append (`after_tick`), sent to it alone.
- A hold lasts at most one `heartbeat` from the send: an acknowledgement lost
  (dropped with a change of term, a broken link) costs at most a heartbeat, as
  it did before, when the heartbeat's append asked again.
- A hold belongs to one term: a new leader starts with none.

Nothing waits when the cluster is idle: a single synchronous client's entry goes
out at once (no append is in flight), and the entry that was held leaves as soon
as the acknowledgement is read, in the same tick. Entries still reach a majority
in order and pysyncobj still decides what to send from its next and match
indexes; only when to send changes. Pure bookkeeping on pysyncobj's state read
by raft_node.py; no socket, no clock of its own (times are passed in).
"""

from __future__ import annotations


class AppendWindow:
    def __init__(self, heartbeat: float) -> None:
        self.heartbeat = heartbeat
        # follower -> (last index the append in flight carried, when it was sent, term)
        self._held: dict = {}

    def held(self, now: float, term: int, match_index: dict, next_index: dict, connected) -> set:
        """The followers not to send new entries to now; the holds that ended are dropped."""
        if not self._held:
            return set()
        holding = set()
        for node, (upto, sent_at, held_term) in list(self._held.items()):
            if (held_term != term or now - sent_at >= self.heartbeat or node not in connected
                    or match_index.get(node, 0) >= upto or next_index.get(node, 0) <= upto):
                del self._held[node]  # answered, refused (next index moved back), or overdue
            else:
                holding.add(node)
        return holding

    def sent(self, node, upto: int, now: float, term: int) -> None:
        """An append carrying entries through `upto` has just left for `node`."""
        self._held[node] = (upto, now, term)

    def first_sent(self, nodes) -> float:
        """When the earliest of the holds on `nodes` began."""
        return min(self._held[node][1] for node in nodes)

    def clear(self) -> None:
        self._held.clear()


def send_appends(raft, window: AppendWindow, send_all, now: float, only=None) -> None:
    """Run pysyncobj's `send_all` (its __sendAppendEntries, bound) for the followers not
    held, or for `only` (a set of followers): the others are hidden from its loop over
    the group for the call. Then hold each follower the call sent new entries to."""
    term = raft.raftCurrentTerm
    next_index = raft._SyncObj__raftNextIndex
    others = raft._SyncObj__otherNodes
    held = window.held(now, term, raft._SyncObj__raftMatchIndex, next_index, raft._SyncObj__connectedNodes)
    if only is not None:
        held = others - only
    if held and not (others - held):
        return  # nothing to send to anyone now
    before = {node: next_index.get(node) for node in others if node not in held}
    if held:
        # pysyncobj's send loops over `__otherNodes | __readonlyNodes`; the held ones
        # sit out this call only. The call sets its heartbeat timer a heartbeat from
        # now; a held follower's is due earlier, a heartbeat after its own last send
        # (and a send to some followers only leaves the others' as it was).
        heartbeat_due = raft._SyncObj__newAppendEntriesTime
        raft._SyncObj__otherNodes = others - held
        try:
            send_all()
        finally:
            raft._SyncObj__otherNodes = others
            if only is not None:
                raft._SyncObj__newAppendEntriesTime = heartbeat_due
            else:
                raft._SyncObj__newAppendEntriesTime = min(raft._SyncObj__newAppendEntriesTime,
                                                          window.first_sent(held) + window.heartbeat)
    else:
        send_all()
    for node, was in before.items():
        now_next = next_index.get(node)
        if now_next is not None and was is not None and now_next > was:
            window.sent(node, now_next - 1, now, term)


def release(raft, window: AppendWindow, send_all, now: float) -> None:
    """After a tick: the followers whose hold ended and that have entries waiting get them now."""
    if not window._held:
        return
    term = raft.raftCurrentTerm
    next_index = raft._SyncObj__raftNextIndex
    before = set(window._held)
    still = window.held(now, term, raft._SyncObj__raftMatchIndex, next_index, raft._SyncObj__connectedNodes)
    last = raft._SyncObj__raftLog[-1][1]
    due = {node for node in before - still
           if node in raft._SyncObj__connectedNodes and next_index.get(node, last + 1) <= last}
    if due:
        send_appends(raft, window, send_all, now, only=due)
