"""Differential: the same Gearman byte scripts to real gearmand 1.1.20 and to haqueue.

Each script is a function that drives one server through raw connections
(tests/support/gearman.GearConn) and returns its transcript: every packet and
admin answer it read, job handles normalised (gearmand says H:host:N, haqueue
H:haqueue:N). Both servers run fresh for each script, on ephemeral loopback
ports, and are stopped after it. Where they must agree the transcripts are
compared whole; the scripts under "on purpose" run on both too and state
what each does, with the reason haqueue differs (docs/gearman.md lists them).

No sleeps: a connection proves it has nothing more pending by answering an
ECHO_REQ next (`synced`), since a server answers one connection in order.
"""

from __future__ import annotations

import re
import struct
import time

import pytest

from haqueue.protocol.gearman import request
from tests.support.gearman import GearConn, Normaliser, gearmand, haqueue_gearman, parse
from tests.support.servers import HOST

pytestmark = pytest.mark.timeout(60)


class World:
    """One server as a script sees it: connections, and the transcript they read."""

    def __init__(self, port: int, host: str = HOST) -> None:
        self.port = port
        self.host = host
        self.normalise = Normaliser()
        self.transcript: list[tuple[str, bytes]] = []
        self.conns: list[GearConn] = []

    def conn(self) -> GearConn:
        c = GearConn(self.port, host=self.host)
        self.conns.append(c)
        return c

    def read(self, label: str, c: GearConn, n: int = 1) -> list[bytes]:
        """n packets from c, recorded normalised; returned as sent (real handles)."""
        packets = c.packets(n)
        for p in packets:
            self.transcript.append((label, self.normalise(p)))
        return packets

    def admin(self, label: str, c: GearConn, line: bytes) -> bytes:
        answer = self.normalise(c.admin(line))
        self.transcript.append((label, answer))
        return answer

    def synced(self, label: str, c: GearConn) -> None:
        """Nothing else is pending on c: the next packet is the answer to this ECHO."""
        c.req("ECHO_REQ", b"sync")
        self.read(label + " (nothing before the echo)", c)

    def close(self) -> None:
        for c in self.conns:
            c.close()


def run_both(script) -> tuple[list, list]:
    transcripts = []
    for start in (gearmand, haqueue_gearman):
        with start() as server:
            world = World(server.port)
            try:
                script(world)
            finally:
                world.close()
            transcripts.append(world.transcript)
    return transcripts[0], transcripts[1]


def same(script) -> None:
    reference, ours = run_both(script)
    assert ours == reference


def handle_of(packet: bytes) -> bytes:
    return parse(packet)[1][0]


# ------------------------------------------------------------ shared behaviour
def echo(w: World) -> None:
    c = w.conn()
    c.req("ECHO_REQ", b"with\0nul and \xff bytes")
    w.read("echo", c)
    c.req("ECHO_REQ", b"")
    w.read("empty echo", c)


def background_job_lifecycle(w: World) -> None:
    client, worker = w.conn(), w.conn()
    client.req("SUBMIT_JOB_BG", b"reverse", b"", b"payload\0with nul")
    (created,) = w.read("created", client)
    handle = handle_of(created)
    client.req("GET_STATUS", handle)
    w.read("queued status", client)
    worker.req("CAN_DO", b"reverse")
    worker.req("GRAB_JOB")
    w.read("assign", worker)
    client.req("GET_STATUS", handle)
    w.read("running status", client)
    worker.req("WORK_STATUS", handle, b"3", b"7")
    w.synced("status sent", worker)
    client.req("GET_STATUS", handle)
    w.read("progress", client)
    worker.req("WORK_STATUS", handle, b"abc", b"9x")  # read as atoi reads them: 0 and 9
    w.synced("odd status sent", worker)
    client.req("GET_STATUS", handle)
    w.read("odd progress", client)
    worker.req("WORK_COMPLETE", handle, b"done")
    w.synced("complete sent", worker)
    client.req("GET_STATUS", handle)
    w.read("gone", client)
    worker.req("GRAB_JOB")
    w.read("no job", worker)


