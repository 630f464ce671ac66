"""`bench --peers`: the raw AMQP and NATS codecs, and a short smoke of the table against the
real RabbitMQ and nats-server where they are installed (the figures are not asserted)."""

from __future__ import annotations

import json
import signal
import struct
import subprocess
import sys
import time
import warnings

import psutil
import pytest

from haqueue.bench import amqp, nats, peer_servers, peers
from haqueue.bench.load import BenchError
from haqueue.bench.peer_load import _Confirms, _PubAcks

needs_nats = pytest.mark.skipif(peer_servers.nats_path() is None, reason="nats-server is not installed")
needs_rabbitmq = pytest.mark.skipif(not peer_servers.rabbitmq_installed(), reason="rabbitmq-server is not installed")


# ------------------------------------------------------------------ AMQP codec
def ack(tag: int, multiple: bool) -> bytes:
    return amqp.method(amqp.BASIC_ACK, struct.pack(">QB", tag, multiple))


def test_amqp_frames_split_anywhere_parse_to_the_same_frames():
    data = amqp.channel_open() + amqp.basic_get("q") + ack(7, True)
    whole = amqp.Frames().feed(data)
    for cut in range(1, len(data)):
        frames = amqp.Frames()
        assert frames.feed(data[:cut]) + frames.feed(data[cut:]) == whole
    assert [amqp.method_ids(p) for _, _, p in whole] == [amqp.CHANNEL_OPEN, amqp.BASIC_GET, amqp.BASIC_ACK]


def test_amqp_frame_with_a_bad_end_octet_is_an_error():
    bad = bytearray(amqp.channel_open())
    bad[-1] = 0
    with pytest.raises(amqp.AmqpError, match="bad frame end"):
        amqp.Frames().feed(bytes(bad))


def test_publish_parts_frame_the_body_as_one_body_frame_after_a_persistent_header():
    head, tail = amqp.publish_parts("jobs", 5)
    frames = amqp.Frames().feed(head + b"hello" + tail)
    assert [k for k, _, _ in frames] == [amqp.METHOD, amqp.HEADER, amqp.BODY]
    class_id, _, size, flags = struct.unpack_from(">HHQH", frames[1][2])
    assert (class_id, size, flags, frames[1][2][-1]) == (60, 5, 0x1000, 2)  # delivery-mode 2
    assert frames[2][2] == b"hello"


def test_confirms_count_each_publish_once_whether_acked_singly_or_with_multiple():
    confirms = _Confirms()
    assert confirms.feed(ack(2, False)) == 1  # out of order: 2 before 1
    assert confirms.feed(ack(1, False)) == 1
    assert confirms.feed(ack(5, True)) == 3  # 3, 4, 5
    assert confirms.feed(ack(7, False) + ack(8, True)) == 3  # 7, then 6 and 8
    assert confirms.feed(ack(8, True)) == 0
    assert confirms.feed(amqp.frame(amqp.HEARTBEAT, 0, b"")) == 0  # a heartbeat confirms nothing


def test_a_nacked_publish_fails_the_run():
    with pytest.raises(BenchError, match="Basic.Nack"):
        _Confirms().feed(amqp.method(amqp.BASIC_NACK, struct.pack(">QB", 1, 0)))


# ------------------------------------------------------------------ NATS parser
def test_nats_messages_split_anywhere_parse_to_the_same_events():
    data = (b"MSG inbox 2 40\r\n" + b'{"stream":"s", "seq":1}'.ljust(40) + b"\r\nPING\r\n"
            b"HMSG inbox 3 32 32\r\nNATS/1.0 408 Request Timeout\r\n\r\n\r\n"
            b"MSG subj 3 $JS.ACK.s.c.1.1.1.1.0 5\r\nhello\r\n")
    def shape(events):
        return [(e.subject, e.sid, e.reply, e.status, e.payload) if isinstance(e, nats.Message) else e
                for e in events]
    whole = shape(nats.Messages().feed(data))
    assert [e[3] if len(e) == 5 else e[0] for e in whole] == [0, "PING", 408, 0]
    assert whole[3][2] == b"$JS.ACK.s.c.1.1.1.1.0" and whole[3][4] == b"hello"
    for cut in range(1, len(data)):
        parser = nats.Messages()
        assert shape(parser.feed(data[:cut]) + parser.feed(data[cut:])) == whole


