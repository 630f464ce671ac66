"""The disk reserve on a real node whose data directory is a small tmpfs (root).

Below the reserve (haqueue/server/disk_reserve.py) puts answer OUT_OF_MEMORY,
Gearman submits `QUEUE_ERROR` and id reservations `disk_full`, while what drains
the queue (reserve, bury, kick, release, delete) keeps working; freeing the
space brings puts back without a restart. The three-node case, the file
systems filling with the backlog itself, is tests/cluster/test_disk_reserve.py.
"""

from __future__ import annotations

import json
import os
import socket
import time

import pytest

from tests.support.gearman import GearConn, haqueue_gearman, parse
from tests.support.servers import HOST, RawConn, free_udp_port
from tests.support.small_disks import drop_ballast, leave_free, small_disks

MiB = 1 << 20
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="mounting a small filesystem needs root")


def put(conn: RawConn, body: bytes = b"job") -> bytes:
    conn.send(b"put 0 0 60 %d\r\n%s\r\n" % (len(body), body))
    return conn.recv_reply()


def until_reply(conn: RawConn, wanted: bytes, timeout: float = 10.0) -> bytes:
    """Puts, one at a time, until one is answered `wanted` (a put reads the disk 0.25 s after the last reading)."""
    deadline = time.monotonic() + timeout
    while True:
        reply = put(conn)
        if reply.startswith(wanted) or time.monotonic() > deadline:
            return reply
        time.sleep(0.05)


def get_id(port: int) -> dict:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.settimeout(5)
        sock.sendto(json.dumps({"action": "get", "rule_name": "counter", "app_name": "disk"}).encode(),
                    (HOST, port))
        return json.loads(sock.recv(512))


def submit_bg(gear: GearConn) -> tuple[str, tuple]:
    gear.req("SUBMIT_JOB_BG", b"resize", b"", b"picture")
    return parse(gear.packet())


@pytest.mark.root
@needs_root
def test_below_the_disk_reserve_new_work_is_refused_draining_goes_on_and_resumes_when_space_returns(tmp_path):
    data = tmp_path / "data"
    id_port = free_udp_port()
    with small_disks([data], 16), \
            haqueue_gearman("-f0", "-s", str(MiB), "--disk-reserve", "1MiB", "--id-port", str(id_port),
                            data_dir=str(data)) as node, \
            RawConn(HOST, node.beanstalk_port) as conn, GearConn(node.port) as gear:
        for _ in range(3):
            assert put(conn).startswith(b"INSERTED ")
        assert submit_bg(gear)[0] == "JOB_CREATED"
        assert get_id(id_port)["code"] == 0

        # Reserve: 1 MiB floor + max(-s, snapshot, journal) + snapshot = 2 MiB here.
        leave_free(data, 3 * MiB // 2)
        assert until_reply(conn, b"OUT_OF_MEMORY") == b"OUT_OF_MEMORY\r\n"
        assert submit_bg(gear) == ("ERROR", (b"QUEUE_ERROR", b"Job queue is full"))
        refused = get_id(id_port)
        assert (refused["code"], refused["error"]) == (-1, "disk_full")

        # What drains the queue still works.
        conn.send(b"reserve-with-timeout 0\r\n")
        job_id = conn.recv_reply().split()[1]
        conn.send(b"bury %s 0\r\n" % job_id)
        assert conn.recv_reply() == b"BURIED\r\n"
        conn.send(b"kick 1\r\n")
        assert conn.recv_reply() == b"KICKED 1\r\n"
        conn.send(b"reserve-with-timeout 0\r\n")
        job_id = conn.recv_reply().split()[1]
        conn.send(b"release %s 0 0\r\n" % job_id)
        assert conn.recv_reply() == b"RELEASED\r\n"
        conn.send(b"reserve-with-timeout 0\r\n")
        job_id = conn.recv_reply().split()[1]
        conn.send(b"delete %s\r\n" % job_id)
        assert conn.recv_reply() == b"DELETED\r\n"

        drop_ballast(data)
        assert until_reply(conn, b"INSERTED ").startswith(b"INSERTED ")
        assert submit_bg(gear)[0] == "JOB_CREATED"
        assert get_id(id_port)["code"] == 0
        assert node.alive(), "the node restarted or stopped"