def priorities_and_fifo(w: World) -> None:
    client, worker = w.conn(), w.conn()
    for name, data in (("SUBMIT_JOB_LOW_BG", b"low1"), ("SUBMIT_JOB_BG", b"normal1"),
                       ("SUBMIT_JOB_HIGH_BG", b"high1"), ("SUBMIT_JOB_BG", b"normal2"),
                       ("SUBMIT_JOB_HIGH_BG", b"high2"), ("SUBMIT_JOB_LOW_BG", b"low2")):
        client.req(name, b"p", b"", data)
        w.read(f"created {data!r}", client)
    worker.req("CAN_DO", b"p")
    for i in range(6):
        worker.req("GRAB_JOB")
        (assign,) = w.read(f"grab {i}", worker)
        worker.req("WORK_COMPLETE", handle_of(assign), b"")
    worker.req("GRAB_JOB")
    w.read("empty", worker)


def foreground_results_reach_every_attached_client(w: World) -> None:
    first, second, worker = w.conn(), w.conn(), w.conn()
    second.req("OPTION_REQ", b"exceptions")
    w.read("option", second)
    first.req("SUBMIT_JOB", b"fg", b"same-id", b"work")
    w.read("created", first)
    second.req("SUBMIT_JOB", b"fg", b"same-id", b"other data")  # coalesced: same handle
    w.read("coalesced", second)
    second.req("GET_STATUS_UNIQUE", b"same-id")
    w.read("status by unique", second)
    worker.req("CAN_DO", b"fg")
    worker.req("GRAB_JOB_UNIQ")
    (assign,) = w.read("assign uniq", worker)
    handle = handle_of(assign)
    worker.req("WORK_DATA", handle, b"part 1")
    worker.req("WORK_WARNING", handle, b"careful")
    worker.req("WORK_STATUS", handle, b"1", b"2")
    worker.req("WORK_EXCEPTION", handle, b"it broke")
    w.synced("worker", worker)
    w.read("first client (no exceptions option: WORK_FAIL)", first, 4)
    w.read("second client (exceptions)", second, 4)


def unique_dash_coalesces_by_data(w: World) -> None:
    client, worker = w.conn(), w.conn()
    for data in (b"same data", b"same data", b"other"):
        client.req("SUBMIT_JOB_BG", b"dash", b"-", data)
        w.read(f"created {data!r}", client)
    worker.req("CAN_DO", b"dash")
    worker.req("GRAB_JOB_UNIQ")
    w.read("assign", worker)


def one_connection_submitting_twice_is_told_twice(w: World) -> None:
    client, worker = w.conn(), w.conn()
    client.req("SUBMIT_JOB", b"twice", b"u", b"x")
    client.req("SUBMIT_JOB", b"twice", b"u", b"x")
    w.read("created, the same handle", client, 2)
    client.req("GET_STATUS_UNIQUE", b"u")
    w.read("two waiting", client)
    worker.req("CAN_DO", b"twice")
    worker.req("GRAB_JOB")
    (assign,) = w.read("assign", worker)
    worker.req("WORK_COMPLETE", handle_of(assign), b"r")
    w.read("a WORK_COMPLETE per submission", client, 2)
    w.synced("no third", client)


def work_complete_and_fail_to_a_foreground_client(w: World) -> None:
    client, worker = w.conn(), w.conn()
    worker.req("CAN_DO", b"c")
    for outcome in ("WORK_COMPLETE", "WORK_FAIL"):
        client.req("SUBMIT_JOB_HIGH", b"c", b"", b"x")
        w.read("created", client)
        worker.req("GRAB_JOB")
        (assign,) = w.read("assign", worker)
        args = (handle_of(assign), b"result") if outcome == "WORK_COMPLETE" else (handle_of(assign),)
        worker.req(outcome, *args)
        w.read(outcome, client)


def sleep_and_wake(w: World) -> None:
    client, worker = w.conn(), w.conn()
    worker.req("CAN_DO", b"s")
    worker.req("PRE_SLEEP")
    w.synced("asleep, no NOOP yet", worker)
    client.req("SUBMIT_JOB_BG", b"s", b"", b"x")
    w.read("created", client)
    w.read("woken", worker)
    worker.req("PRE_SLEEP")  # a job waits: woken at once
    w.read("woken at once", worker)
    worker.req("GRAB_JOB_ALL")  # gearmand answers JOB_ASSIGN_UNIQ without a reducer
    w.read("assign all", worker)
    other = w.conn()
    other.req("CAN_DO", b"unrelated")
    other.req("PRE_SLEEP")
    client.req("SUBMIT_JOB_BG", b"s", b"", b"y")
    w.read("created", client)
    w.synced("a worker of another function stays asleep", other)


