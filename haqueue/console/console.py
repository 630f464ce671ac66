"""Console: one operator's operation on a cluster's queue, run on the leader.

Rules.
- Only the leader listens on the client port (docs/design.md I3), so the
  leader is found by trying each node of the cluster file in turn until one
  accepts and answers; with no node serving (an election under way) it keeps
  trying until `timeout`, so a command typed during a failover waits for the
  new leader instead of failing.
- It talks the beanstalkd protocol like any client: each change goes through
  the Raft log and is answered once committed (I1). It first names itself
  (`haqueue-operator console`, haqueue's one extension; beanstalkd answers
  UNKNOWN_COMMAND, which is fine), so the node records each change it makes
  as an event (server/beanstalk/operator_events.py).
- Retried on another node: anything that broke before a change was sent
  (connect, `use`, reads). Never retried: a change whose reply was lost; its
  outcome is unknown (OutcomeUnknown), because a put sent twice is two jobs.
- Every socket has a timeout: a stopped node accepts in the kernel and never
  answers, and the console must not hang on it.
"""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass
from typing import Callable

from haqueue.console.errors import NotFound, OutcomeUnknown, Refused, Unreachable
from haqueue.protocol.beanstalk_replies import Reply, ReplyError, ReplyReader, yaml_fields, yaml_items

CONNECT_TIMEOUT = 0.3
OP_TIMEOUT = 3.0
FIND_TIMEOUT = 10.0  # > a failover (docs/reliability.md: a new leader serves within ~2 s)
RETRY_PAUSE = 0.05
PEEK_STATES = ("ready", "delayed", "buried")
NAME = "console"


@dataclass(frozen=True)
class Endpoint:
    name: str  # the node id, or the address given
    host: str
    port: int


def parse_address(text: str) -> Endpoint:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536 or not host:
        raise ValueError(f"{text!r} is not HOST:PORT")
    return Endpoint(text, host.strip("[]"), int(port))


class _Trouble(Exception):
    """The connection broke or the peer is not a beanstalkd server."""


class Connection:
    """One beanstalkd connection, request by request."""

    def __init__(self, endpoint: Endpoint, timeout: float) -> None:
        self.endpoint = endpoint
        self.sent_change = False
        try:
            self.sock = socket.create_connection((endpoint.host, endpoint.port), timeout=CONNECT_TIMEOUT)
        except OSError as exc:
            raise _Trouble(str(exc)) from None
        self.sock.settimeout(timeout)
        self.reader = ReplyReader()
        self.ready: list[Reply] = []

    def call(self, line: str, body: bytes | None = None, change: bool = False) -> Reply:
        data = line.encode("ascii") + b"\r\n"
        if body is not None:
            data += body + b"\r\n"
        if change:
            self.sent_change = True
        try:
            self.sock.sendall(data)
            while not self.ready:
                chunk = self.sock.recv(65536)
                if not chunk:
                    raise _Trouble("the connection closed")
                self.ready += self.reader.feed(chunk)
        except (OSError, ReplyError) as exc:
            raise _Trouble(str(exc)) from None
        return self.ready.pop(0)

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


def _refused(reply: Reply, what: str) -> Refused:
    return Refused(f"{what}: the server answered {' '.join((reply.word, *reply.args))}")


def _expect(reply: Reply, word: str, what: str, not_found: str | None = None) -> Reply:
    """`reply` if it is `word`; NotFound(not_found) for NOT_FOUND when that is given; else Refused."""
    if not_found is not None and reply.word == "NOT_FOUND":
        raise NotFound(not_found)
    if reply.word != word:
        raise _refused(reply, what)
    return reply


