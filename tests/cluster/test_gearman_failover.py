"""Gearman on a real three-node cluster: background jobs survive the leader's death.

Every node gets `--gearman-port`; the leader serves it on its own address and on
the VIP (127.0.0.100 on loopback). Background jobs acknowledged (JOB_CREATED)
before the leader is SIGKILLed are all done after it, by a worker of the new
leader, each exactly once; the jobs the old leader's worker was running come
back; a foreground job dies with its client's connection (docs/gearman.md,
"Failover"), unless a background submission named its unique id: then it is a
background job and is done too; handles keep growing across the change.
"""

from __future__ import annotations

import time

from haqueue.local_cluster import free_port_on_all
from tests.cluster.convergence import wait_converged
from tests.support.gearman import GearConn, parse

VIP = "127.0.0.100"
FAILOVER_BOUND = 15.0
JOBS = 60


def handle_number(handle: bytes) -> int:
    return int(handle.rsplit(b":", 1)[1])


def connect(port: int, deadline: float) -> GearConn:
    """The VIP's Gearman port, once the (new) leader serves it: ECHO answered."""
    while True:
        try:
            conn = GearConn(port, host=VIP, timeout=2)
            conn.req("ECHO_REQ", b"ping")
            if parse(conn.packet()) == ("ECHO_RES", (b"ping",)):
                return conn
            conn.close()
        except (OSError, EOFError, TimeoutError):
            pass
        assert time.monotonic() < deadline, "no leader served Gearman on the VIP in time"
        time.sleep(0.05)


def test_background_jobs_acknowledged_before_a_leader_kill_are_all_done_after_it(make_cluster):
    port = free_port_on_all(["127.0.0.11", "127.0.0.12", "127.0.0.13", VIP], 32000 - 1000)
    cluster = make_cluster(["-f0", "--gearman-port", str(port)])
    old = cluster.leader()

    client = connect(port, time.monotonic() + 10)
    acknowledged = []
    for i in range(JOBS):
        client.req("SUBMIT_JOB_BG", b"survive", b"", b"job %d" % i)
    for _ in range(JOBS):
        name, args = parse(client.packet())
        assert name == "JOB_CREATED"
        acknowledged.append(args[0])
    assert len(set(acknowledged)) == JOBS

    # The old leader's worker is running two of them when the leader dies.
    worker = connect(port, time.monotonic() + 5)
    worker.req("CAN_DO", b"survive")
    running = []
    for _ in range(2):
        worker.req("GRAB_JOB")
        name, args = parse(worker.packet())
        assert name == "JOB_ASSIGN"
        running.append(args[0])
    # ...and one job it finished: done before the kill, so not done again after.
    worker.req("GRAB_JOB")
    _, (finished, _, _) = parse(worker.packet())
    worker.req("WORK_COMPLETE", finished, b"")
    client.req("GET_STATUS", finished)
    while parse(client.packet())[1][1] != b"0":  # committed: the job is gone
        client.req("GET_STATUS", finished)
    # A foreground job, queued for a function nobody works on, whose client stays connected.
    waiting = connect(port, time.monotonic() + 5)
    waiting.req("SUBMIT_JOB", b"nobody-works-on-this", b"fg-unique", b"x")
    assert parse(waiting.packet())[0] == "JOB_CREATED"
    # A foreground job that a background submission then named by its unique id.
    waiting.req("SUBMIT_JOB", b"survive", b"kept-unique", b"fg")
    client.req("SUBMIT_JOB_BG", b"survive", b"kept-unique", b"bg")
    kept = parse(waiting.packet())[1][0]
    assert parse(client.packet()) == ("JOB_CREATED", (kept,))
    acknowledged.append(kept)

    cluster.kill_node(old.id)
    for conn in (client, worker, waiting):
        conn.close()  # their connections died with the leader

    deadline = time.monotonic() + FAILOVER_BOUND
    new_worker = connect(port, deadline)
    new = cluster.leader(timeout=5, exclude=old.id)
    assert new is not None and new.id != old.id
    new_worker.req("CAN_DO", b"survive")
    done = []
    while True:
        new_worker.req("GRAB_JOB")
        name, args = parse(new_worker.packet())
        if name == "NO_JOB":
            break
        done.append(args[0])
        new_worker.req("WORK_COMPLETE", args[0], b"")
    expected = set(acknowledged) - {finished}
    assert len(done) == len(set(done)), "a job was handed out twice"
    assert set(done) == expected, f"lost: {sorted(expected - set(done))}, unexpected: {sorted(set(done) - expected)}"
    assert set(running) <= set(done)  # the dead worker's jobs came back

    new_worker.req("GET_STATUS_UNIQUE", b"fg-unique")
    assert parse(new_worker.packet())[1][1] == b"0"  # the foreground job ended with its client
    new_worker.req("SUBMIT_JOB_BG", b"after", b"", b"x")
    handle = parse(new_worker.packet())[1][0]
    assert handle_number(handle) > max(handle_number(h) for h in acknowledged)  # never reused
    new_worker.close()

    cluster.start_node(old.id)  # it comes back and agrees (same digest)
    wait_converged(cluster, timeout=15)