def worker_gone_mid_job_puts_it_back(w: World) -> None:
    client, first = w.conn(), w.conn()
    client.req("SUBMIT_JOB_BG", b"r", b"u1", b"first")
    w.read("created", client)
    client.req("SUBMIT_JOB_BG", b"r", b"", b"second")
    w.read("created", client)
    first.req("CAN_DO", b"r")
    first.req("GRAB_JOB_UNIQ")
    w.read("assigned to the first worker", first)
    first.close()
    wait_until_not_running(w, client, b"u1")  # the server has seen the close
    second = w.conn()
    second.req("CAN_DO", b"r")
    second.req("GRAB_JOB_UNIQ")
    w.read("the same job, to the next worker", second)


def wait_until_not_running(w: World, client: GearConn, unique: bytes, timeout: float = 5.0) -> None:
    """Poll GET_STATUS_UNIQUE (outside the transcript) until the job is known and not running."""
    deadline = time.monotonic() + timeout
    while True:
        client.req("GET_STATUS_UNIQUE", unique)
        _, (_, known, running, *_rest) = parse(client.packet())
        if known == b"1" and running == b"0":
            return
        assert time.monotonic() < deadline, "the job still runs after its worker closed"


def abilities(w: World) -> None:
    client, worker = w.conn(), w.conn()
    client.req("SUBMIT_JOB_BG", b"a1", b"", b"x")
    w.read("created", client)
    worker.req("CAN_DO", b"a1")
    worker.req("CANT_DO", b"a1")
    worker.req("GRAB_JOB")
    w.read("cant do", worker)
    worker.req("CAN_DO_TIMEOUT", b"a1", b"30")
    worker.req("RESET_ABILITIES")
    worker.req("GRAB_JOB")
    w.read("reset", worker)
    worker.req("CAN_DO_TIMEOUT", b"a1", b"30")
    worker.req("GRAB_JOB")
    w.read("can do with a timeout", worker)


def submit_epoch_in_the_past_runs_now(w: World) -> None:
    client, worker = w.conn(), w.conn()
    client.req("SUBMIT_JOB_EPOCH", b"e", b"", b"1000", b"x")
    w.read("created", client)
    worker.req("CAN_DO", b"e")
    worker.req("GRAB_JOB")
    w.read("assign", worker)


def errors_that_keep_the_connection(w: World) -> None:
    c = w.conn()
    c.req("SUBMIT_JOB_BG", b"", b"", b"an empty function name is a name")
    w.read("empty function", c)
    c.req("WORK_COMPLETE", b"H:nobody:1", b"x")
    w.read("complete of an unknown job", c)
    c.req("WORK_FAIL", b"H:nobody:1")
    w.read("fail of an unknown job", c)
    c.req("WORK_DATA", b"H:nobody:1", b"x")
    w.read("data of an unknown job", c)
    c.req("GET_STATUS", b"H:nobody:1")
    w.read("status of an unknown job", c)
    c.req("GET_STATUS_UNIQUE", b"nobody")
    w.read("status of an unknown unique id", c)
    c.req("OPTION_REQ", b"no-such-option")
    w.read("unknown option", c)
    for wrong_role in ("NO_JOB", "JOB_CREATED", "NOOP", "ECHO_RES"):
        c.send(struct.pack(">4sII", b"\0REQ", _type(wrong_role), 0) if wrong_role in ("NO_JOB", "NOOP")
               else struct.pack(">4sII", b"\0REQ", _type(wrong_role), 1) + b"x")
        w.read(f"{wrong_role} from a client", c)
    c.req("SET_CLIENT_ID", b"still-here")
    w.synced("still served", c)