def test_a_nats_error_line_names_the_server_error():
    with pytest.raises(nats.NatsError, match="Authorization Violation"):
        nats.Messages().feed(b"-ERR 'Authorization Violation'\r\n")


def test_a_puback_with_an_error_fails_the_run():
    class Sink:
        def write(self, data):
            pass
    def msg(payload: bytes) -> bytes:
        return b"MSG i 2 %d\r\n%s\r\n" % (len(payload), payload)
    acks = _PubAcks(Sink())
    assert acks.feed(msg(b'{"stream":"s","seq":1}') + msg(b'{"stream":"s","seq":2}')) == 2
    with pytest.raises(BenchError, match="refused a publish"):
        acks.feed(msg(b'{"error":{"code":503,"description":"insufficient resources"}}'))


# ------------------------------------------------------------------ the real thing
def peers_bench(systems: str, tmp_path, timeout: float) -> tuple[subprocess.CompletedProcess, dict]:
    """Run `bench --peers` briefly. A haqueue run that failed (a 0.5 s run on a loaded CI
    machine: a leader change closes its connections) is shown in its cell and named below
    the table, and the command exits 1; the smoke's claim is the table and the peer's own
    runs, so such a failure is surfaced as a warning, not as the test's failure."""
    out = tmp_path / "peers.json"
    done = subprocess.run([sys.executable, "-m", "haqueue", "bench", "peers", "--systems", systems,
                           "--duration", "0.5", "--warmup", "0.2", "--json", str(out)],
                          capture_output=True, text=True, timeout=timeout)
    failures = [line for line in done.stdout.splitlines() if line.startswith("failed: ")]
    if done.returncode == 1 and failures and all(line.startswith("failed: haqueue") for line in failures):
        warnings.warn("bench --peers smoke: " + "; ".join(failures))
        return done, (json.loads(out.read_text()) if out.exists() else {"runs": [], "errors": failures})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr
    return done, json.loads(out.read_text())


def assert_table(output: str, systems: list[str], ratio: str) -> None:
    lines = output.splitlines()
    header = [cell.strip() for cell in lines[1].split("|")]
    assert header[0] == "workload" and len(header) == 1 + len(systems) + 1, lines[1]
    assert header[-1] == ratio
    assert [line.split()[0] for line in lines[3:6]] == ["cycle:", "put:", "open"]
    assert lines[-1].startswith("disk: fdatasync of a small append takes ")
    for line in lines[3:6]:
        assert line.count("(load ") == len(systems), line  # client CPU beside every figure
        assert line.rstrip().endswith("x") or line.rstrip().endswith("(p99)"), line


@pytest.mark.slow
@needs_nats
@pytest.mark.timeout(200)
def test_bench_peers_prints_a_table_of_haqueue_against_nats(tmp_path):
    done, doc = peers_bench("haqueue-f50,nats", tmp_path, 170)
    assert_table(done.stdout, ["haqueue-f50", "nats"], "haqueue -f 50 / NATS")
    nats_runs = [r for r in doc["runs"] if r["system"] == "nats"]
    assert sorted(r["workload"] for r in nats_runs) == ["cycle", "openloop", "put"]
    assert {r["latency_ms"]["put"] is not None for r in nats_runs} == {True}
    assert all(r["client_cpu_percent"] > 0 for r in nats_runs)


@pytest.mark.slow
@needs_rabbitmq
@pytest.mark.timeout(400)
def test_bench_peers_prints_a_table_of_haqueue_against_rabbitmq(tmp_path):
    done, doc = peers_bench("haqueue-f0,rabbitmq", tmp_path, 380)
    assert_table(done.stdout, ["haqueue-f0", "rabbitmq"], "haqueue -f0 / RabbitMQ")
    assert sorted(r["workload"] for r in doc["runs"] if r["system"] == "rabbitmq") == ["cycle", "openloop", "put"]
    assert all(error["system"].startswith("haqueue") for error in doc["errors"])  # the peer's runs never fail


