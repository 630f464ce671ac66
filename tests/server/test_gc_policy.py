"""The collector policy: passes stay short, freezing hides no garbage, and an idle
node's freeze timer sleeps until the next pass (gc_policy.py)."""

from __future__ import annotations

import asyncio
import gc
import json
import time

from haqueue import admin_client
from haqueue.server.gc_policy import CollectorPolicy
from tests.support.servers import RawConn, free_port, start_haqueue

CHURN = 600


def gc_report(admin: int, collect: bool = False) -> dict:
    code, body = admin_client.get("127.0.0.1", admin, "/gc?collect=1" if collect else "/gc", 30)
    assert code == 200, body
    return json.loads(body)


def open_worker(host: str, port: int, i: int) -> RawConn:
    """A worker's life up to its end: its own tube, puts, a delete, a reservation
    held and a reserve still waiting (both ended by the close)."""
    tube = b"churn-%d" % i
    conn = RawConn(host, port)
    conn.send(b"use %s\r\nwatch %s\r\nignore default\r\n" % (tube, tube))
    conn.recv_replies(3)
    conn.send(b"put 0 0 60 4\r\nbody\r\nput 0 0 60 4\r\nbody\r\nreserve-with-timeout 0\r\n")
    *_, reserved = conn.recv_replies(3)
    assert reserved.startswith(b"RESERVED "), reserved
    conn.send(b"delete %d\r\nreserve-with-timeout 0\r\n" % int(reserved.split()[1]))
    deleted, held = conn.recv_replies(2)
    assert deleted == b"DELETED\r\n" and held.startswith(b"RESERVED "), (deleted, held)
    conn.send(b"reserve-with-timeout 5\r\n")
    return conn


def drain(host: str, port: int) -> int:
    drained = 0
    with RawConn(host, port) as conn:
        conn.send(b"".join(b"watch churn-%d\r\n" % i for i in range(CHURN)) + b"ignore default\r\n")
        conn.recv_replies(CHURN + 1)
        while True:
            conn.send(b"reserve-with-timeout 0\r\n")
            reply = conn.recv_reply()
            if reply.startswith(b"TIMED_OUT"):
                return drained
            conn.send(b"delete %d\r\n" % int(reply.split()[1]))
            assert conn.recv_reply() == b"DELETED\r\n"
            drained += 1


def test_churning_connections_tubes_and_jobs_leaves_no_frozen_garbage():
    admin = free_port()
    srv = start_haqueue("--admin", f"127.0.0.1:{admin}")
    try:
        # A full pass first: start-up's few cyclic leftovers are frozen as they were
        # (CollectorPolicy.start says why); what is found after this, the churn left.
        before = gc_report(admin, collect=True)
        assert before["freezes"] >= 1 and before["thresholds"][0] == 10_000
        workers = [open_worker(srv.host, srv.port, i) for i in range(CHURN)]
        # Every worker's objects get frozen while it is alive: the case where
        # a cycle would hide from the collector once the connection ends. The
        # policy freezes only after a pass (an idle node's timer sleeps): the
        # full pass asked here is one, and ends in a freeze of its own.
        frozen_at = gc_report(admin, collect=True)["freezes"]
        deadline = time.monotonic() + 5
        while gc_report(admin)["freezes"] == frozen_at and time.monotonic() < deadline:
            time.sleep(0.05)
        for worker in workers:
            worker.close()
        assert drain(srv.host, srv.port) == CHURN  # each left one job behind (released at close)
        # Every closed connection is gone from the server once it says so.
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            with RawConn(srv.host, srv.port) as conn:
                conn.send(b"stats\r\n")
                if b"current-connections: 1\n" in conn.recv_until(1):
                    break
        after = gc_report(admin, collect=True)
        # Had a worker's objects formed a cycle, the full pass would find it
        # now: several objects per connection (before the cuts: 4,469 for 600).
        assert after["freezes"] > frozen_at
        assert after["frozen_garbage"] < 20, after
        assert after["longest_pause_ms"] < 1000, after
    finally:
        srv.stop()


class Probe(CollectorPolicy):
    """The policy, telling the test when a pass has woken its loop."""

    woke: asyncio.Future | None = None

    def _woken(self) -> None:
        super()._woken()
        if self.woke is not None and not self.woke.done():
            self.woke.set_result(None)


def fire(policy: CollectorPolicy) -> None:
    """The freeze timer's moment, now (the test drives the timer, not the clock)."""
    policy._handle.cancel()
    policy._freeze()


def test_without_a_pass_the_freeze_timer_sleeps_and_the_next_pass_wakes_it():
    loop = asyncio.new_event_loop()
    thresholds, enabled = gc.get_threshold(), gc.isenabled()
    policy = Probe(loop)
    try:
        policy.start()
        assert policy.freezes == 1 and policy._handle is not None
        gc.set_threshold(10**9)  # no automatic pass while the test runs: it makes its own
        fire(policy)  # a period without a pass (the freeze's own gc.collect(1) is none)
        assert policy.sleeping and policy._handle is None and policy.freezes == 1
        policy.woke = loop.create_future()
        gc.collect(0)  # a pass, as any thread's allocations would make
        loop.run_until_complete(asyncio.wait_for(policy.woke, 5))
        assert not policy.sleeping and policy._handle is not None  # a freeze within FREEZE_EVERY
        fire(policy)
        assert policy.freezes == 2 and policy._handle is not None  # ...and the next period is timed
        fire(policy)
        assert policy.sleeping and policy.freezes == 2
    finally:
        policy.stop()
        gc.unfreeze()
        gc.set_threshold(*thresholds)
        (gc.enable if enabled else gc.disable)()
        loop.close()
