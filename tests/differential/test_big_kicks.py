"""A kick bigger than one entry's share (server/batcher.py KICKS_PER_ENTRY) answers as beanstalkd's.

haqueue splits such a kick into entries of at most KICKS_PER_ENTRY jobs (issue 23,
B3) and replies once with the sum. beanstalkd's single kick moves buried jobs if
the tube has any, else delayed ones, and never both: these scripts cross the
part boundary with both kinds in the tube, against a real beanstalkd 1.12 in the
same run, and compare every reply and the tube's counts afterwards.
"""

from __future__ import annotations

import contextlib

import pytest

from haqueue.server.batcher import KICKS_PER_ENTRY
from tests.support.servers import beanstalkd, haqueue

PART = KICKS_PER_ENTRY
WORKERS = 8


def pipelined(conn, commands: list[bytes], window: int = 500) -> list[bytes]:
    """Every command's reply, sent `window` at a time (neither side's buffers fill)."""
    replies = []
    for start in range(0, len(commands), window):
        part = commands[start:start + window]
        conn.send(b"".join(part))
        replies += conn.recv_replies(len(part), timeout=30)
    return replies


def run(server, buried: int, delayed: int, kicks: list[int]) -> list[bytes]:
    """`buried` buried and `delayed` delayed jobs in tube t, then the kicks; every reply that
    tells the servers apart: the kicks' and the tube's counts after each. Jobs are
    reserved and buried over WORKERS connections at once (a connection reserves one
    job at a time; alone it took longer than a time-to-run on this loaded machine)."""
    with contextlib.ExitStack() as stack:
        conn = stack.enter_context(server.connect())
        workers = [stack.enter_context(server.connect()) for _ in range(WORKERS)]
        for c in (conn, *workers):
            c.send(b"use t\r\nwatch t\r\nignore default\r\n")
            c.recv_replies(3)
        replies = pipelined(conn, [b"put 0 0 3600 1\r\nb\r\n"] * buried
                            + [b"put 0 1000 3600 1\r\nd\r\n"] * delayed)
        assert all(r.startswith(b"INSERTED ") for r in replies)
        shares = [buried // WORKERS + (n < buried % WORKERS) for n in range(WORKERS)]
        for start in range(0, max(shares), 500):
            rounds = [min(500, share - start) if share > start else 0 for share in shares]
            for c, count in zip(workers, rounds):
                c.send(b"reserve-with-timeout 0\r\n" * count)
            ids = [[r.split()[1] for r in c.recv_replies(count, timeout=30)] if count else []
                   for c, count in zip(workers, rounds)]
            for c, mine in zip(workers, ids):
                c.send(b"".join(b"bury %s 0\r\n" % job_id for job_id in mine))
            for c, mine in zip(workers, ids):
                assert set(c.recv_replies(len(mine), timeout=30)) <= {b"BURIED\r\n"}
        seen = []
        for bound in kicks:
            conn.send(b"kick %d\r\n" % bound)
            seen.append(conn.recv_reply(timeout=60))
            conn.send(b"stats-tube t\r\n")
            stats = conn.recv_reply().decode()
            seen.append(" ".join(line for line in stats.splitlines()
                                 if line.startswith(("current-jobs-ready", "current-jobs-buried",
                                                     "current-jobs-delayed"))).encode())
        return seen


@pytest.mark.parametrize("buried, delayed, kicks", [
    # More buried than two parts, delayed jobs behind them: only the buried move.
    (2 * PART + 345, 700, [3 * PART, 3 * PART]),
    # Exactly one part of buried jobs: the second part must not start on the delayed ones.
    (PART, 3, [PART + 1, PART + 1]),
    # Delayed jobs only, across parts, the bound ending inside a part.
    (0, 2 * PART + 10, [PART + 7, 10 * PART]),
], ids=["buried-over-parts", "buried-exactly-one-part", "delayed-over-parts"])
def test_a_kick_in_parts_replies_and_moves_what_beanstalkds_one_kick_does(buried, delayed, kicks):
    with beanstalkd() as reference, haqueue("-F") as node:
        expected = run(reference, buried, delayed, kicks)
        got = run(node, buried, delayed, kicks)
    assert got == expected
    assert expected[0] == b"KICKED %d\r\n" % min(kicks[0], buried or delayed)
