"""Beanstalk clients that find whichever node serves, as a user's client would.

Only the leader listens on the client port (docs/design.md I3), so a client tries
each node's address in turn until one accepts. Every socket has a timeout: a
SIGSTOPped node still accepts connections in the kernel but never answers,
and a test must not hang on it. Connection trouble (reset, EOF, timeout)
surfaces as `OSError`/`ConnectionError`; the caller treats the connection as
dead and the outcome of its in-flight command as unknown (docs/design.md I1).
"""

from __future__ import annotations

import socket
import time

import greenstalk

CONNECT_TIMEOUT = 0.3
OP_TIMEOUT = 3.0  # > any reserve-with-timeout the tests use

CONNECTION_TROUBLE = (OSError, ConnectionError, AssertionError)
# AssertionError: greenstalk asserts a reply ends in CRLF; a reply cut off by a
# dying connection can trip it.


class NoServingNode(RuntimeError):
    pass


def connect(address: str, port: int, timeout: float = OP_TIMEOUT) -> greenstalk.Client:
    sock = socket.create_connection((address, port), timeout=CONNECT_TIMEOUT)
    sock.settimeout(timeout)
    return greenstalk.Client(sock, encoding=None)


def connect_serving(spec, deadline: float, avoid: str | None = None,
                    timeout: float = OP_TIMEOUT) -> tuple[str, greenstalk.Client]:
    """(node id, client) for the first node that accepts; `avoid` is tried last."""
    order = sorted(spec.nodes, key=lambda m: m.id == avoid)
    while True:
        for member in order:
            try:
                return member.id, connect(member.address, member.client_port, timeout)
            except OSError:
                continue
        if time.monotonic() >= deadline:
            raise NoServingNode("no node accepted a client connection")
        time.sleep(0.02)


def client_for(cluster, node_id: str, timeout: float = OP_TIMEOUT) -> greenstalk.Client:
    member = cluster.spec.node(node_id)
    return connect(member.address, member.client_port, timeout)


def port_refuses(address: str, port: int) -> bool:
    try:
        socket.create_connection((address, port), timeout=CONNECT_TIMEOUT).close()
    except ConnectionRefusedError:
        return True
    except OSError:
        return False
    return False


def job_stats(client: greenstalk.Client, job_id: int) -> dict | None:
    try:
        return client.stats_job(job_id)
    except greenstalk.NotFoundError:
        return None


def peek_body(client: greenstalk.Client, job_id: int) -> bytes | None:
    try:
        return client.peek(job_id).body
    except greenstalk.NotFoundError:
        return None
