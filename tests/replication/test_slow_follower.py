"""Followers on a slow disk keep their leader (issue 23; docs/pysyncobj.md D3, D26).

A follower acknowledges an entry only once it is on its disk; on a disk doing
one write a second its acknowledgements come that late. Its loop must not
wait for the sync (it runs in the journal's worker), so its keepalives still
flow; its leader counts a follower that acknowledged within SLOW_ACK and
sends keepalives at the leader's term, for its leader fallback and its leader
check, never for its read lease. Three nodes on disk with -f0, ticked by hand
in virtual time (tests/support/ticked.py); the followers' fdatasync is made
slow in virtual time: a sync takes `seconds` of the virtual clock.
"""

from __future__ import annotations

import threading
import time

from haqueue.core import commands as C
from haqueue.core.commands import encode_batch
from haqueue.config.fsync_policy import DURABLE
from haqueue.replication.transport import KEEPALIVE, SLOW_ACK
from tests.support.ticked import filter_at, ticked_cluster

REAL_TIME_GUARD = 120.0  # a sync never waits longer in real time (the test fails rather than hangs)


class SlowDisk:
    """Each fdatasync of the given nodes' journals takes `seconds` of virtual time (None:
    until `release()`); a sync called on the ticking thread (a node's loop) is noted and
    not slowed (it could not end: the virtual clock moves only between ticks)."""

    def __init__(self, cluster, nodes, seconds: float | None) -> None:
        self.clock = cluster.clock
        self.seconds = seconds
        self._released = threading.Event()
        self.on_loop: list[str] = []  # addresses of nodes whose loop ran a slowed sync
        self.syncs = 0
        loop_thread = threading.current_thread()
        for node in nodes:
            journal = node.journal

            def slow(fd, node=node, real=journal._fdatasync):
                if threading.current_thread() is loop_thread:
                    self.on_loop.append(node.selfNode.address)
                elif self.seconds is None:
                    self._released.wait(REAL_TIME_GUARD)
                else:
                    until, started = self.clock.now + self.seconds, time.monotonic()
                    while self.clock.now < until and time.monotonic() - started < REAL_TIME_GUARD:
                        if self._released.wait(0.002):
                            break
                self.syncs += 1
                real(fd)

            journal._fdatasync = slow

    def release(self) -> None:
        self._released.set()


def _put(i: int) -> bytes:
    return encode_batch(i, [(C.PUT, "default", 1, 0, 60_000, b"x")])


def _keep_writing(cluster, leader, seconds: float, check=lambda: None) -> list:
    """Submit an entry every 0.1 s of virtual time for `seconds`, ticking; `check` after each round."""
    outcomes = []
    every = cluster.rounds_in(0.1)
    for r in range(cluster.rounds_in(seconds)):
        if r % every == 0 and leader._isLeader():
            outcomes.append(cluster.submit(leader, _put(r)))
        cluster.round()
        check()
    return outcomes


def test_followers_on_a_disk_doing_one_write_a_second_keep_their_leader_and_send_keepalives(tmp_path):
    with ticked_cluster(data_root=str(tmp_path), policy=DURABLE) as cluster:
        leader, followers = cluster.leader(), cluster.followers()
        term = leader.raftCurrentTerm
        assert cluster.commit(leader, _put(0))[0] is not None
        keepalives: list = []
        restore = filter_at(leader, lambda sender, message: (
            message.get("type") != KEEPALIVE["type"] or keepalives.append(message.get("term")) or True))
        disk = SlowDisk(cluster, followers, seconds=1.0)
        try:
            # 3 s of writes, ten a second, each follower's disk doing one sync a second: the
            # fallback (0.6 s) passes many times between two acknowledgements.
            outcomes = _keep_writing(cluster, leader, 3.0, check=lambda: (
                assert_leads(leader, term), assert_followed(leader)))
            cluster.run_until(lambda: all(outcomes), seconds=3.0, what="every entry's outcome")
        finally:
            disk.release()
            restore()
        assert disk.on_loop == [], f"a follower synced on its loop: {sorted(set(disk.on_loop))}"
        assert disk.syncs >= 2 * 2, disk.syncs  # both followers' disks synced, slowly, all along
        # The followers' loops went on: their keepalives reached the leader, at its term.
        assert len(keepalives) >= 2 * 3 / cluster.timing.heartbeat / 2 and set(keepalives) == {term}, keepalives
        assert len(outcomes) >= 20 and all(applied is not None and applied.results[0][0] == "INSERTED"
                                           for (applied, _), in outcomes), outcomes[:3]
        assert leader._isLeader() and leader.raftCurrentTerm == term


def assert_leads(leader, term) -> None:
    assert leader._isLeader() and leader.raftCurrentTerm == term, "the leader stepped down"


def assert_followed(leader) -> None:
    assert leader.followed_within(leader.leader_fallback), "the leader check dropped a slow majority"


def test_a_follower_silent_past_slow_ack_no_longer_counts_and_the_read_lease_never_counts_keepalives(tmp_path):
    with ticked_cluster(data_root=str(tmp_path), policy=DURABLE) as cluster:
        leader, followers = cluster.leader(), cluster.followers()
        term = leader.raftCurrentTerm
        assert cluster.commit(leader, _put(0))[0] is not None
        disk = SlowDisk(cluster, followers, seconds=None)  # the syncs never end while we look
        try:
            outcome = cluster.submit(leader, _put(1))
            cluster.run(seconds=1.0)  # past the fallback: kept by the keepalives alone...
            assert_leads(leader, term)
            assert_followed(leader)
            assert not leader.read_lease_valid()  # ...which never extend the read lease
            assert outcome == []  # nothing acknowledged: nothing committed
            # No acknowledgement for SLOW_ACK: the keepalives no longer count; it steps down.
            stepped = cluster.run_until(lambda: not leader._isLeader(), seconds=SLOW_ACK + 1.0,
                                        what="the leader stepping down")
            assert stepped >= SLOW_ACK - 1.0 - 2 * cluster.step
        finally:
            disk.release()


def test_keepalives_of_another_term_do_not_keep_a_leader(tmp_path):
    with ticked_cluster(data_root=str(tmp_path), policy=DURABLE) as cluster:
        leader, followers = cluster.leader(), cluster.followers()
        term = leader.raftCurrentTerm
        assert cluster.commit(leader, _put(0))[0] is not None

        def older_term(sender, message):
            if message.get("type") == KEEPALIVE["type"]:
                message["term"] = term - 1  # as a follower of another leader would say
            return True

        restore = filter_at(leader, older_term)
        disk = SlowDisk(cluster, followers, seconds=None)
        try:
            cluster.submit(leader, _put(1))
            # Within the fallback and a little more: no SLOW_ACK grace for such keepalives.
            cluster.run_until(lambda: not leader._isLeader(), seconds=leader.leader_fallback + 0.5,
                              what="the leader stepping down")
        finally:
            disk.release()
            restore()
