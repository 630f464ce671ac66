"""Kill -9 the leader of a real three-node cluster (issue 3; docs/design.md I1, I4-I7).

Each test starts three `haqueue serve` processes on loopback, drives them with
real beanstalk clients, and kills the serving node with SIGKILL.
"""

from __future__ import annotations

import time

import pytest

from tests.cluster.clients import client_for, job_stats
from tests.cluster.convergence import wait_converged
from tests.cluster.workload import Workload, check_contents, check_ids_increase, check_reservations

FAILOVER_BOUND = 5.0  # seconds from the kill to the first acknowledged put on the new leader
PUTS_PER_PHASE = 200


@pytest.mark.slow
def test_killed_leader_under_load_is_replaced_and_loses_nothing_acknowledged(make_cluster):
    cluster = make_cluster(["-f0"])
    old = cluster.leader()
    work = Workload(cluster, producers=2, consumers=2).start()
    try:
        assert work.wait_for_puts(old.id, PUTS_PER_PHASE, timeout=15), "load never got going"
        killed_at = time.monotonic()
        cluster.kill_node(old.id)
        new = cluster.leader(timeout=FAILOVER_BOUND, exclude=old.id)
        assert new is not None, f"no new leader within {FAILOVER_BOUND} s of killing {old.id}"
        assert work.wait_for_puts(new.id, PUTS_PER_PHASE, timeout=10), "load did not resume"
    finally:
        ledger = work.stop()
    assert not ledger.errors, ledger.errors
    first = ledger.first_put_after(killed_at, new.id)
    assert first is not None, "no put was acknowledged by the new leader"
    assert first.acked_at - killed_at < FAILOVER_BOUND, \
        f"first put on the new leader came {first.acked_at - killed_at:.2f} s after the kill"
    assert ledger.reconnects >= 4, "every client should have lost its connection to the old leader"

    assert check_reservations(ledger) == []
    assert check_ids_increase(ledger, old.id, new.id) == []
    with client_for(cluster, new.id) as client:
        assert check_contents(ledger, client) == []

    # The killed node comes back, replays its journal, catches up: one state.
    cluster.start_node(old.id)
    wait_converged(cluster, timeout=15)


def test_reservation_of_killed_leader_is_released_on_new_leader(make_cluster):
    cluster = make_cluster(["-f0"])
    old = cluster.leader()
    with client_for(cluster, old.id) as producer:
        job_id = producer.put(b"in the hands of a worker", ttr=100)
    worker = client_for(cluster, old.id)
    try:
        job = worker.reserve(timeout=0)
        assert job.id == job_id
        cluster.kill_node(old.id)
    finally:
        worker.close()
    new = cluster.leader(timeout=FAILOVER_BOUND, exclude=old.id)
    assert new is not None
    with client_for(cluster, new.id) as client:
        stats = job_stats(client, job_id)
        # Ready at once: not after its 100 s time-to-run. Reserved once, and
        # no timeout counted: the release is the new leader's, not the clock's.
        assert (stats["state"], stats["reserves"], stats["timeouts"]) == ("ready", 1, 0)
        again = client.reserve(timeout=0)
        assert again.id == job_id
        assert job_stats(client, job_id)["reserves"] == 2
