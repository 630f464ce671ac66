"""SIGSTOP the leader, let the others elect, SIGCONT it (issue 3; docs/design.md I1, I3).

A paused leader is the classic way to get two nodes that both believe they
lead: the resumed one must step down, close its client port within about one
election timeout, answer nothing it cannot commit, and rejoin as follower.
"""

from __future__ import annotations

import signal
import time

import pytest

from haqueue import admin_client
from tests.cluster.clients import CONNECTION_TROUBLE, client_for, port_refuses
from tests.cluster.convergence import wait_converged
from tests.cluster.workload import Workload, check_contents, check_ids_increase, check_reservations

ELECTION_BOUND = 5.0
# RaftTiming: a leader that heard from no majority for leader_fallback (0.6 s)
# steps down on its first tick after resuming; a second of slack for a loaded host.
STEP_DOWN_BOUND = 1.6


@pytest.mark.slow
def test_paused_leader_steps_down_closes_its_port_and_rejoins_losing_nothing(make_cluster):
    cluster = make_cluster(["-f0"])
    old = cluster.leader()
    work = Workload(cluster, producers=2, consumers=2).start()
    stale = client_for(cluster, old.id)
    try:
        assert work.wait_for_puts(old.id, 100, timeout=15), "load never got going"
        stale.use("stale")
        cluster.signal_node(old.id, signal.SIGSTOP)
        new = cluster.leader(timeout=ELECTION_BOUND, exclude=old.id)
        assert new is not None, f"no other leader within {ELECTION_BOUND} s of pausing {old.id}"
        assert work.wait_for_puts(new.id, 100, timeout=10), "load did not move to the new leader"

        # A client of the paused leader sends a put it can never commit: the
        # other two have moved to a later term.
        stale._sock.sendall(b"put 0 0 60 5\r\nstale\r\n")

        resumed_at = time.monotonic()
        cluster.signal_node(old.id, signal.SIGCONT)
        while not port_refuses(old.address, old.client_port):
            assert time.monotonic() - resumed_at < STEP_DOWN_BOUND, \
                f"{old.id} still accepts clients {STEP_DOWN_BOUND} s after resuming"
            time.sleep(0.01)
        assert not admin_client.is_leader(old.address, old.admin_port)

        # Its client was dropped without a reply (the put's outcome is unknown).
        try:
            reply = stale._sock.recv(100)
        except CONNECTION_TROUBLE:
            reply = b""
        assert reply == b"", f"the deposed leader answered {reply!r}"
        still = cluster.leader(timeout=ELECTION_BOUND)
        assert still is not None and still.id == new.id, f"leadership moved again: {still}"
        assert work.wait_for_puts(new.id, 200, timeout=10)
    finally:
        stale.close()
        ledger = work.stop()
    assert not ledger.errors, ledger.errors
    assert check_reservations(ledger) == []
    assert check_ids_increase(ledger, old.id, new.id) == []
    with client_for(cluster, new.id) as client:
        # Also finds the stale put if it had landed: its body is not in the ledger.
        assert check_contents(ledger, client) == []
    statuses = wait_converged(cluster, timeout=15)
    assert statuses[old.id]["role"] == "follower"
    assert statuses[old.id]["leader"] == cluster.spec.node(new.id).raft_endpoint