@needs_nats
def test_interrupting_bench_peers_stops_every_server_it_started():
    bench = subprocess.Popen([sys.executable, "-m", "haqueue", "bench", "peers", "--systems", "nats",
                              "--duration", "60"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    seen: list[psutil.Process] = []
    try:
        deadline = time.monotonic() + 30
        while len(seen) < 3 and time.monotonic() < deadline:
            seen = [p for p in psutil.Process(bench.pid).children(recursive=True) if p.name() == "nats-server"]
            time.sleep(0.05)  # polling for the servers, bounded by the deadline
        assert len(seen) == 3, "bench never started three nats-servers"
        bench.send_signal(signal.SIGTERM)
        assert bench.wait(40) == 130
        assert bench.stderr.read().decode().strip().splitlines()[-1] == "haqueue: interrupted"
        gone, alive = psutil.wait_procs(seen, timeout=5)
        assert not alive
    finally:
        if bench.poll() is None:
            bench.kill()
            bench.wait()
        for server in seen:
            if server.is_running():
                server.kill()


def test_peers_excludes_the_other_modes_in_one_line():
    # The old spelling: the subcommand has no other modes to exclude.
    done = subprocess.run([sys.executable, "-m", "haqueue", "bench", "--peers", "--compare"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert done.stderr.strip() == "haqueue: --peers starts its own servers: it excludes --compare"


def test_a_missing_peer_is_one_line_naming_its_package(monkeypatch):
    monkeypatch.setattr(peer_servers, "nats_path", lambda: None)
    with pytest.raises(BenchError, match=r"^bench peers: nats-server is not installed \(apt-get install nats-server"):
        peers.bench_peers(["haqueue-f0", "nats"], 1.0, 0.0, 5.0)


def test_a_failed_run_is_shown_in_its_cell_and_named_below_the_table():
    from haqueue.bench.report import RunResult

    done = RunResult(workload="put", address="x", measured_puts=1000, put_seconds=1.0)
    sitting = peers.Sitting(labels={"haqueue-f0": "haqueue 3 nodes -f0", "rabbitmq": "RabbitMQ 3.10.8 quorum queue"})
    sitting.runs[("haqueue-f0", "put")] = peers.PeerRun("haqueue-f0", done, client_cpu=12.0, server_cpu=90.0)
    sitting.errors[("rabbitmq", "start")] = "RabbitMQ not listening on 127.0.0.1 port(s) 5 after 120 s"
    table = peers.format_sitting(sitting, ["haqueue-f0", "rabbitmq"], "headline").splitlines()
    put = next(line for line in table if line.startswith("put:"))
    assert [c.strip() for c in put.split("|")][1:] == ["1,000 (load 12 %, servers 90 %, 900 us/job)", "failed (below)", ""]
    assert table[-1] == ("failed: RabbitMQ 3.10.8 quorum queue, start-up: "
                         "RabbitMQ not listening on 127.0.0.1 port(s) 5 after 120 s")


def test_a_start_script_that_ignores_sigterm_is_killed_with_its_children(monkeypatch, tmp_path):
    # RabbitMQ's start script is a shell waiting for its VM: a stop must not leave the VM behind.
    monkeypatch.setattr(peer_servers, "STOP_GRACE", 0.5)
    processes = peer_servers._Processes()
    script = "trap '' TERM; sleep 60 & echo $! > child; wait"
    proc = processes.start(["sh", "-c", f"cd {tmp_path} && {script}"], str(tmp_path / "log"))
    deadline = time.monotonic() + 10
    while not (tmp_path / "child").exists() or not (tmp_path / "child").read_text().strip():
        assert time.monotonic() < deadline, "the script never started its child"
        time.sleep(0.02)  # polling for the child's PID file, bounded by the deadline
    child = psutil.Process(int((tmp_path / "child").read_text()))
    processes.stop()
    assert proc.poll() is not None
    child.wait(5)  # psutil.TimeoutExpired if the group was not killed
    assert not child.is_running()
    assert processes.procs == []
