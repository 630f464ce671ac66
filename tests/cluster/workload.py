"""A checked workload: producers and consumers against whichever node serves.

Threads put, reserve, delete, release and bury through real connections,
reconnecting on any connection trouble, and write everything they learn into
a `Ledger`: which puts were acknowledged (id, body, serving node, time),
which had an unknown outcome, which deletes were sent and acknowledged, and
every reservation with the time its RESERVED reply arrived and the time its
DELETE/RELEASE/BURY was sent. The checks below then hold the cluster to
docs/design.md:

- I7: every acknowledged put is in the queue with its body, unless a delete
  for it was sent (an unacknowledged delete may have been applied); a job
  whose delete was acknowledged is gone.
- No phantom or duplicate: every job in the queue carries the body of a put
  this workload sent (acknowledged or not), and no body appears twice.
- I6: ids are unique, and puts served by a later leader get ids above every
  id the earlier leader acknowledged.
- I4: no job is reserved by two live connections at once. Times come from
  the client side, so the check uses only what is certain: a reservation
  certainly held the job from its RESERVED reply until its release command
  was sent. Two such intervals of one job must not intersect. A reservation
  whose connection died is certain only at the instant of its reply.
"""

from __future__ import annotations

import itertools
import threading
import time
from dataclasses import dataclass, field

import greenstalk

from tests.cluster.clients import CONNECTION_TROUBLE, NoServingNode, connect_serving, peek_body

TUBE = "checked"
TTR = 60  # long: no time-to-run expiry may hand a job out again during a test


@dataclass
class Put:
    id: int
    body: bytes
    node: str
    acked_at: float


@dataclass
class Reservation:
    job: int
    conn: int
    node: str
    reserved_at: float  # RESERVED reply received
    end_sent_at: float | None = None  # DELETE/RELEASE/BURY sent
    end: str = "held"  # deleted | released | buried | not-found | died | held


@dataclass
class Ledger:
    lock: threading.Lock = field(default_factory=threading.Lock)
    puts: dict[int, Put] = field(default_factory=dict)
    unknown_puts: set[bytes] = field(default_factory=set)
    delete_sent: set[int] = field(default_factory=set)
    delete_acked: set[int] = field(default_factory=set)
    reservations: list[Reservation] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    reconnects: int = 0

    def first_put_after(self, t: float, node: str | None = None) -> Put | None:
        with self.lock:
            later = [p for p in self.puts.values()
                     if p.acked_at >= t and (node is None or p.node == node)]
        return min(later, key=lambda p: p.acked_at, default=None)

    def acked_on(self, node: str) -> int:
        with self.lock:
            return sum(1 for p in self.puts.values() if p.node == node)


