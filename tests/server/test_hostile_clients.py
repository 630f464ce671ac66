"""Careless and hostile clients against one real node: bounded memory, fair service, limits.

The flood is issue 11's: one connection pipelines 20 MB of `stats` and never
reads. Before flow control a 5 MB flood took a node from 37 MB to 224 MB of
resident memory, kept it there after the flooder left, and no other client
was answered within 5 s.
"""

from __future__ import annotations

import resource
import socket
import time

import psutil
import pytest

from haqueue.bench.flood import Flood
from tests.support.hostile import (
    FLOOD_RSS_BOUND, check_flood_is_contained, check_reading_flood_yields_to_raft, current_connections,
    wait_for_stat,
)
from tests.support.servers import ConnectionClosed, RawConn, beanstalkd, haqueue, split_replies


@pytest.fixture
def raise_nofile():
    """Raise this process's open-files limit for the test (the client side's sockets)."""
    saved = resource.getrlimit(resource.RLIMIT_NOFILE)

    def raise_to(count: int) -> None:
        soft, hard = saved
        if hard != resource.RLIM_INFINITY and hard < count:
            try:  # root may raise the hard limit too (CI runs as root)
                resource.setrlimit(resource.RLIMIT_NOFILE, (count, count))
                return
            except (ValueError, OSError):
                pytest.skip(f"the open-files hard limit {hard} is below {count} and cannot be raised")
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, count), hard))

    yield raise_to
    resource.setrlimit(resource.RLIMIT_NOFILE, saved)


def stat(conn: RawConn, key: str) -> str:
    conn.send(b"stats\r\n")
    body = conn.recv_reply().decode()
    return body.split(f"\n{key}: ")[1].split("\n")[0]


def test_a_client_that_never_reads_its_replies_cannot_grow_the_node_or_starve_others():
    with haqueue() as srv:
        report = check_flood_is_contained(srv.host, srv.port, srv.pid)
        print(report.summary())
        assert report.peak - report.baseline < FLOOD_RSS_BOUND


def test_a_reading_flood_leaves_room_for_raft_to_commit_other_clients_puts():
    with haqueue() as srv:
        report = check_reading_flood_yields_to_raft(srv.host, srv.port)
        print(report.summary())


def test_a_client_that_never_reads_is_closed_after_the_output_timeout():
    with haqueue("--output-timeout", "0.5") as srv, srv.connect() as watcher:
        flood = Flood(srv.host, srv.port).start()
        try:
            deadline = time.monotonic() + 10
            while stat(watcher, "haqueue-output-limit-closes") != "1":
                assert time.monotonic() < deadline, "the flooder was never closed"
                time.sleep(0.05)
            assert stat(watcher, "current-connections") == "1"
        finally:
            flood.close()


def test_connections_beyond_the_limit_are_closed_at_once_and_counted():
    with haqueue("--max-connections", "3") as srv:
        with srv.connect() as a, srv.connect() as b, srv.connect() as c:
            for conn in (a, b, c):
                conn.send(b"list-tube-used\r\n")
                assert conn.recv_reply() == b"USING default\r\n"
            with srv.connect() as refused:
                refused.send(b"list-tube-used\r\n")
                # beanstalkd closes a connection it cannot make without a word.
                assert refused.wait_closed(timeout=5) == b""
            assert stat(a, "haqueue-rejected-connections") == "1"
            assert stat(a, "haqueue-max-connections") == "3"
        # Room again once one leaves.
        deadline = time.monotonic() + 5
        while True:
            with srv.connect() as again:
                again.send(b"list-tube-used\r\n")
                try:
                    assert again.recv_reply() == b"USING default\r\n"
                    break
                except ConnectionClosed:  # the server had not yet seen the others go
                    assert time.monotonic() < deadline
                    time.sleep(0.05)


def test_tube_limits_answer_out_of_memory_as_beanstalkd_does_when_it_runs_out():
    with haqueue("--max-tubes", "3", "--max-watched-tubes", "2") as srv:
        with srv.connect() as a, srv.connect() as b:
            a.send(b"use one\r\n")
            assert a.recv_reply() == b"USING one\r\n"
            b.send(b"watch two\r\n")
            assert b.recv_reply() == b"WATCHING 2\r\n"
            # default, one, two: a fourth tube is one too many, an existing one is fine.
            b.send(b"use three\r\nuse one\r\n")
            assert b.recv_replies(2) == [b"OUT_OF_MEMORY\r\n", b"USING one\r\n"]
            # Two watched already: a third is refused, watching one again is not.
            b.send(b"watch one\r\nwatch two\r\n")
            assert b.recv_replies(2) == [b"OUT_OF_MEMORY\r\n", b"WATCHING 2\r\n"]
            b.send(b"ignore two\r\nwatch one\r\n")
            assert b.recv_replies(2) == [b"WATCHING 1\r\n", b"WATCHING 2\r\n"]
            assert stat(a, "haqueue-out-of-memory-replies") == "2"
            assert stat(a, "current-tubes") == "2"  # "two" went when nothing watched it


