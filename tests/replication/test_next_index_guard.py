"""A late acknowledgement never moves the leader's next index for a follower back (raft_node point 15).

pysyncobj advances a follower's next index as it sends, so several
append_entries can be in flight to one follower. Its handler of a successful
answer set the next index to what that answer acknowledged, so the answer to
an older append moved it back: the leader re-sent entries the follower had,
and the follower truncated and rewrote entries it had acknowledged (the chaos
lab's `truncating already-applied`). Here the leader holds one follower's
answers while entries keep coming, then reads them all at once, oldest
first, as after a slow link; three real in-process nodes on loopback.
"""

from __future__ import annotations

import threading
import time

from haqueue.core.commands import encode_batch
from tests.replication.raft_nodes import running_cluster, wait_for


def test_answers_read_late_never_move_the_next_index_back():
    with running_cluster() as nodes:
        leader = next(n for n in nodes if n._isLeader())
        slow = next(n for n in nodes if n is not leader).selfNode
        transport = leader._SyncObj__transport
        next_index = leader._SyncObj__raftNextIndex
        deliver = transport._onMessageReceivedCallback
        held: list = []
        seen: list = []  # per late answer: (its next_node_idx, next index before, after)
        hand_over = threading.Event()

        def hold_then_hand_over(sender, message):  # runs in the tick thread
            answer = message.get("type") == "next_node_idx" and sender == slow
            if answer and not hand_over.is_set():
                held.append(message)
                return
            if hand_over.is_set() and held:
                late, held[:] = list(held), []
                for old in late:
                    before = next_index[slow]
                    deliver(slow, old)
                    seen.append((old["next_node_idx"], before, next_index[slow]))
            deliver(sender, message)

        transport._onMessageReceivedCallback = hold_then_hand_over
        try:
            def put(i: int) -> None:
                leader.submit(encode_batch(int(time.time() * 1000), [(1, "default", 0, 0, 60_000, b"%d" % i)]),
                              lambda applied, error: None)

            i = 0
            deadline = time.monotonic() + 5
            # Enough answers held that the older ones acknowledge less than was sent since.
            while (len([m for m in held if m.get("success")]) < 5 or next_index[slow] <= held[0]["next_node_idx"]) \
                    and time.monotonic() < deadline:
                put(i)
                i += 1
                time.sleep(0.005)
            assert len([m for m in held if m.get("success")]) >= 5, "the slow follower's answers were not held"
            hand_over.set()
            put(i)  # any message now makes the tick thread hand the held answers over
            assert wait_for(lambda: seen, 2)
        finally:
            transport._onMessageReceivedCallback = deliver

        # The late answers did acknowledge less than had been sent: pysyncobj alone would step back.
        assert any(acknowledged < before for acknowledged, before, _ in seen), seen
        assert all(after >= before for _, before, after in seen), seen
        everyone = leader.raftLastApplied
        assert wait_for(lambda: all(n.raftLastApplied >= everyone for n in nodes), 5)
        assert len({len(n.state.jobs) for n in nodes}) == 1
