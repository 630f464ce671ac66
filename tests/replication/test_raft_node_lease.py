"""The read lease: only this term's acknowledged appends extend it, timed from their send.

A leader answers reads and hands out reservations only while the lease holds
(ReplicatedQueue.read_lease_valid). These tests run three real in-process
nodes on loopback and filter what the leader receives where pysyncobj
receives it (raft_nodes.py).
"""

from __future__ import annotations

import threading
import time

from haqueue.core.commands import encode_batch
from tests.replication.raft_nodes import running_cluster, wait_for


def _filter_at(node, keep):
    """Deliver to `node` only the messages for which keep(sender, message) holds."""
    transport = node._SyncObj__transport
    deliver = transport._onMessageReceivedCallback

    def filtered(sender, message):
        if keep(sender, message):
            deliver(sender, message)

    transport._onMessageReceivedCallback = filtered
    return lambda: setattr(transport, "_onMessageReceivedCallback", deliver)


def test_messages_other_than_acknowledgements_do_not_extend_the_lease():
    # A cut that drops only the followers' answers to the leader's appends:
    # their keepalives (and anything else) still arrive. The leader may be
    # deposed any moment; it must stop answering reads.
    with running_cluster() as nodes:
        leader = next(n for n in nodes if n._isLeader())
        assert wait_for(leader.read_lease_valid, 2)
        heal = _filter_at(leader, lambda sender, m: m.get("type") != "next_node_idx")
        try:
            assert wait_for(lambda: not leader.read_lease_valid(), 1)
            heard = leader.transport.peers_heard_within(0.2)
            assert heard == 2  # still hearing both followers: keepalives flow
        finally:
            heal()
        assert wait_for(leader.read_lease_valid, 2)


def test_acknowledgements_read_late_count_from_when_their_append_was_sent():
    # A leader whose thread stalls reads its followers' answers only after
    # the stall: they answer appends sent long ago and prove nothing about now.
    with running_cluster() as nodes:
        leader = next(n for n in nodes if n._isLeader())
        assert wait_for(leader.read_lease_valid, 2)
        transport = leader._SyncObj__transport
        deliver = transport._onMessageReceivedCallback
        held: list = []
        after_late: list = []
        stalled = threading.Event()  # set: the stall began; answers since are not kept
        late = threading.Event()  # set: hand the held answers over, then drop new ones

        def hold_then_replay(sender, message):  # runs in the tick thread
            if message.get("type") != "next_node_idx":
                return True
            if late.is_set() and held:
                for old in held:
                    deliver(*old)
                held.clear()
                after_late.append(leader.read_lease_valid())
            elif not stalled.is_set():
                held.append((sender, message))
            return False

        heal = _filter_at(leader, hold_then_replay)
        try:
            assert wait_for(lambda: len(held) >= 2, 1)
            stalled.set()
            assert wait_for(lambda: not leader.read_lease_valid(), 1)
            time.sleep(0.3)  # the stall itself (the fault), not synchronisation
            late.set()
            assert wait_for(lambda: after_late, 2)
        finally:
            heal()
        assert after_late == [False]
        # Fresh appends, fresh answers: the lease comes back.
        assert wait_for(leader.read_lease_valid, 2)


def test_an_entry_bigger_than_a_message_chunk_reaches_the_followers_at_once(caplog):
    # pysyncobj chunks entries of 64 KiB and more and marks the last chunk by
    # the raw length, not the pickled one; binary bodies expand when pickled,
    # so followers got a premature last chunk, failed, and waited for a resend.
    with running_cluster() as nodes:
        leader = next(n for n in nodes if n._isLeader())
        body = bytes(range(128, 256)) * 1200  # 150 KiB, every byte >= 0x80
        done = threading.Event()
        leader.submit(encode_batch(int(time.time() * 1000), [(1, "default", 0, 0, 60_000, body)]),
                      lambda result, error: done.set())
        assert done.wait(5)
        target = leader.raftLastApplied
        assert wait_for(lambda: all(n.raftLastApplied >= target for n in nodes), 2)
        assert all(len(n.state.jobs) == 1 for n in nodes)
    assert not [r for r in caplog.records if "raft tick failed" in r.getMessage()]


def test_a_lone_node_always_holds_its_lease(tmp_path):
    from haqueue.replication.fsync_policy import NEVER
    from haqueue.replication.raft_node import ReplicatedQueue

    node = ReplicatedQueue(f"127.0.0.1:{_port()}", [], data_dir=None, policy=NEVER)
    try:
        assert node.read_lease_valid()
    finally:
        node.stop()


def _port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_leader_whose_thread_is_stuck_fails_the_leader_check_while_it_still_thinks_it_leads():
    # An fsync stalled for seconds holds the tick thread: pysyncobj cannot step
    # the leader down, the others elect a new one. The leader check (what
    # keepalived asks, admin /leader) must fail so the VIP moves.
    with running_cluster() as nodes:
        leader = next(n for n in nodes if n._isLeader())
        assert wait_for(lambda: leader.followed_within(leader.leader_fallback), 2)
        release = threading.Event()
        stuck = threading.Event()

        def stall_once(sender, message):  # runs in the leader's tick thread
            if not stuck.is_set():
                stuck.set()
                release.wait(5)  # the stall: this thread does nothing else meanwhile
            return True

        heal = _filter_at(leader, stall_once)
        try:
            assert stuck.wait(2)
            others = [n for n in nodes if n is not leader]
            assert wait_for(lambda: any(n._isLeader() for n in others), 3), "no new leader"
            # Within the leader fallback of its last answered append:
            assert wait_for(lambda: not leader.followed_within(leader.leader_fallback), 2)
            assert leader._isLeader()  # though it cannot know yet
        finally:
            release.set()
            heal()