def admin_protocol(w: World) -> None:
    admin, worker, client = w.conn(), w.conn(), w.conn()
    worker.req("SET_CLIENT_ID", b"worker-1")
    worker.req("CAN_DO", b"fa")
    worker.req("CAN_DO", b"fb")
    w.synced("worker", worker)
    client.req("SUBMIT_JOB_BG", b"fa", b"", b"1")
    client.req("SUBMIT_JOB_BG", b"fa", b"", b"2")
    client.req("SUBMIT_JOB_BG", b"fb", b"", b"3")
    w.read("created", client, 3)
    worker.req("GRAB_JOB")
    w.read("one running", worker)
    status = w.admin("status", admin, b"status")
    # Line order differs: gearmand lists functions newest first, haqueue by name.
    w.transcript[-1] = ("status", b"".join(sorted(status.splitlines(keepends=True))))
    answer = w.admin("workers", admin, b"workers")
    # The first column is a file descriptor in gearmand, a connection number in haqueue.
    w.transcript[-1] = ("workers", re.sub(rb"(?m)^\d+ ", b"N ", answer))
    w.admin("unknown command", admin, b"frobnicate now")
    w.admin("maxqueue without a function", admin, b"maxqueue")
    w.admin("maxqueue", admin, b"maxqueue fa 10")
    w.admin("maxqueue, not a number", admin, b"maxqueue fa notanumber")
    w.admin("maxqueue, per priority", admin, b"maxqueue fa 5 x")
    upper = w.admin("upper case", admin, b"STATUS")
    w.transcript[-1] = ("upper case", b"".join(sorted(upper.splitlines(keepends=True))))
    w.admin("an empty line", admin, b"")
    assert re.fullmatch(rb"OK \d+\n", w.admin("getpid", admin, b"getpid"))
    w.transcript.pop()  # the pid differs, of course


def sorted_lines(answer: bytes) -> bytes:
    """An admin table's lines in one order: gearmand lists functions newest first, haqueue by name."""
    return b"".join(sorted(answer.splitlines(keepends=True)))


def admin_table(w: World, label: str, c: GearConn, line: bytes) -> None:
    c.send(line + b"\n")
    deadline = time.monotonic() + 5
    while not (c.buf.endswith(b"\n.\n") or c.buf == b".\n"):  # a table ends with "."
        assert c._fill(deadline), f"no whole {line!r} table; have {bytes(c.buf)!r}"
    w.transcript.append((label, sorted_lines(bytes(c.buf))))
    c.buf.clear()


def functions_stay_listed_after_cant_do_and_reset_abilities(w: World) -> None:
    admin, worker, client = w.conn(), w.conn(), w.conn()
    for name in (b"f1", b"f2", b"f3"):
        worker.req("CAN_DO", name)
    w.synced("abilities", worker)
    admin_table(w, "three workers", admin, b"status")
    worker.req("CANT_DO", b"f1")
    w.synced("cant do", worker)
    admin_table(w, "f1 with no worker", admin, b"status")
    worker.req("RESET_ABILITIES")
    w.synced("reset", worker)
    admin_table(w, "no workers, every function still listed", admin, b"status")
    client.req("SUBMIT_JOB_BG", b"f4", b"", b"x")
    w.read("created", client)
    worker.req("CAN_DO", b"f4")
    worker.req("GRAB_JOB")
    (assign,) = w.read("assign", worker)
    worker.req("WORK_COMPLETE", handle_of(assign), b"")
    w.synced("done", worker)
    worker.req("RESET_ABILITIES")
    w.synced("reset again", worker)
    admin_table(w, "a submitted function with no job left", admin, b"status")


def prioritystatus_counts_queued_jobs_by_priority(w: World) -> None:
    admin, worker, client = w.conn(), w.conn(), w.conn()
    for name, function in (("SUBMIT_JOB_HIGH_BG", b"p1"), ("SUBMIT_JOB_BG", b"p1"), ("SUBMIT_JOB_BG", b"p1"),
                           ("SUBMIT_JOB_LOW_BG", b"p1"), ("SUBMIT_JOB_LOW_BG", b"p2")):
        client.req(name, function, b"", b"x")
        w.read(f"created {name}", client)
    worker.req("CAN_DO", b"p1")
    worker.req("CAN_DO", b"idle")
    worker.req("GRAB_JOB")
    w.read("the high one runs", worker)
    admin_table(w, "prioritystatus", admin, b"prioritystatus")
    admin_table(w, "in capitals", admin, b"PRIORITYSTATUS")
    admin_table(w, "status beside it", admin, b"status")


