"""Raft on the event loop (replication/on_loop.py): the poller, and three nodes ticked by one loop.

The poller is pysyncobj's interface on an epoll instance, tested with real
socket pairs: what it reports, what it forgets, a descriptor closed without
unsubscribing and its number reused. The cluster is three real
ReplicatedQueue nodes on loopback, each started on the same asyncio loop (as
each server starts its own), committing real entries: nothing of Raft runs
in a thread of its own, and an entry's outcome arrives on the loop's thread.
"""

from __future__ import annotations

import asyncio
import socket
import threading

import pytest
import uvloop

from haqueue.core import commands as C
from haqueue.core.commands import encode_batch
from haqueue.replication import raft_node  # noqa: F401  (installs the patches: the poller below is pysyncobj's)
from haqueue.config.fsync_policy import NEVER
from haqueue.config.replication import ReplicationSettings
from haqueue.replication.on_loop import ARMED_SOON, REARM_LATER, REST_AFTER, EpollPoller, LoopTicker
from haqueue.replication.raft_node import ReplicatedQueue
from tests.support.ticked import free_ports

READ, WRITE, ERROR = 1, 2, 4


def test_the_poller_reports_readiness_as_pysyncobj_names_it_and_forgets_what_is_unsubscribed():
    poller = EpollPoller()
    a, b = socket.socketpair()
    try:
        seen = []
        poller.subscribe(a.fileno(), lambda fd, mask: seen.append((fd, mask)), READ | ERROR)
        poller.poll(0)
        assert seen == [] and poller.dispatched == 0  # nothing to read yet
        b.send(b"x")
        poller.poll(0)
        assert seen == [(a.fileno(), READ)] and poller.dispatched == 1
        seen.clear()
        poller.subscribe(a.fileno(), lambda fd, mask: seen.append((fd, mask)), READ | WRITE | ERROR)  # a modify
        poller.poll(0)
        assert seen == [(a.fileno(), READ | WRITE)]
        seen.clear()
        poller.unsubscribe(a.fileno())
        poller.poll(0)
        assert seen == [] and poller.dispatched == 0
        poller.unsubscribe(a.fileno())  # twice: harmless, as pysyncobj may do
    finally:
        a.close()
        b.close()
        poller.close()


def test_a_descriptor_closed_without_unsubscribing_can_be_subscribed_again_when_its_number_returns():
    poller = EpollPoller()
    first, peer = socket.socketpair()
    try:
        number = first.fileno()
        poller.subscribe(number, lambda fd, mask: None, READ)
        first.close()  # epoll drops a closed descriptor by itself
        peer.close()
        again, other = socket.socketpair()  # the lowest free numbers: one of them is `number`
        try:
            if other.fileno() == number:
                again, other = other, again
            assert again.fileno() == number, "the kernel did not hand the number out again"
            seen = []
            poller.subscribe(again.fileno(), lambda fd, mask: seen.append(mask), READ)
            other.send(b"x")
            poller.poll(0)
            assert seen == [READ]
        finally:
            again.close()
            other.close()
    finally:
        poller.close()


@pytest.mark.parametrize("loop_kind", ["asyncio", "uvloop"])  # uvloop is the server's (cli/node_start.py)
def test_three_nodes_on_one_loop_commit_with_no_tick_thread_and_answer_on_the_loop_thread(loop_kind):
    errors = []  # what the loop's callbacks raised (uvloop's call_at once handed back a Handle without when())

    async def run() -> None:
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(lambda _loop, context: errors.append(context))
        addresses = [f"127.0.0.1:{port}" for port in free_ports(3)]
        nodes = [ReplicatedQueue(ReplicationSettings(a, [p for p in addresses if p != a], policy=NEVER, secret="s"))
                 for a in addresses]
        try:
            for node in nodes:
                node.start(loop)
            assert not [t for t in threading.enumerate() if t.name == "raft-tick"]
            deadline = loop.time() + 10
            while not any(node._isLeader() for node in nodes):
                assert loop.time() < deadline, "no leader elected on the loop"
                await asyncio.sleep(0.01)
            leader = next(node for node in nodes if node._isLeader())
            outcomes = []
            for i in range(20):  # one entry at a time, as a synchronous client makes them
                done = loop.create_future()

                def applied(result, error, done=done):
                    outcomes.append(threading.get_ident())
                    done.set_result((result, error))

                entry = encode_batch(1_000 + i, [(C.PUT, "default", 1024, 0, 60_000, b"job %d" % i)])
                leader.submit(entry, applied)
                result, error = await asyncio.wait_for(done, 5)
                assert error == raft_node.FAIL_SUCCESS and result.results[0][0] == "INSERTED"
            assert set(outcomes) == {threading.get_ident()}  # every outcome on the loop's thread
            assert leader.state.tube("default").ready_count == 20
            # The followers apply too, from the appends and heartbeats that follow (docs/pysyncobj.md D16).
            while any(node.raftLastApplied < leader.raftCommitIndex for node in nodes):
                assert loop.time() < deadline + 5, "a follower never applied the committed entries"
                await asyncio.sleep(0.01)
            # Idle, the leader rests (D36): it stops watching its sockets, its heartbeats'
            # answers read by its timer's ticks, and its lease holds all along...
            ticker = leader._ticker
            while ticker._watching:
                assert loop.time() < deadline + 10, "the idle leader never came to rest"
                await asyncio.sleep(0.01)
            rest_ends = loop.time() + 1.0
            while loop.time() < rest_ends:
                assert leader.read_lease_valid() and leader._isLeader(), "the lease lapsed while the leader rested"
                await asyncio.sleep(0.02)
            # ...and an entry submitted wakes it: committed as before.
            done = loop.create_future()
            leader.submit(encode_batch(2_000, [(C.PUT, "default", 1024, 0, 60_000, b"late")]),
                          lambda result, error: done.set_result((result, error)))
            result, error = await asyncio.wait_for(done, 5)
            assert error == raft_node.FAIL_SUCCESS and result.results[0][0] == "INSERTED"
            assert ticker._watching  # until it rests again
        finally:
            for node in nodes:
                node.stop()
        assert all(node.epoll_poller._epoll.closed for node in nodes)

    loop = uvloop.new_event_loop() if loop_kind == "uvloop" else asyncio.new_event_loop()
    try:
        loop.run_until_complete(run())
    finally:
        loop.close()
    assert errors == []


