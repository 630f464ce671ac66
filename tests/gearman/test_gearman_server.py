"""haqueue's Gearman port on its own: bad input, limits, timeouts, restarts, and beanstalkd beside it.

What gearmand cannot be compared on (it crashes, or does not do it) is checked here
against haqueue alone, on a real `haqueue serve --gearman-port` over loopback.
"""

from __future__ import annotations

import socket
import struct
import time

import greenstalk
import pytest

from haqueue.protocol.gearman import request
from tests.support.gearman import GearConn, haqueue_gearman, parse, start_haqueue_gearman
from tests.support.hostile import wait_for_stat
from tests.support.servers import RawConn

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def server():
    with haqueue_gearman() as s:
        yield s


def names(packets):
    return [parse(p)[0] for p in packets]


def synced(c: GearConn) -> None:
    """Everything c was owed has been read: the next packet answers this echo."""
    c.req("ECHO_REQ", b"sync")
    assert parse(c.packet()) == ("ECHO_RES", (b"sync",))


def still_served(port: int) -> None:
    with GearConn(port) as other:
        synced(other)


# ------------------------------------------------------------------ bad input
@pytest.mark.parametrize("data", [
    struct.pack(">4sII", b"\0REQ", 2**31, 1) + b"x",  # the 13-byte packet that crashes gearmand 1.1.20
    struct.pack(">4sII", b"\0REQ", 2**32 - 1, 0),
], ids=["type-2^31", "type-2^32-1"])
def test_a_huge_packet_type_closes_the_connection_unanswered_and_the_node_serves_on(server, data):
    with GearConn(server.port) as c:
        c.send(data)
        assert c.closes()  # as gearmand closes on a type beyond its numbering
        assert c.buf == b""
    still_served(server.port)


def test_a_size_beyond_the_job_limit_is_refused_from_the_header_and_closed(server):
    with GearConn(server.port) as c:
        c.send(struct.pack(">4sII", b"\0REQ", 7, 2**32 - 1))  # 4 GiB announced, none sent
        name, args = parse(c.packet())
        assert (name, args[0]) == ("ERROR", b"INVALID_PACKET")
        assert c.closes()
    still_served(server.port)


def test_a_magic_that_is_not_gearmans_closes_unanswered(server):
    with GearConn(server.port) as c:
        c.send(b"\0XYZ" + struct.pack(">II", 1, 0))
        assert c.closes()
        assert c.buf == b""


def test_a_truncated_packet_at_end_of_input_is_dropped_and_the_connection_closes(server):
    with GearConn(server.port) as c:
        c.req("ECHO_REQ", b"whole")
        c.send(struct.pack(">4sII", b"\0REQ", 16, 10) + b"half")
        c.sock.shutdown(socket.SHUT_WR)
        assert parse(c.packet()) == ("ECHO_RES", (b"whole",))
        assert c.closes()


def test_arguments_over_the_limits_are_refused(server):
    with GearConn(server.port) as c:
        c.req("SUBMIT_JOB_BG", b"f" * 513, b"", b"x")
        c.req("SUBMIT_JOB_BG", b"f", b"u" * 65, b"x")
        c.req("SUBMIT_JOB_BG", b"f", b"", b"x" * 65536)  # the node's -z: 65535
        c.req("CAN_DO", b"g" * 513)
        replies = [parse(p)[1][0] for p in c.packets(4)]
        assert replies == [b"INVALID_ARGUMENTS", b"ARGUMENT_TOO_LARGE", b"DATA_TOO_LARGE", b"INVALID_ARGUMENTS"]
        synced(c)


def test_a_worker_may_name_as_many_functions_as_a_connection_may_watch_tubes():
    with haqueue_gearman("--max-watched-tubes", "3") as server, GearConn(server.port) as worker:
        for name in (b"a", b"b", b"c", b"a"):  # the same one again is no more
            worker.req("CAN_DO", name)
        worker.req("CAN_DO", b"d")
        assert parse(worker.packet())[1][0] == b"MEMORY_ALLOCATION_FAILURE"
        assert b" : c b a\n" in worker.admin(b"workers")  # newest first, as gearmand lists them


def test_a_packet_with_too_few_arguments_is_an_error_not_a_guess(server):
    with GearConn(server.port) as c:
        c.send(struct.pack(">4sII", b"\0REQ", 7, 3) + b"f\0x")  # SUBMIT_JOB needs 3 arguments
        assert parse(c.packet())[1][0] == b"INVALID_COMMAND"
        synced(c)