def test_puts_answer_out_of_memory_above_the_memory_high_water_mark():
    with haqueue("--max-memory", "1MiB") as srv, srv.connect() as conn:
        conn.send(b"put 0 0 60 2\r\nhi\r\n")
        assert conn.recv_reply() == b"OUT_OF_MEMORY\r\n"
        # Everything that frees or reads memory still works.
        conn.send(b"reserve-with-timeout 0\r\nstats-tube default\r\n")
        replies = conn.recv_replies(2)
        assert replies[0] == b"TIMED_OUT\r\n"
        assert b"total-jobs: 0\n" in replies[1]
        assert stat(conn, "haqueue-max-memory") == str(1 << 20)
        assert int(stat(conn, "haqueue-memory-rss")) > 1 << 20


def test_a_node_filling_up_refuses_puts_instead_of_growing_without_end():
    with haqueue() as srv, srv.connect() as probe:
        idle = int(stat(probe, "haqueue-memory-rss"))
    limit = idle + 48 * (1 << 20)
    with haqueue("--max-memory", str(limit), "-z", "65536") as srv, srv.connect() as conn:
        body = b"x" * 65536
        refused = 0
        for _ in range(3000):  # 190 MB of bodies offered
            conn.send(b"put 0 0 60 65536\r\n" + body + b"\r\n")
            reply = conn.recv_reply()
            if reply == b"OUT_OF_MEMORY\r\n":
                refused += 1
                if refused > 10:
                    break
            else:
                assert reply.startswith(b"INSERTED ")
        assert refused > 10
        rss = int(stat(conn, "haqueue-memory-rss"))
        # Between readings (every 0.1 s) admitted puts count an estimate of their cost.
        assert rss < limit + 16 * (1 << 20), f"rss {rss >> 20} MiB, limit {limit >> 20} MiB"
        conn.send(b"reserve-with-timeout 0\r\n")
        job_id = conn.recv_reply().split()[1]
        conn.send(b"delete " + job_id + b"\r\n")
        assert conn.recv_reply() == b"DELETED\r\n"


def test_a_pipelined_burst_is_served_in_turns_with_other_connections():
    # 200,000 pipelined commands on one connection: the other connection's
    # command is answered long before the burst is through.
    with haqueue() as srv, srv.connect() as burst, srv.connect() as other:
        burst.sock.sendall(b"list-tube-used\r\n" * 200_000)
        t0 = time.monotonic()
        other.send(b"put 0 0 60 1\r\nx\r\n")
        assert other.recv_reply(timeout=2).startswith(b"INSERTED ")
        answered_after = time.monotonic() - t0
        got = 0
        while got < 200_000:
            got += len(burst.recv_replies(min(10_000, 200_000 - got), timeout=30))
        burst_took = time.monotonic() - t0
        assert answered_after < burst_took / 4, (answered_after, burst_took)


@pytest.mark.slow
def test_ten_thousand_idle_connections_and_load_are_served(raise_nofile):
    raise_nofile(10_300)
    with haqueue("--max-connections", "10010") as srv:
        idle = []
        try:
            for _ in range(10_000):
                idle.append(socket.create_connection((srv.host, srv.port), timeout=10))
            deadline = time.monotonic() + 30
            while current_connections(srv.host, srv.port) < 10_001:
                assert time.monotonic() < deadline
                time.sleep(0.1)
            # Load on top: a producer and a worker, each synchronous.
            with srv.connect() as producer, srv.connect() as worker:
                for i in range(500):
                    producer.send(b"put 0 0 60 4\r\n%04d\r\n" % i)
                    assert producer.recv_reply().startswith(b"INSERTED ")
                    worker.send(b"reserve-with-timeout 5\r\n")
                    job = worker.recv_reply()
                    assert job.endswith(b"\r\n%04d\r\n" % i)
                    worker.send(b"delete " + job.split()[1] + b"\r\n")
                    assert worker.recv_reply() == b"DELETED\r\n"
                # Some of the idle ones wake up and are answered too.
                for sock in idle[::1000]:
                    sock.sendall(b"list-tube-used\r\n")
                    assert sock.recv(100) == b"USING default\r\n"
                # 10,000 idle + producer + worker; the rest of the limit fills and then refuses.
                extra = [socket.create_connection((srv.host, srv.port), timeout=10) for _ in range(8)]
                idle += extra
                with srv.connect() as beyond:
                    beyond.send(b"stats\r\n")
                    assert beyond.wait_closed(timeout=5) == b""
                producer.send(b"stats\r\n")
                body = producer.recv_reply().decode()
                assert "\nhaqueue-rejected-connections: 1\n" in body
                assert "\ncurrent-connections: 10010\n" in body
        finally:
            for sock in idle:
                sock.close()


