"""What a killed node left on its disk: the snapshot's entries and the journal's range.

    python -m haqueue.lab.diskview DATA_DIR      # prints one JSON object

Run as its own process, on a copy of the data directory the chaos runner made
right after the kill (opening a journal cuts a torn tail and syncs: never on
the node's own files), because it imports pysyncobj, which clobbers
socket.inet_ntop for the runner's pyroute2 (topology.py says why).

The object: {"snapshot": [before_idx, last_idx] or null, "journal": [first_idx,
last_idx] or null, "journal_matches_snapshot": bool, "entries_at_risk": N,
"error": text or null}.

entries_at_risk: journal entries after the snapshot, consistent with it, that a
restart would drop. On restart pysyncobj keeps the journal only if its first two
entries are the snapshot's last two (raft_node's snapshot.align_journal cuts a
longer prefix to make them so) and otherwise starts the journal afresh from the
snapshot. That is right when the journal ends before the snapshot or disagrees
with it at the snapshot's entry (its entries there were never committed); but a
journal that holds the snapshot's last entry and more, yet cannot be lined up,
would lose those acknowledged entries (issue 16, finding 1). 0 is the only good
value.
"""

from __future__ import annotations

import json
import os
import sys


def view(data_dir: str) -> dict:
    from haqueue.replication import snapshot
    from haqueue.config.fsync_policy import FsyncPolicy
    from haqueue.replication.journal import DurableJournal

    out: dict = {"snapshot": None, "journal": None, "journal_matches_snapshot": False, "entries_at_risk": 0,
                 "error": None}
    snap_path = os.path.join(data_dir, "raft.snapshot")
    journal_path = os.path.join(data_dir, "raft.journal")
    raft_data = None
    try:
        if os.path.exists(snap_path):
            _, raft_data = snapshot.read(snap_path)
            out["snapshot"] = [raft_data[1][1], raft_data[0][1]]
        if os.path.exists(journal_path):
            journal = DurableJournal(journal_path, FsyncPolicy(interval_ms=None))
            try:
                entries = [journal[i] for i in range(len(journal))]
            finally:
                journal._destroy()  # pysyncobj's Journal has no public close
            if entries:
                out["journal"] = [entries[0][1], entries[-1][1]]
                if raft_data is not None:
                    last, before = raft_data[0], raft_data[1]
                    by_idx = {e[1]: e for e in entries}
                    out["journal_matches_snapshot"] = by_idx.get(before[1]) == before and by_idx.get(last[1]) == last
                    # Entries after the snapshot that follow on from it (the journal starts at
                    # its last entry, or right after it), but no entry before it to line up
                    # with: pysyncobj's head comparison fails and it clears the journal.
                    first, end, s = entries[0][1], entries[-1][1], last[1]
                    follows = first == s + 1 or (first == s and by_idx.get(s) == last)
                    if end > s and follows and not out["journal_matches_snapshot"]:
                        out["entries_at_risk"] = end - s
    except Exception as exc:  # reported, not raised: the runner records it with the fault
        out["error"] = f"{type(exc).__name__}: {exc}"
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m haqueue.lab.diskview DATA_DIR", file=sys.stderr)
        return 2
    print(json.dumps(view(argv[0]), sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