def test_a_client_that_never_reads_is_closed_and_others_are_served(server):
    """A flood of ECHO_REQs whose answers are never read: reading stops (TCP pushes
    back), and the node neither grows without bound nor stops serving others."""
    c = socket.create_connection(("127.0.0.1", server.port))
    c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    c.setblocking(False)
    packet = request("ECHO_REQ", b"e" * 60000)
    sent = 0
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            sent += c.send(packet)
        except BlockingIOError:
            break  # the server stopped reading: pushed back
        except OSError:
            break  # or closed it
    assert sent < 64 << 20, "the server kept reading a client that never reads"
    still_served(server.port)
    c.close()


def test_a_pipeline_longer_than_the_output_bound_is_answered_whole(server):
    """200 KB of ECHO_REQs in one send: the pipeline stops at OUTPUT_HIGH of replies held
    back and must go on by itself once they are written (it stalled at 130 once)."""
    with GearConn(server.port) as c:
        c.send(request("ECHO_REQ", b"e" * 1000) * 200)
        assert len(c.packets(200)) == 200
        synced(c)


# ------------------------------------------------------------------ semantics
def test_a_foreground_job_ends_with_its_last_client_and_a_background_one_stays(server):
    with GearConn(server.port) as client, GearConn(server.port) as worker:
        client.req("SUBMIT_JOB", b"ends", b"", b"fg")
        client.req("SUBMIT_JOB_BG", b"ends", b"", b"bg")
        client.packets(2)
    with GearConn(server.port) as worker, GearConn(server.port) as admin:
        deadline = time.monotonic() + 5
        while b"ends\t1\t0\t0" not in admin.admin(b"status"):  # the drop is committed
            assert time.monotonic() < deadline
        worker.req("CAN_DO", b"ends")
        worker.req("GRAB_JOB")
        assert parse(worker.packet())[1][2] == b"bg"


def test_can_do_timeout_requeues_the_job_and_wakes_a_sleeping_worker(server):
    """As gearmand 1.1.20: the timed-out job goes back to its queue (its client hears
    nothing), a sleeping worker of the function is woken for it, and the first
    worker's late result is JOB_NOT_FOUND."""
    with GearConn(server.port) as client, GearConn(server.port) as worker, GearConn(server.port) as other:
        client.req("SUBMIT_JOB", b"slow", b"", b"x")
        handle = parse(client.packet())[1][0]
        worker.req("CAN_DO_TIMEOUT", b"slow", b"1")
        worker.req("GRAB_JOB")
        assert parse(worker.packet())[0] == "JOB_ASSIGN"
        other.req("CAN_DO", b"slow")
        other.req("PRE_SLEEP")
        assert names([other.packet(timeout=5)]) == ["NOOP"]  # woken when the job is back
        other.req("GRAB_JOB")
        assert parse(other.packet()) == ("JOB_ASSIGN", (handle, b"slow", b"x"))
        worker.req("WORK_COMPLETE", handle, b"too late")
        assert parse(worker.packet())[1][0] == b"JOB_NOT_FOUND"
        other.req("WORK_COMPLETE", handle, b"done")
        assert parse(client.packet()) == ("WORK_COMPLETE", (handle, b"done"))


def test_submit_job_epoch_is_a_delayed_job(server):
    with GearConn(server.port) as client, GearConn(server.port) as worker:
        soon = int(time.time()) + 2
        client.req("SUBMIT_JOB_EPOCH", b"later", b"", str(soon).encode(), b"epoch")
        client.req("SUBMIT_JOB_EPOCH", b"later", b"", str(soon + 3600).encode(), b"in an hour")
        assert names(client.packets(2)) == ["JOB_CREATED", "JOB_CREATED"]
        worker.req("CAN_DO", b"later")
        worker.req("GRAB_JOB")
        assert names([worker.packet()]) == ["NO_JOB"]  # not yet due
        worker.req("PRE_SLEEP")
        assert names([worker.packet(timeout=10)]) == ["NOOP"]  # woken when it comes due
        assert time.time() >= soon
        worker.req("GRAB_JOB")
        assert parse(worker.packet())[1][2] == b"epoch"
        assert b"later\t2\t1\t1\n" in worker.admin(b"status")  # one running, the scheduled one waits


def test_a_bad_epoch_is_refused(server):
    with GearConn(server.port) as c:
        c.req("SUBMIT_JOB_EPOCH", b"f", b"", b"soon", b"x")
        assert [parse(p)[1][0] for p in c.packets(1)] == [b"INVALID_ARGUMENTS"]