def test_a_long_pipeline_then_half_close_is_answered_in_full_as_beanstalkd_does():
    # `printf ... | nc`: everything is sent, then the sending side shuts; the
    # node answers every command, however many turns that takes, then closes.
    pipeline = b"put 0 0 60 1\r\nx\r\n" * 3000 + b"list-tube-used\r\n" * 3000
    for start in (beanstalkd, haqueue):
        with start() as srv, srv.connect() as conn:
            conn.send(pipeline)
            conn.sock.shutdown(socket.SHUT_WR)
            replies, rest = split_replies(conn.wait_closed(timeout=30))
            assert rest == b""
            assert len(replies) == 6000, (srv.name, len(replies))
            assert replies[-1] == b"USING default\r\n"



def test_big_puts_on_their_way_share_the_node_wide_input_budget_and_each_completes():
    size = 3_000_000
    request = size + 2  # the body and its CRLF
    line = f"put 0 0 60 {size}\r\n".encode()
    body = b"x" * size + b"\r\n"
    with haqueue("-z", str(size), "--max-input-buffers", str(2 * request)) as srv, srv.connect() as watcher:
        with srv.connect() as a, srv.connect() as b, srv.connect() as c:
            a.send(line + body[:1000])
            b.send(line + body[:1000])
            wait_for_stat(watcher, "haqueue-input-buffers", str(2 * request))
            c.send(line + body[:1000])  # no room left: c waits its turn, and is not read
            wait_for_stat(watcher, "haqueue-input-buffer-waits", "1")
            assert stat(watcher, "haqueue-input-buffers") == str(2 * request)
            a.send(body[1000:])
            assert a.recv_reply().startswith(b"INSERTED ")
            # a's bytes went back and c holds them now: still two requests' worth
            wait_for_stat(watcher, "haqueue-input-buffers", str(2 * request))
            c.send(body[1000:])
            assert c.recv_reply().startswith(b"INSERTED ")
            b.send(body[1000:])
            assert b.recv_reply().startswith(b"INSERTED ")
        wait_for_stat(watcher, "haqueue-input-buffers", "0")
        assert stat(watcher, "current-jobs-ready") == "3"


def test_many_clients_starting_big_puts_cannot_grow_the_node_beyond_the_input_budget():
    # Without the budget each connection holds its put's body as it arrives: 24 of
    # 4 MB grew the node by ~96 MiB. With it, two requests' worth is read, and the
    # others wait with at most a socket read each, their bodies in the kernel's buffers.
    size, clients = 4_000_000, 24
    budget = 2 * (size + 2)
    line = f"put 0 0 60 {size}\r\n".encode()
    with haqueue("-z", str(size), "--max-input-buffers", str(budget)) as srv, srv.connect() as watcher:
        node = psutil.Process(srv.pid)
        before = node.memory_info().rss
        conns = [srv.connect() for _ in range(clients)]
        try:
            for conn in conns:
                conn.send(line)
            for conn in conns:  # as much of each body as the kernel takes, all but its end
                conn.sock.setblocking(False)
                try:
                    conn.sock.send(b"x" * (size - 1))
                except BlockingIOError:
                    pass
            wait_for_stat(watcher, "haqueue-input-buffer-waits", str(clients - 2))
            wait_for_stat(watcher, "haqueue-input-buffers", str(budget))
            grown = node.memory_info().rss - before
            assert grown < budget + 16 * (1 << 20), f"the node grew by {grown / (1 << 20):.0f} MiB"
        finally:
            for conn in conns:
                conn.close()
        wait_for_stat(watcher, "haqueue-input-buffers", "0")
        assert stat(watcher, "current-connections") == "1"


def test_a_client_that_stops_sending_a_big_put_is_closed_and_the_next_goes_on():
    size = 1_000_000
    line = f"put 0 0 60 {size}\r\n".encode()
    body = b"y" * size + b"\r\n"
    with haqueue("-z", str(size), "--max-input-buffers", str(size + 2), "--output-timeout", "0.5") as srv, \
            srv.connect() as watcher, srv.connect() as stalled, srv.connect() as next_:
        stalled.send(line + body[:100_000])  # and then nothing
        wait_for_stat(watcher, "haqueue-input-buffers", str(size + 2))
        next_.send(line + body[:1000])
        wait_for_stat(watcher, "haqueue-input-stall-closes", "1")
        next_.send(body[1000:])
        assert next_.recv_reply().startswith(b"INSERTED ")
        with pytest.raises(ConnectionClosed):
            stalled.recv_reply()
