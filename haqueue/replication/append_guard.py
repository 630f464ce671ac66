"""Keep a follower from truncating entries that do not conflict (Raft §5.3).

pysyncobj 0.3.17's AppendEntries handler deletes every entry after
`prevLogIdx` whenever the follower holds more than the message carries,
conflicting or not, then appends the message's entries. Raft truncates only
from the first entry whose term differs. The difference matters: the leader
re-sends from a lower index after a stale `reset` answer, and a re-send cut
at the batch size can carry fewer entries than the follower had, so entries
the follower already acknowledged — entries that were committed on the
strength of that acknowledgement — vanish from its journal until a later
message restores them. A whole-cluster crash in that window lost committed
deletes in the chaos lab (docs/reliability.md).

`trim` rewrites such a message, before pysyncobj sees it, into the message
Raft would have acted on: prevLogIdx moves forward over the entries the
follower already has with the same term, so pysyncobj truncates only from a
real conflict (or not at all) and appends only what is new. When the
follower has every entry of the message and more, the extra entries are kept
only if the last one belongs to the sending leader's term: by Raft's Log
Matching property the follower's whole log then matches the leader's, so
acknowledging up to it is true.

When the extra entries are of an older term, nothing proves they match the
leader's log, but nothing proves they conflict either, and they may be
committed entries this follower acknowledged to an earlier leader: cutting
them would leave a committed entry on fewer nodes than acknowledged it, and a
whole-cluster crash then could elect a node without it. Raft keeps them. So
the message handed to pysyncobj points past them (it cuts nothing), its
commit index is capped at the last entry that does match, and `ACK_THROUGH`
tells the transport to acknowledge only up to that entry; the leader's next
append then checks the extras one by one and truncates from a real conflict.
"""

from __future__ import annotations

# Set on a rewritten message: acknowledge no further than this index.
ACK_THROUGH = "haqueue_ack_through"


def trim(message: dict, log) -> dict:
    """The message to hand pysyncobj instead of `message` (possibly itself).

    `log` is the follower's journal: indexable, entries are (command, index, term).
    """
    if "transmission" in message or "prevLogIdx" not in message or not len(log):
        return message
    prev_idx = message["prevLogIdx"]
    last = log[-1]
    last_idx = last[1]
    if prev_idx == last_idx:
        return message  # the usual case: nothing here after prev, so nothing to keep or cut
    prev_term = message["prevLogTerm"]
    entries = message.get("entries") or []
    first_idx = log[0][1]
    if prev_idx is None or prev_idx < first_idx or prev_idx > last_idx:
        return message  # pysyncobj's own answer (reset) is right here
    if log[prev_idx - first_idx][2] != prev_term:
        return message  # a conflict at prev: pysyncobj answers reset

    # Walk the message's entries over the follower's log while they agree.
    keep_idx, keep_term, new_from = prev_idx, prev_term, 0
    for i, entry in enumerate(entries):
        idx, term = entry[1], entry[2]
        if idx > last_idx or log[idx - first_idx][2] != term:
            break
        keep_idx, keep_term, new_from = idx, term, i + 1
    else:
        # Every entry is already here. Anything beyond them is acknowledged
        # only when it provably matches the leader's log, and never cut
        # (see the module docstring).
        if last_idx > keep_idx:
            if last[2] == message["term"]:
                keep_idx, keep_term = last_idx, last[2]
            else:
                kept = dict(message)
                kept["prevLogIdx"], kept["prevLogTerm"], kept["entries"] = last_idx, last[2], []
                kept["commit_index"] = min(message["commit_index"], keep_idx)
                kept[ACK_THROUGH] = keep_idx
                return kept
    if keep_idx == prev_idx:
        return message
    trimmed = dict(message)
    trimmed["prevLogIdx"] = keep_idx
    trimmed["prevLogTerm"] = keep_term
    trimmed["entries"] = entries[new_from:]
    return trimmed