def test_work_data_reaches_the_client_in_the_order_the_worker_sent_it(server):
    with GearConn(server.port) as client, GearConn(server.port) as worker:
        client.req("SUBMIT_JOB", b"ordered", b"", b"x")
        handle = parse(client.packet())[1][0]
        worker.req("CAN_DO", b"ordered")
        worker.req("GRAB_JOB")
        worker.packet()
        sent = []
        for i in range(20):  # logged (WORK_STATUS) and not (WORK_DATA) interleaved, pipelined
            if i % 3 == 0:
                worker.req("WORK_STATUS", handle, b"%d" % i, b"20")
                sent.append(("WORK_STATUS", (handle, b"%d" % i, b"20")))
            else:
                worker.req("WORK_DATA", handle, b"%d" % i)
                sent.append(("WORK_DATA", (handle, b"%d" % i)))
        worker.req("WORK_COMPLETE", handle, b"end")
        sent.append(("WORK_COMPLETE", (handle, b"end")))
        assert [parse(p) for p in client.packets(len(sent))] == sent


# ------------------------------------------------------- beanstalkd beside it
def test_gearman_functions_and_beanstalk_tubes_are_separate_and_both_stats_tell_the_truth(server):
    with GearConn(server.port) as client, greenstalk.Client(("127.0.0.1", server.beanstalk_port),
                                                            use="shared", watch="shared") as bean:
        client.req("SUBMIT_JOB_BG", b"shared", b"", b"gearman job")
        client.packet()
        bean.put(b"beanstalk job")
        assert b"shared\t1\t0\t0\n" in client.admin(b"status")  # the Gearman job only
        assert bean.stats_tube("shared")["current-jobs-ready"] == 1  # the beanstalk job only
        job = bean.reserve(timeout=0)
        assert job.body == "beanstalk job"
        with pytest.raises(greenstalk.TimedOutError):
            bean.reserve(timeout=0)  # a beanstalkd worker never sees a Gearman job
        bean.delete(job)


# ------------------------------------------------------------ durability
def test_background_jobs_and_maxqueue_survive_a_restart(tmp_path):
    server = start_haqueue_gearman(data_dir=str(tmp_path))
    try:
        with GearConn(server.port) as c:
            assert c.admin(b"maxqueue kept 2") == b"OK\r\n"
            c.req("SUBMIT_JOB_BG", b"kept", b"", b"one")
            c.req("SUBMIT_JOB_BG", b"kept", b"", b"two")
            assert names(c.packets(2)) == ["JOB_CREATED", "JOB_CREATED"]
    finally:
        server.stop()
    server = start_haqueue_gearman(data_dir=str(tmp_path))
    try:
        with GearConn(server.port) as c, GearConn(server.port) as worker:
            c.req("SUBMIT_JOB_BG", b"kept", b"", b"three")
            assert parse(c.packet())[1][0] == b"QUEUE_ERROR"  # the bound came back too
            worker.req("CAN_DO", b"kept")
            got = []
            for _ in range(2):
                worker.req("GRAB_JOB")
                _, (handle, _, data) = parse(worker.packet())
                got.append(data)
                worker.req("WORK_COMPLETE", handle, b"")
            assert got == [b"one", b"two"]
            c.req("SUBMIT_JOB_BG", b"kept", b"", b"four")
            assert parse(c.packet())[1][0] == b"H:haqueue:3"  # handles never repeat
    finally:
        server.stop()


def test_shutdown_graceful_waits_for_the_last_gearman_connection():
    server = start_haqueue_gearman()
    try:
        with GearConn(server.port) as admin, GearConn(server.port) as busy:
            assert admin.admin(b"shutdown graceful") == b"OK\n"
            with pytest.raises(OSError):  # no new connections meanwhile
                GearConn(server.port, timeout=1).close()
            synced(busy)  # the open ones are still served
            assert server.alive()
        server.proc.wait(10)  # both closed: the node stops
        assert server.proc.returncode == 0
    finally:
        server.stop()



def test_big_packets_on_their_way_wait_for_the_node_wide_input_budget():
    """Gearman packets over a connection's own input bound (64 KiB) take their size from
    the node's input budget, shared with beanstalkd's puts: one that does not fit waits,
    unread, and goes on once the one before it has arrived."""
    data = b"d" * 2_000_000
    packet = request("SUBMIT_JOB_BG", b"big", b"", data)
    with haqueue_gearman("-z", str(len(data)), "--max-input-buffers", str(len(packet))) as node, \
            GearConn(node.port) as first, GearConn(node.port) as second, \
            RawConn("127.0.0.1", node.beanstalk_port) as watcher:
        first.send(packet[:1000])
        wait_for_stat(watcher, "haqueue-input-buffers", str(len(packet)))
        second.send(packet[:1000])
        wait_for_stat(watcher, "haqueue-input-buffer-waits", "1")
        first.send(packet[1000:])
        assert names([first.packet()]) == ["JOB_CREATED"]
        second.send(packet[1000:])
        assert names([second.packet()]) == ["JOB_CREATED"]
        wait_for_stat(watcher, "haqueue-input-buffers", "0")