def maxqueue_of_a_known_function_counts_running_jobs(w: World) -> None:
    admin, worker, client = w.conn(), w.conn(), w.conn()
    client.req("SUBMIT_JOB_BG", b"q", b"", b"1")
    client.req("SUBMIT_JOB_BG", b"q", b"", b"2")
    w.read("created", client, 2)
    worker.req("CAN_DO", b"q")
    worker.req("GRAB_JOB")
    w.read("one runs, one is queued", worker)
    w.admin("maxqueue", admin, b"maxqueue q 2")
    client.req("SUBMIT_JOB_BG", b"q", b"", b"3")
    client.req("SUBMIT_JOB_HIGH", b"q", b"", b"4")
    w.read("full: the running one counts", client, 2)
    admin_table(w, "status", admin, b"status")
    w.admin("maxqueue lifted", admin, b"maxqueue q")
    client.req("SUBMIT_JOB_BG", b"q", b"", b"5")
    w.read("created again", client)


def bad_input_that_keeps_the_connection(w: World) -> None:
    c = w.conn()
    c.send(struct.pack(">4sII", b"\0RES", _type("ECHO_REQ"), 1) + b"x")
    w.read("a response's magic", c)
    c.send(struct.pack(">4sII", b"\0REQ", 5, 0))
    w.read("type 5, which gearmand numbers but does not serve", c)
    from haqueue.protocol.gearman import PACKETS
    for name in ("JOB_CREATED", "NO_JOB", "JOB_ASSIGN", "ECHO_RES", "ERROR", "STATUS_RES", "OPTION_RES",
                 "JOB_ASSIGN_UNIQ", "JOB_ASSIGN_ALL", "STATUS_RES_UNIQUE", "NOOP", "ALL_YOURS"):
        c.req(name, *[b"a"] * PACKETS[_type(name)][1])
        w.read(f"{name} sent by a client", c)
    c.req("SUBMIT_JOB_SCHED", b"f", b"", b"1", b"", b"", b"", b"", b"data")
    w.read("SUBMIT_JOB_SCHED, which gearmand does not serve", c)
    c.req("WORK_FAIL", b"H" * 63)
    w.read("WORK_FAIL, a 63-byte handle", c)
    c.req("WORK_FAIL", b"H" * 64)
    w.read("WORK_FAIL, a 64-byte handle", c)
    c.req("WORK_FAIL", b"H:" + b"x" * 200)
    w.read("WORK_FAIL, a 202-byte handle", c)
    c.req("WORK_COMPLETE", b"H:" + b"x" * 200, b"r")
    w.read("WORK_COMPLETE, a 202-byte handle", c)
    c.req("GET_STATUS", b"H" * 63)
    w.read("GET_STATUS, a 63-byte handle", c)
    w.synced("still served", c)


def _closes_unanswered(data: bytes):
    def script(w: World) -> None:
        c = w.conn()
        c.req("ECHO_REQ", b"before")
        w.read("answered before", c)
        c.send(data + request("ECHO_REQ", b"after, in the same write"))
        w.transcript.append(("closed, nothing more said", b"yes" if c.closes(5.0) and not c.buf else b"no"))
    return script


CLOSING = {
    "a-magic-that-is-not-gearmans": b"\0XYZ" + struct.pack(">II", 16, 1) + b"x",
    "type-0": struct.pack(">4sII", b"\0REQ", 0, 0),
    "type-43": struct.pack(">4sII", b"\0REQ", 43, 1) + b"x",
    "type-99": struct.pack(">4sII", b"\0REQ", 99, 0),
    "get-status-of-a-64-byte-handle": request("GET_STATUS", b"H" * 64),
    "get-status-unique-of-a-64-byte-unique-id": request("GET_STATUS_UNIQUE", b"u" * 64),
}


@pytest.mark.parametrize("data", CLOSING.values(), ids=CLOSING.keys())
def test_input_gearmand_closes_on_closes_the_connection_unanswered(data):
    same(_closes_unanswered(data))


def option_names_in_any_case(w: World) -> None:
    c = w.conn()
    for option in (b"exceptions", b"EXCEPTIONS", b"Exceptions", b"exceptionsX", b""):
        c.req("OPTION_REQ", option)
        w.read(f"option {option!r}", c)


def unique_ids_up_to_64_bytes(w: World) -> None:
    c = w.conn()
    for size in (63, 64, 65, 200):
        c.req("SUBMIT_JOB_BG", b"u", b"u" * size, b"x")
        w.read(f"a {size}-byte unique id", c)
    c.req("GET_STATUS_UNIQUE", b"u" * 63)
    w.read("the 63-byte one is known", c)


