"""The read lease: only this term's acknowledged appends extend it, timed from their send.

A leader answers reads and hands out reservations only while the lease holds
(ReplicatedQueue.read_lease_valid). These tests run three real in-process
nodes on loopback, ticked by hand in virtual time (tests/support/ticked.py),
and filter what the leader receives where pysyncobj receives it.
"""

from __future__ import annotations

from haqueue.core.commands import PUT, encode_batch
from tests.support.ticked import filter_at, ticked_cluster

STAMP = 1_700_000_000_000


def test_messages_other_than_acknowledgements_do_not_extend_the_lease():
    # A cut that drops only the followers' answers to the leader's appends:
    # their keepalives (and anything else) still arrive. The leader may be
    # deposed any moment; it must stop answering reads.
    with ticked_cluster() as cluster:
        leader, timing = cluster.leader(), cluster.timing
        cluster.run_until(leader.read_lease_valid, seconds=1, what="the lease")
        restore = filter_at(leader, lambda sender, m: m.get("type") != "next_node_idx")
        cluster.run_until(lambda: not leader.read_lease_valid(), seconds=2 * timing.hear_window,
                          what="the lease lost without acknowledgements")
        assert leader.transport.peers_heard_within(timing.hear_window) == 2  # keepalives still flow
        restore()
        cluster.run_until(leader.read_lease_valid, seconds=1, what="the lease back")


def test_acknowledgements_read_late_count_from_when_their_append_was_sent():
    # A leader whose thread stalls reads its followers' answers only after
    # the stall: they answer appends sent long ago and prove nothing about now.
    with ticked_cluster() as cluster:
        leader, timing = cluster.leader(), cluster.timing
        cluster.run_until(leader.read_lease_valid, seconds=1, what="the lease")
        deliver = leader.transport._onMessageReceivedCallback
        held: list = []
        holding = [True]

        def hold(sender, message):
            if message.get("type") != "next_node_idx":
                return True
            if holding[0]:
                held.append((sender, message))
            return False  # held, or dropped once the stall began

        restore = filter_at(leader, hold)
        cluster.run_until(lambda: len(held) >= 2, seconds=1, what="two answers held")
        holding[0] = False
        cluster.run_until(lambda: not leader.read_lease_valid(), seconds=1, what="the lease lost")
        cluster.run(seconds=timing.hear_window)  # the stall: even the held answers' appends are old now
        for sender, message in held:  # read at last (no tick runs meanwhile: this is the tick's work)
            deliver(sender, message)
        assert not leader.read_lease_valid(), "answers to old appends renewed the lease"
        restore()
        # Fresh appends, fresh answers: the lease comes back.
        cluster.run_until(leader.read_lease_valid, seconds=1, what="the lease back")


def test_an_entry_bigger_than_a_message_chunk_reaches_the_followers_at_once():
    # pysyncobj chunks entries of 64 KiB and more and marks the last chunk by
    # the raw length, not the pickled one; binary bodies expand when pickled,
    # so followers got a premature last chunk, failed, and waited for a resend.
    with ticked_cluster() as cluster:
        leader = cluster.leader()
        body = bytes(range(128, 256)) * 1200  # 150 KiB, every byte >= 0x80
        applied, error = cluster.commit(leader, encode_batch(STAMP, [(PUT, "default", 0, 0, 60_000, body)]))
        assert applied is not None
        # Two heartbeats: the first append carries it, whole.
        cluster.run_until(cluster.caught_up, seconds=2 * cluster.timing.heartbeat, what="the followers applying it")
        assert all(len(n.state.jobs) == 1 for n in cluster.nodes)


def test_a_leader_whose_thread_is_stuck_fails_the_leader_check_while_it_still_thinks_it_leads():
    # An fsync stalled for seconds holds the node's loop, where it ticks: pysyncobj cannot step
    # the leader down, the others elect a new one. The leader check (what
    # keepalived asks, admin /leader) must fail so the VIP moves.
    with ticked_cluster() as cluster:
        leader = cluster.leader()
        cluster.run_until(lambda: leader.followed_within(leader.leader_fallback), seconds=1, what="followed")
        cluster.paused.add(leader)  # its ticks are stuck: it does nothing while time passes
        others = [n for n in cluster.nodes if n is not leader]
        cluster.run_until(lambda: any(n._isLeader() for n in others), seconds=3, what="a new leader")
        # Within the leader fallback of its last answered append:
        cluster.run_until(lambda: not leader.followed_within(leader.leader_fallback),
                          seconds=leader.leader_fallback, what="the stuck leader failing the check")
        assert leader._isLeader()  # though it cannot know yet