class Console:
    def __init__(self, endpoints: list[Endpoint], timeout: float = FIND_TIMEOUT,
                 op_timeout: float = OP_TIMEOUT) -> None:
        self.endpoints = list(endpoints)
        self.timeout = timeout
        self.op_timeout = op_timeout
        self.served_by: str | None = None  # the node that answered the last operation

    @classmethod
    def for_cluster(cls, cluster, **kwargs) -> "Console":
        return cls([Endpoint(n.id, n.address, n.client_port) for n in cluster.nodes], **kwargs)

    # ------------------------------------------------------------- running
    def _open(self, deadline: float) -> Connection:
        last = "no node tried"
        first = True
        while first or time.monotonic() < deadline:
            first = False
            for endpoint in self.endpoints:
                try:
                    conn = Connection(endpoint, self.op_timeout)
                except _Trouble as exc:
                    last = f"{endpoint.name}: {exc}"
                    continue
                try:
                    hello = conn.call(f"haqueue-operator {NAME}")
                except _Trouble as exc:
                    conn.close()
                    last = f"{endpoint.name}: {exc}"
                    continue
                if hello.word not in ("NOTED", "UNKNOWN_COMMAND"):  # beanstalkd: UNKNOWN_COMMAND
                    conn.close()
                    last = f"{endpoint.name}: answered {hello.word}, not a beanstalkd server"
                    continue
                self.served_by = endpoint.name
                return conn
            time.sleep(RETRY_PAUSE)  # polling for a leader, bounded by the deadline
        names = ", ".join(e.name for e in self.endpoints)
        raise Unreachable(f"no node serves clients ({names}) within {self.timeout:g} s; last: {last}")

    def run(self, operation: Callable[[Connection], object]):
        """operation(conn) on the leader; retried on the next leader while no change was sent."""
        deadline = time.monotonic() + self.timeout
        while True:
            conn = self._open(deadline)
            try:
                return operation(conn)
            except _Trouble as exc:
                if conn.sent_change:
                    raise OutcomeUnknown(
                        f"{conn.endpoint.name}: {exc} after the change was sent: it may or may not "
                        "have been applied") from None
                if time.monotonic() >= deadline:
                    raise Unreachable(f"{conn.endpoint.name}: {exc}") from None
            finally:
                conn.close()

    # ---------------------------------------------------------------- jobs
    def put(self, tube: str, body: bytes, pri: int = 0, delay: int = 0, ttr: int = 60) -> int:
        def op(conn: Connection) -> int:
            _use(conn, tube)
            reply = conn.call(f"put {pri} {delay} {ttr} {len(body)}", body, change=True)
            if reply.word in ("INSERTED", "BURIED") and reply.args:
                return int(reply.args[0])
            raise _refused(reply, f"put into tube {tube}")

        return self.run(op)

    def peek(self, tube: str, state: str) -> dict:
        if state not in PEEK_STATES:
            raise ValueError(state)

        def op(conn: Connection) -> dict:
            _use(conn, tube)
            reply = _expect(conn.call(f"peek-{state}"), "FOUND", f"peek-{state}",
                            not_found=f"no {state} job in tube {tube}")
            return {"id": int(reply.args[0]), "body": reply.body}

        return self.run(op)

    def show(self, job_id: int) -> dict:
        def op(conn: Connection) -> dict:
            reply = _expect(conn.call(f"peek {job_id}"), "FOUND", f"peek {job_id}",
                            not_found=f"job {job_id} not found")
            stats = _job_stats(conn, job_id)
            return {"id": job_id, "body": reply.body, "stats": stats}

        return self.run(op)

    def delete(self, job_id: int) -> None:
        def op(conn: Connection) -> None:
            reply = conn.call(f"delete {job_id}", change=True)
            if reply.word == "DELETED":
                return
            if reply.word == "NOT_FOUND":
                _explain_not_found(conn, job_id, "delete")
            raise _refused(reply, f"delete {job_id}")

        self.run(op)

    def kick_job(self, job_id: int) -> None:
        def op(conn: Connection) -> None:
            reply = conn.call(f"kick-job {job_id}", change=True)
            if reply.word == "KICKED":
                return
            if reply.word == "NOT_FOUND":
                stats = _job_stats(conn, job_id)
                if stats is None:
                    raise NotFound(f"job {job_id} not found")
                raise NotFound(f"job {job_id} is {stats.get('state')}, not buried or delayed: nothing to kick")
            raise _refused(reply, f"kick-job {job_id}")

        self.run(op)

    def bury(self, job_id: int) -> str:
        """Bury a job that is not reserved: reserve it by id, then bury it at its priority.
        Returns "buried", or "already buried"."""

        def op(conn: Connection) -> str:
            stats = _job_stats(conn, job_id)
            if stats is None:
                raise NotFound(f"job {job_id} not found")
            if stats.get("state") == "buried":
                return "already buried"
            if stats.get("state") == "reserved":
                raise Refused(f"job {job_id} is reserved by a worker: only that worker may bury it")
            reply = conn.call(f"reserve-job {job_id}", change=True)
            if reply.word != "RESERVED":
                if reply.word == "NOT_FOUND":
                    raise NotFound(f"job {job_id} is gone (deleted or reserved meanwhile)")
                raise _refused(reply, f"reserve-job {job_id}")
            _expect(conn.call(f"bury {job_id} {stats.get('pri', 0)}", change=True), "BURIED", f"bury {job_id}")
            return "buried"

        return self.run(op)

    # --------------------------------------------------------------- tubes
    def tubes(self) -> list[str]:
        def op(conn: Connection) -> list[str]:
            return yaml_items(_expect(conn.call("list-tubes"), "OK", "list-tubes").body)

        return self.run(op)

    def tube_stats(self, tube: str) -> dict:
        def op(conn: Connection) -> dict:
            reply = _expect(conn.call(f"stats-tube {tube}"), "OK", f"stats-tube {tube}",
                            not_found=f"tube {tube} not found")
            return yaml_fields(reply.body)

        return self.run(op)

    def pause(self, tube: str, seconds: int) -> None:
        def op(conn: Connection) -> None:
            _expect(conn.call(f"pause-tube {tube} {seconds}", change=True), "PAUSED", f"pause-tube {tube}",
                    not_found=f"tube {tube} not found")

        self.run(op)

    def kick(self, tube: str, bound: int) -> int:
        def op(conn: Connection) -> int:
            _use(conn, tube)
            reply = conn.call(f"kick {bound}", change=True)
            if reply.word != "KICKED" or not reply.args:
                raise _refused(reply, f"kick {bound}")
            return int(reply.args[0])

        return self.run(op)

    def next_id(self) -> int:
        """The id the next put gets (haqueue's stats; beanstalkd: total-jobs + 1)."""

        def op(conn: Connection) -> int:
            fields = yaml_fields(_expect(conn.call("stats"), "OK", "stats").body)
            return int(fields.get("haqueue-next-id", fields.get("total-jobs", 0) + 1))

        return self.run(op)

    def jobs_from(self, tube: str, first: int, last: int) -> list[dict]:
        """The jobs with ids first..last-1 still in `tube`, oldest first (for tail)."""

        def op(conn: Connection) -> list[dict]:
            found = []
            for job_id in range(first, last):
                stats = _job_stats(conn, job_id)
                if stats is None or stats.get("tube") != tube:
                    continue
                reply = conn.call(f"peek {job_id}")
                if reply.word == "FOUND":
                    found.append({"id": job_id, "body": reply.body, "state": stats.get("state")})
            return found

        return self.run(op)


def _use(conn: Connection, tube: str) -> None:
    _expect(conn.call(f"use {tube}"), "USING", f"use {tube}")


def _job_stats(conn: Connection, job_id: int) -> dict | None:
    reply = conn.call(f"stats-job {job_id}")
    if reply.word == "NOT_FOUND":
        return None
    return yaml_fields(_expect(reply, "OK", f"stats-job {job_id}").body)


def _explain_not_found(conn: Connection, job_id: int, what: str) -> None:
    stats = _job_stats(conn, job_id)
    if stats is None:
        raise NotFound(f"job {job_id} not found")
    if stats.get("state") == "reserved":
        raise Refused(f"job {job_id} is reserved by a worker: only that worker may {what} it")
    raise NotFound(f"job {job_id}: {what} answered NOT_FOUND (it is {stats.get('state')})")
