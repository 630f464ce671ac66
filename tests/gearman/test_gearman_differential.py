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

from tests.support.gearman import GearConn, Normaliser, gearmand, haqueue_gearman, parse

pytestmark = pytest.mark.timeout(60)


class World:
    """One server as a script sees it: connections, and the transcript they read."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.normalise = Normaliser()
        self.transcript: list[tuple[str, bytes]] = []
        self.conns: list[GearConn] = []

    def conn(self) -> GearConn:
        c = GearConn(self.port)
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


def _type(name: str) -> int:
    from haqueue.protocol.gearman import TYPES
    return TYPES[name]


SHARED = [echo, background_job_lifecycle, priorities_and_fifo, foreground_results_reach_every_attached_client,
          unique_dash_coalesces_by_data, one_connection_submitting_twice_is_told_twice,
          work_complete_and_fail_to_a_foreground_client,
          sleep_and_wake, worker_gone_mid_job_puts_it_back,
          abilities, submit_epoch_in_the_past_runs_now, errors_that_keep_the_connection, admin_protocol]


@pytest.mark.parametrize("script", SHARED, ids=[s.__name__ for s in SHARED])
def test_haqueue_answers_as_gearmand_does(script):
    same(script)


# ------------------------------------------------------------------ on purpose
def test_maxqueue_is_enforced_where_gearmand_1_1_20_ignores_it():
    """Why: the admin protocol documents maxqueue as a bound; 1.1.20 stores it and lets
    every submission through. haqueue refuses with gearmand's own queue_full error."""

    def script(w: World) -> None:
        admin, client = w.conn(), w.conn()
        w.admin("maxqueue", admin, b"maxqueue q 1")
        client.req("SUBMIT_JOB_BG", b"q", b"", b"1")
        client.req("SUBMIT_JOB_BG", b"q", b"", b"2")
        w.read("two submissions", client, 2)

    reference, ours = run_both(script)
    assert [parse(p)[0] for _, p in reference[1:]] == ["JOB_CREATED", "JOB_CREATED"]
    assert ours[1:] == [("two submissions", ours[1][1]),
                        ("two submissions", b"\0RES\0\0\0\x13\0\0\0\x1cqueue_full\0Job queue is full")]


def test_an_unknown_packet_type_gets_an_error_where_gearmand_closes():
    """Why: the framing is intact (the size field is read), so the connection can go on;
    an ERROR tells the client what went wrong instead of a bare close. A type >= 2^31
    (which crashes gearmand 1.1.20's server on some paths) is just another unknown type."""

    def script(w: World) -> None:
        c = w.conn()
        c.send(struct.pack(">4sII", b"\0REQ", 99, 0))
        try:
            w.read("unknown type", c)
        except EOFError:
            w.transcript.append(("unknown type", b"<closed>"))

    reference, ours = run_both(script)
    assert reference == [("unknown type", b"<closed>")]
    assert ours == [("unknown type", b"\0RES\0\0\0\x13\0\0\0\x26INVALID_COMMAND\0unknown packet type 99")]


def test_a_response_magic_is_an_error_and_a_close_where_gearmand_goes_on():
    """Why: haqueue's decoder treats a wrong magic as lost framing (it cannot know the
    sender speaks Gearman at all), so it answers INVALID_MAGIC and closes."""

    def script(w: World) -> None:
        c = w.conn()
        c.send(struct.pack(">4sII", b"\0RES", 6, 0))
        (error,) = w.read("RES magic", c)
        w.transcript[-1] = ("RES magic", parse(error)[1][0])
        w.transcript.append(("closed", b"yes" if c.closes(2.0) else b"no"))

    reference, ours = run_both(script)
    assert reference[0] == ours[0] == ("RES magic", b"INVALID_MAGIC")
    assert reference[1] == ("closed", b"no") and ours[1] == ("closed", b"yes")


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


def test_can_do_timeout_fails_the_job_where_gearmand_requeues_it_silently():
    """Why: the protocol document says the job server marks a timed-out job failed and
    tells its clients; gearmand 1.1.20 instead hands it to the next worker and tells the
    client nothing. A job that outlived its timeout is more likely stuck than unlucky."""

    def script(w: World) -> None:
        client, slow, other = w.conn(), w.conn(), w.conn()
        client.req("SUBMIT_JOB", b"slow", b"", b"x")
        w.read("created", client)
        slow.req("CAN_DO_TIMEOUT", b"slow", b"1")
        slow.req("GRAB_JOB")
        w.read("assigned with a 1 s timeout", slow)
        other.req("CAN_DO", b"slow")
        deadline = time.monotonic() + 10
        while True:  # after the timeout: does the job come round again, or does the client hear?
            other.req("GRAB_JOB")
            (grab,) = other.packets(1)
            if parse(grab)[0] == "JOB_ASSIGN":
                w.transcript.append(("the next worker", w.normalise(grab)))
                return
            if client.buf or _readable(client):
                w.read("the client", client)
                return
            assert time.monotonic() < deadline, "neither requeued nor failed"

    reference, ours = run_both(script)
    assert reference[-1] == ("the next worker", b"\0RES\0\0\0\x0b\0\0\0\x0aH:1\0slow\0x")
    assert ours[-1] == ("the client", b"\0RES\0\0\0\x0e\0\0\0\x03H:1")  # WORK_FAIL


def _readable(c: GearConn) -> bool:
    import select

    return bool(select.select([c.sock], [], [], 0.05)[0])
