"""A late acknowledgement never moves the leader's next index for a follower back (docs/pysyncobj.md D15).

pysyncobj advances a follower's next index as it sends, so several
append_entries can be in flight to one follower. Its handler of a successful
answer set the next index to what that answer acknowledged, so the answer to
an older append moved it back: the leader re-sent entries the follower had,
and the follower truncated and rewrote entries it had acknowledged (the chaos
lab's `truncating already-applied`). Here the leader holds one follower's
answers while entries keep coming, then reads them all at once, oldest
first, as after a slow link; three real in-process nodes on loopback, ticked
by hand (tests/support/ticked.py).
"""

from __future__ import annotations

from haqueue.core.commands import PUT, encode_batch
from tests.support.ticked import filter_at, ticked_cluster


def test_answers_read_late_never_move_the_next_index_back():
    with ticked_cluster() as cluster:
        leader = cluster.leader()
        slow = cluster.followers()[0].selfNode
        next_index = leader._SyncObj__raftNextIndex
        deliver = leader.transport._onMessageReceivedCallback
        held: list = []

        def hold(sender, message):
            if message.get("type") == "next_node_idx" and sender == slow:
                held.append(message)
                return False
            return True

        restore = filter_at(leader, hold)
        puts = iter(range(1_000))

        def put_then_check() -> bool:
            """One more entry; enough answers held that the older ones acknowledge less than was sent since?"""
            cluster.submit(leader, encode_batch(1_000, [(PUT, "default", 0, 0, 60_000, b"%d" % next(puts))]))
            return len([m for m in held if m.get("success")]) >= 5 and next_index[slow] > held[0]["next_node_idx"]

        cluster.run_until(put_then_check, seconds=2, what="late answers held")
        restore()
        seen = []  # per late answer: (its next_node_idx, next index before, after)
        for old in held:  # read at last, oldest first (no tick runs meanwhile: this is the tick's work)
            before = next_index[slow]
            deliver(slow, old)
            seen.append((old["next_node_idx"], before, next_index[slow]))

        # The late answers did acknowledge less than had been sent: pysyncobj alone would step back.
        assert any(acknowledged < before for acknowledged, before, _ in seen), seen
        assert all(after >= before for _, before, after in seen), seen
        cluster.run_until(cluster.caught_up, seconds=1, what="every node applying every entry")
        assert len({len(n.state.jobs) for n in cluster.nodes}) == 1