def big_results_and_echoes(w: World) -> None:
    client, worker = w.conn(), w.conn()
    client.timeout = worker.timeout = 30
    client.req("SUBMIT_JOB", b"big", b"", b"x")
    w.read("created", client)
    worker.req("CAN_DO", b"big")
    worker.req("GRAB_JOB")
    (assign,) = w.read("assign", worker)
    result = bytes(range(256)) * 4096  # 1 MiB
    worker.req("WORK_COMPLETE", handle_of(assign), result)
    (complete,) = client.packets(1)
    name, (handle, received) = parse(complete)
    w.transcript.append(("a 1 MiB WORK_COMPLETE", b"%s of its job, %d bytes, intact: %r" % (
        name.encode(), len(received), handle == handle_of(assign) and received == result)))
    echo = b"e" * (4 << 20)
    worker.req("ECHO_REQ", echo)
    (answer,) = worker.packets(1)
    w.transcript.append(("a 4 MiB ECHO_REQ", b"%d bytes, intact: %r" % (len(answer), answer[12:] == echo)))
    w.synced("still served", worker)


def can_do_timeout_requeues_the_job(w: World) -> None:
    admin, client, slow, other = w.conn(), w.conn(), w.conn(), w.conn()
    client.req("SUBMIT_JOB", b"slow", b"u1", b"x")
    w.read("created", client)
    slow.req("CAN_DO_TIMEOUT", b"slow", b"1")
    slow.req("GRAB_JOB")
    (assign,) = w.read("assigned with a 1 s timeout", slow)
    admin_table(w, "running", admin, b"status")
    wait_until_not_running(w, client, b"u1")  # the timeout ran out: back in the queue
    admin_table(w, "queued again", admin, b"status")
    other.req("CAN_DO", b"slow")
    other.req("GRAB_JOB")
    w.read("the next worker gets it", other)
    slow.req("WORK_COMPLETE", handle_of(assign), b"too late")
    w.read("the late result", slow)
    other.req("WORK_COMPLETE", handle_of(assign), b"done")
    w.read("the client hears the next worker only", client)


def _type(name: str) -> int:
    from haqueue.protocol.gearman import TYPES
    return TYPES[name]


# What issue 28 found different on a three-node cluster: these run on one too
# (tests/cluster/test_gearman_cluster_differential.py).
ISSUE_28 = [functions_stay_listed_after_cant_do_and_reset_abilities, prioritystatus_counts_queued_jobs_by_priority,
            maxqueue_of_a_known_function_counts_running_jobs, bad_input_that_keeps_the_connection,
            option_names_in_any_case, unique_ids_up_to_64_bytes, big_results_and_echoes,
            can_do_timeout_requeues_the_job]

SHARED = [echo, background_job_lifecycle, priorities_and_fifo, foreground_results_reach_every_attached_client,
          unique_dash_coalesces_by_data, one_connection_submitting_twice_is_told_twice,
          work_complete_and_fail_to_a_foreground_client,
          sleep_and_wake, worker_gone_mid_job_puts_it_back,
          abilities, submit_epoch_in_the_past_runs_now, errors_that_keep_the_connection, admin_protocol,
          *ISSUE_28]


@pytest.mark.parametrize("script", SHARED, ids=[s.__name__ for s in SHARED])
def test_haqueue_answers_as_gearmand_does(script):
    same(script)


# ------------------------------------------------------------------ on purpose
QUEUE_ERROR = b"\0RES\0\0\0\x13\0\0\0\x1dQUEUE_ERROR\0Job queue is full"


def test_maxqueue_of_a_function_nobody_named_yet_is_enforced_where_gearmand_ignores_it():
    """Why: gearmand 1.1.20 drops a bound set before the function exists (it enforces
    one set after: maxqueue_of_a_known_function_counts_running_jobs). haqueue keeps the
    bound, replicated, so that an operator can bound a queue before its first job."""

    def script(w: World) -> None:
        admin, client = w.conn(), w.conn()
        w.admin("maxqueue", admin, b"maxqueue q 1")
        client.req("SUBMIT_JOB_BG", b"q", b"", b"1")
        client.req("SUBMIT_JOB_BG", b"q", b"", b"2")
        w.read("two submissions", client, 2)

    reference, ours = run_both(script)
    assert [parse(p)[0] for _, p in reference[1:]] == ["JOB_CREATED", "JOB_CREATED"]
    assert ours[1:] == [("two submissions", ours[1][1]), ("two submissions", QUEUE_ERROR)]


