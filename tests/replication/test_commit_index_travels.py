"""A follower learns the commit index from the next append or heartbeat (docs/pysyncobj.md D16).

pysyncobj's leader sent every follower an extra append_entries, with no
entries, each time it applied something: one more message in and one more
acknowledgement out per entry on each follower. Here the nodes are ticked by
hand in virtual time (tests/support/ticked.py) and every append_entries a
follower receives is counted.
"""

from __future__ import annotations

from haqueue.core import commands as C
from haqueue.core.commands import encode_batch
from tests.support.ticked import filter_at, ticked_cluster


def _entry(i: int) -> bytes:
    return encode_batch(1_000 + i, [(C.PUT, "default", 1024, 0, 60_000, b"job %d" % i)])


def test_each_entry_reaches_a_follower_in_one_message_and_it_applies_within_a_heartbeat():
    with ticked_cluster() as cluster:
        leader, followers, heartbeat = cluster.leader(), cluster.followers(), cluster.timing.heartbeat
        received = {f: [] for f in followers}
        restores = [filter_at(f, lambda sender, message, f=f: received[f].append(message) or True)
                    for f in followers]
        try:
            started = cluster.clock.now
            for i in range(20):  # one entry at a time, as a synchronous client makes them
                applied, error = cluster.commit(leader, _entry(i))
                assert applied is not None
            elapsed = cluster.clock.now - started
            for follower in followers:
                appends = [m for m in received[follower] if m.get("type") == "append_entries"]
                empty = [m for m in appends if not m.get("entries")]
                # Empty appends are heartbeats only, not one announcement per commit.
                assert len(empty) <= elapsed / heartbeat + 1, (len(empty), elapsed)
            # An idle leader's heartbeat carries the last commit index, and to the follower
            # the commits did not need (D38) the last entries: every follower applies them.
            cluster.run_until(lambda: all(f.raftLastApplied == leader.raftCommitIndex for f in followers),
                              seconds=heartbeat + 0.05, what="the followers applying the last entry")
            for follower in followers:  # each entry reached each follower once
                carrying = [m for m in received[follower] if m.get("type") == "append_entries" and m.get("entries")]
                assert sum(len(m["entries"]) for m in carrying) == 20
            for follower in followers:
                assert follower.state.tube("default").ready_count == 20
        finally:
            for restore in restores:
                restore()