class _IdleRaft:
    """What LoopTicker reads of a node: its poller, when its next timed work is due, and
    whether it is a leader at rest."""

    def __init__(self, wait: float, resting: bool = False) -> None:
        self.epoll_poller = EpollPoller()
        self.wait = wait
        self.resting = resting

    def timer_wait(self) -> float:
        return self.wait

    def at_rest(self) -> bool:
        return self.resting


def test_a_leader_at_rest_stops_watching_its_sockets_after_a_while_and_watches_again_when_it_wakes():
    loop = uvloop.new_event_loop()
    raft = _IdleRaft(wait=0.05, resting=True)
    ticker = LoopTicker(raft, loop)
    woken: list = []
    arrived = loop.create_future()

    def on_events() -> None:  # (what the loop calls when the descriptor is ready)
        woken.append(raft.epoll_poller.poll(0))
        if not arrived.done():
            arrived.set_result(None)

    ticker._on_events = on_events
    a, b = socket.socketpair()
    raft.epoll_poller.subscribe(a.fileno(), lambda fd, mask: a.recv(100), READ)
    try:
        ticker.start()
        ticker._arm()
        assert ticker._watching, "at rest only since this tick"
        ticker._rest_since -= 2 * REST_AFTER  # at rest all along since then,
        ticker._rest_asked -= 2 * REST_AFTER  # last asked back then
        ticker._arm()
        assert not ticker._watching
        b.send(b"an acknowledgement")
        # A wake-up that must not come has no event to await: the loop runs a while.
        loop.run_until_complete(asyncio.sleep(0.05))
        assert woken == [], "the loop still watched the sockets"
        raft.resting = False  # a command was submitted: its tick ends the rest
        ticker._arm()
        assert ticker._watching and ticker._rest_since is None
        loop.run_until_complete(asyncio.wait_for(arrived, 5))  # the waiting answer wakes it now
        assert woken
    finally:
        ticker.stop()
        loop.close()
        raft.epoll_poller.close()
        a.close()
        b.close()


def test_a_due_timer_is_set_again_later_on_uvloop_whose_call_at_returns_a_plain_handle():
    # A timer for a time already due comes back from uvloop as a Handle without when():
    # a tick ending before it ran (a socket's events) asked it when, and raised.
    loop = uvloop.new_event_loop()
    raft = _IdleRaft(wait=0.0)
    ticker = LoopTicker(raft, loop)
    try:
        ticker.start()
        ticker._arm()  # as a tick on a socket's events ends, the due timer not yet run
        raft.wait = 0.3  # that tick moved the deadline on
        ticker._arm()
        assert ticker._timer_at >= loop.time() + 0.29
    finally:
        ticker.stop()
        loop.close()
        raft.epoll_poller.close()


def test_after_a_light_tick_a_timer_due_soon_is_left_and_a_later_one_is_set_again():
    # A light tick cannot bring the node's next work closer than ARMED_SOON (on_loop.py):
    # a timer that fires within that long stays as it is, without asking the node, and so
    # does one set from the node's answer less than REARM_LATER ago; one set later, and
    # longer ago, is set again for the node's (closer) deadline.
    loop = uvloop.new_event_loop()
    raft = _IdleRaft(wait=ARMED_SOON / 2)
    ticker = LoopTicker(raft, loop)
    try:
        ticker.start()
        ticker._arm()
        armed_at = ticker._timer_at
        raft.wait = 0.0  # a full tick's question would set it for now
        ticker._arm(light=True)
        assert ticker._timer_at == armed_at
        raft.wait = 0.5
        ticker._arm()  # a full tick moved the deadline far on
        assert ticker._timer_at >= loop.time() + 0.49
        raft.wait = 0.05
        ticker._arm(light=True)  # asked just now (the full tick above): left as it is
        assert ticker._timer_at >= loop.time() + 0.49
        ticker._timer_asked -= REARM_LATER  # asked that long ago
        ticker._arm(light=True)  # not due soon: the node is asked, its deadline is closer
        assert ticker._timer_at <= loop.time() + 0.051
    finally:
        ticker.stop()
        loop.close()
        raft.epoll_poller.close()