def test_maxqueue_per_priority_is_one_bound_the_largest():
    """Why: gearmand's `maxqueue F HIGH NORMAL LOW` bounds each priority's submissions by
    its own number; haqueue keeps one replicated bound per function, the largest, so a
    high-priority submission is never refused where a low one is let in."""

    def script(w: World) -> None:
        admin, client = w.conn(), w.conn()
        client.req("SUBMIT_JOB_BG", b"r", b"", b"0")
        w.read("created", client)
        w.admin("maxqueue", admin, b"maxqueue r 1 2 3")
        for name in ("SUBMIT_JOB_HIGH_BG", "SUBMIT_JOB_BG", "SUBMIT_JOB_LOW_BG"):
            client.req(name, b"r", b"", b"x")
            w.read(name, client)

    reference, ours = run_both(script)
    assert [parse(p)[0] for _, p in reference[2:]] == ["ERROR", "JOB_CREATED", "JOB_CREATED"]
    assert [parse(p)[0] for _, p in ours[2:]] == ["JOB_CREATED", "JOB_CREATED", "ERROR"]
    assert reference[2][1] == ours[4][1] == QUEUE_ERROR


def test_a_background_submission_of_a_foreground_jobs_unique_id_keeps_the_job():
    """Why: the background submission was acknowledged (JOB_CREATED), and docs/gearman.md
    promises that an acknowledged background job is done. gearmand 1.1.20 keeps the job
    listed when the foreground client leaves but never hands it out (NO_JOB); haqueue
    makes it a background job, which a worker then gets (a failover keeps it too:
    tests/cluster/test_gearman_failover.py)."""

    def script(w: World) -> None:
        fg, bg, worker = w.conn(), w.conn(), w.conn()
        fg.req("SUBMIT_JOB", b"k", b"u", b"x")
        w.read("foreground", fg)
        bg.req("SUBMIT_JOB_BG", b"k", b"u", b"y")
        w.read("background, the same unique id", bg)
        fg.close()
        wait_until_waiting_clients(bg, b"u", b"0")
        worker.req("CAN_DO", b"k")
        worker.req("GRAB_JOB_UNIQ")
        w.read("after the foreground client left", worker)

    reference, ours = run_both(script)
    assert reference[:2] == ours[:2]
    assert reference[2] == ("after the foreground client left", b"\0RES\0\0\0\x0a\0\0\0\0")  # NO_JOB
    assert ours[2] == ("after the foreground client left",
                       b"\0RES\0\0\0\x1f\0\0\0\x09H:1\0k\0u\0x")  # JOB_ASSIGN_UNIQ


def wait_until_waiting_clients(client: GearConn, unique: bytes, waiting: bytes, timeout: float = 5.0) -> None:
    """Poll GET_STATUS_UNIQUE (outside the transcript) until `waiting` clients wait for the job."""
    deadline = time.monotonic() + timeout
    while True:
        client.req("GET_STATUS_UNIQUE", unique)
        _, args = parse(client.packet())
        if args[1] == b"1" and args[5] == waiting:
            return
        assert time.monotonic() < deadline, f"clients waiting: {args[5]!r}, not {waiting!r}"


def test_version_and_shutdown():
    """Why: `version` names haqueue's version, not gearmand's; `shutdown` is implemented
    (gearmand 1.1.20 answers UNKNOWN_COMMAND to it) and stops the node, whose peers carry on."""

    def script(w: World) -> None:
        c = w.conn()
        w.admin("version", c, b"version")
        w.admin("shutdown", c, b"shutdown")

    reference, ours = run_both(script)
    assert reference == [("version", b"OK 1.1.20+ds\n"),
                         ("shutdown", b"ERR UNKNOWN_COMMAND Unknown+server+commandshutdown\r\n")]
    assert re.fullmatch(rb"OK haqueue-[\d.]+\n", ours[0][1]) and ours[1] == ("shutdown", b"OK\n")