class Workload:
    """`producers` putting and `consumers` reserving/deleting on TUBE until stop()."""

    def __init__(self, cluster, producers: int = 2, consumers: int = 2, body_size: int = 64,
                 find_timeout: float = 10.0) -> None:
        self.spec = cluster.spec
        self.ledger = Ledger()
        self.body_size = body_size
        self.find_timeout = find_timeout
        self._stop = threading.Event()
        self._conn_ids = itertools.count(1)
        self._threads = [threading.Thread(target=self._run, args=(self._produce, f"p{i}"), daemon=True)
                         for i in range(producers)]
        self._threads += [threading.Thread(target=self._run, args=(self._consume, f"c{i}"), daemon=True)
                          for i in range(consumers)]

    def start(self) -> "Workload":
        for t in self._threads:
            t.start()
        return self

    def stop(self) -> Ledger:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=15)
        stuck = [t.name for t in self._threads if t.is_alive()]
        assert not stuck, f"workload threads did not stop: {stuck}"
        return self.ledger

    def wait_for_puts(self, node: str, count: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.ledger.acked_on(node) >= count:
                return True
            time.sleep(0.02)
        return False

    # ------------------------------------------------------------ threads
    def _run(self, body, name: str) -> None:
        avoid = None
        while not self._stop.is_set():
            try:
                node, client = connect_serving(self.spec, time.monotonic() + self.find_timeout, avoid)
            except NoServingNode as exc:
                with self.ledger.lock:
                    self.ledger.errors.append(f"{name}: {exc}")
                return
            conn = next(self._conn_ids)
            try:
                body(client, node, conn, name)
            except CONNECTION_TROUBLE:
                avoid = node
                with self.ledger.lock:
                    self.ledger.reconnects += 1
            except Exception as exc:  # a protocol surprise: the test must see it
                with self.ledger.lock:
                    self.ledger.errors.append(f"{name} on {node}: {exc!r}")
                return
            finally:
                client.close()

    def _produce(self, client: greenstalk.Client, node: str, conn: int, name: str) -> None:
        client.use(TUBE)
        seq = 0
        while not self._stop.is_set():
            seq += 1
            body = f"{name}-{conn}-{seq}-".encode().ljust(self.body_size, b"x")
            try:
                job_id = client.put(body, ttr=TTR)
            except CONNECTION_TROUBLE:
                with self.ledger.lock:
                    self.ledger.unknown_puts.add(body)
                raise
            now = time.monotonic()
            with self.ledger.lock:
                if job_id in self.ledger.puts:
                    self.ledger.errors.append(f"id {job_id} acknowledged twice")
                self.ledger.puts[job_id] = Put(job_id, body, node, now)

    def _consume(self, client: greenstalk.Client, node: str, conn: int, name: str) -> None:
        client.watch(TUBE)
        client.ignore("default")
        ledger = self.ledger
        n = 0
        while not self._stop.is_set():
            try:
                job = client.reserve(timeout=1)
            except greenstalk.TimedOutError:
                continue
            res = Reservation(job.id, conn, node, time.monotonic())
            with ledger.lock:
                ledger.reservations.append(res)
            n += 1
            try:
                # Mostly delete; some release (the job is reserved again,
                # perhaps by another consumer), a few bury.
                if n % 13 == 0:
                    res.end_sent_at = time.monotonic()
                    client.bury(job)
                    res.end = "buried"
                elif n % 5 == 0:
                    res.end_sent_at = time.monotonic()
                    client.release(job)
                    res.end = "released"
                else:
                    with ledger.lock:
                        ledger.delete_sent.add(job.id)
                    res.end_sent_at = time.monotonic()
                    client.delete(job)
                    res.end = "deleted"
                    with ledger.lock:
                        ledger.delete_acked.add(job.id)
            except greenstalk.NotFoundError:
                res.end = "not-found"
            except CONNECTION_TROUBLE:
                res.end = "died"
                raise


# ---------------------------------------------------------------- checks
def check_reservations(ledger: Ledger) -> list[str]:
    """I4: the certain hold intervals of one job never intersect."""
    problems = []
    by_job: dict[int, list[Reservation]] = {}
    for r in ledger.reservations:
        if r.end == "not-found":
            problems.append(f"job {r.job}: reserved on conn {r.conn} but its {r.end} reply said NOT_FOUND")
        by_job.setdefault(r.job, []).append(r)
    for job, rs in by_job.items():
        rs.sort(key=lambda r: r.reserved_at)
        for a, b in zip(rs, rs[1:]):
            certain_end = a.end_sent_at if a.end in ("deleted", "released", "buried") else a.reserved_at
            if b.reserved_at < certain_end:
                problems.append(f"job {job}: reserved by conn {b.conn} on {b.node} while conn {a.conn} "
                                f"on {a.node} still held it ({a.end})")
            if a.end in ("deleted", "buried") and a.end_sent_at is not None:
                problems.append(f"job {job}: reserved again by conn {b.conn} after conn {a.conn} {a.end} it")
    return problems


def check_contents(ledger: Ledger, client: greenstalk.Client) -> list[str]:
    """I7, no phantoms, no duplicates: read every job the queue holds on `client`'s node."""
    problems = []
    # A sentinel put tells the next id; every job ever created has a lower one.
    client.use("sentinel")
    top = client.put(b"sentinel")
    client.delete(top)
    seen: dict[bytes, int] = {}
    known = {p.body for p in ledger.puts.values()} | ledger.unknown_puts
    for job_id in range(1, top):
        body = peek_body(client, job_id)
        put = ledger.puts.get(job_id)
        if body is None:
            if put is not None and job_id not in ledger.delete_sent:
                problems.append(f"job {job_id}: put was acknowledged, never deleted, and is gone")
            continue
        if job_id in ledger.delete_acked:
            problems.append(f"job {job_id}: delete was acknowledged, but the job is still there")
        if put is not None and body != put.body:
            problems.append(f"job {job_id}: body {body[:24]!r} differs from the acknowledged {put.body[:24]!r}")
        if body not in known:
            problems.append(f"job {job_id}: body {body[:24]!r} was never put")
        if body in seen:
            problems.append(f"job {job_id}: duplicate of job {seen[body]} ({body[:24]!r})")
        seen[body] = job_id
    for job_id in ledger.puts:
        if job_id >= top:
            problems.append(f"job {job_id}: acknowledged id at or above the next id {top}")
    return problems


def check_ids_increase(ledger: Ledger, old_node: str, new_node: str) -> list[str]:
    """I6: the new leader hands out ids above every id the old one acknowledged."""
    old = [p.id for p in ledger.puts.values() if p.node == old_node]
    new = [p.id for p in ledger.puts.values() if p.node == new_node]
    if old and new and min(new) <= max(old):
        return [f"new leader {new_node} gave id {min(new)} <= old leader {old_node}'s maximum {max(old)}"]
    return []
