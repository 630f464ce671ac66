"""Floods against a real 3-node cluster's leader. Unread `stats`: the Raft traffic, the
other clients, new connections and the admin port carry on, and the leader's memory stays
bounded. Read `stats` (the loop never idles): the leader's Raft, ticked on the same loop,
still commits and heartbeats, so it keeps its followers and other clients' puts are answered."""

from __future__ import annotations

from haqueue import admin_client
from tests.cluster.running import LEADER_TIMEOUT
from tests.support.hostile import check_flood_is_contained, check_reading_flood_yields_to_raft
from tests.support.servers import RawConn


def test_the_leader_contains_a_client_that_never_reads(make_cluster):
    cluster = make_cluster(("-f0", "--max-connections", "50"), start=False)
    with open(cluster.config_path, "a") as f:  # the cluster file's [limits] reach every node
        f.write("\n[limits]\nmax_watched_tubes = 7\n")
    cluster.start()
    leader = cluster.leader(timeout=LEADER_TIMEOUT)
    assert leader is not None
    pid = cluster.nodes[leader.id].process.pid
    with RawConn(leader.address, leader.client_port) as conn:
        conn.send(b"stats\r\n")
        body = conn.recv_reply()
    assert b"\nhaqueue-max-connections: 50\n" in body
    assert b"\nhaqueue-max-watched-tubes: 7\n" in body

    def admin_answers() -> None:
        assert admin_client.is_leader(leader.address, leader.admin_port, timeout=2)

    report = check_flood_is_contained(leader.address, leader.client_port, pid, also=admin_answers)
    print(report.summary())
    # The cluster kept its leader through the flood: no election was needed.
    assert cluster.leader(timeout=5).id == leader.id


def test_the_leader_keeps_its_followers_through_a_reading_flood(make_cluster):
    # Before turns yielded to Raft (server/turns.py), a flood like this starved the
    # leader's tick thread (Raft ticked in a thread then) of the interpreter lock: puts waited ~200 ms, and on a
    # loaded machine the followers stopped hearing from it and elected another.
    cluster = make_cluster(("-f0",))
    leader = cluster.leader(timeout=LEADER_TIMEOUT)
    assert leader is not None
    report = check_reading_flood_yields_to_raft(leader.address, leader.client_port)
    print(report.summary())
    assert cluster.leader(timeout=5).id == leader.id
