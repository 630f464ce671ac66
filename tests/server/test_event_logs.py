"""One log line per event that matters, as text or JSON lines (haqueue/logs.py,
haqueue/replication/observed.py), from real nodes."""

from __future__ import annotations

import json
import time

from tests.support.servers import RawConn, start_haqueue


def wait_for_log(srv, text: str, timeout: float = 20.0) -> str:
    deadline = time.monotonic() + timeout
    tail = ""
    while time.monotonic() < deadline:
        tail = srv.stderr_tail(200_000)
        if text in tail:
            return tail
        time.sleep(0.05)  # polling the node's log, bounded by the deadline
    raise AssertionError(f"{text!r} not logged within {timeout:g} s; log tail:\n{tail[-2000:]}")


def json_events(log: str) -> list[dict]:
    return [json.loads(line) for line in log.splitlines() if line.strip()]


def test_log_json_writes_one_object_per_line_with_the_event_fields():
    srv = start_haqueue("--log-json", "-V")
    try:
        log = wait_for_log(srv, '"event":"leadership_won"')
    finally:
        srv.stop()
    entries = json_events(log)  # every line parses: nothing but JSON objects
    won = [e for e in entries if e.get("event") == "leadership_won"]
    assert len(won) == 1 and won[0]["term"] >= 1
    assert won[0]["msg"] == f"leadership won: term {won[0]['term']}"
    assert won[0]["level"] == "info" and won[0]["logger"] == "haqueue.events"
    assert won[0]["ts"].endswith("Z") and won[0]["pid"] == srv.pid


def test_snapshot_started_finished_and_restored_are_logged(tmp_path):
    data = tmp_path / "data"
    srv = start_haqueue("-b", str(data), "-s", "4096", "-V", "--log-json")
    try:
        with RawConn(srv.host, srv.port) as conn:
            for _ in range(20):  # past 4 KiB of journal: the node folds it into a snapshot
                conn.send(b"put 0 0 60 200\r\n" + b"x" * 200 + b"\r\n")
                assert conn.recv_reply().startswith(b"INSERTED")
        log = wait_for_log(srv, '"event":"snapshot_finished"')
    finally:
        srv.stop()
    started = [e for e in json_events(log) if e.get("event") == "snapshot_started"]
    taken = [e for e in json_events(log) if e.get("event") == "snapshot_finished"]
    assert taken[0]["bytes"] > 0 and taken[0]["seconds"] >= 0
    assert started[0]["index"] == taken[0]["index"] and started[0]["msg"].startswith("snapshot started: through entry ")
    again = start_haqueue("-b", str(data), "-V")  # text lines this time
    try:
        log = wait_for_log(again, "snapshot restored: ")
        assert "haqueue.events: restoring snapshot: " in log
    finally:
        again.stop()


def test_events_are_logged_with_a_utc_timestamp():
    srv = start_haqueue("-V")
    try:
        log = wait_for_log(srv, "leadership won: term ")
    finally:
        srv.stop()
    line = next(l for l in log.splitlines() if "leadership won: term " in l)
    stamp, rest = line.split(" ", 1)
    assert time.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%fZ")  # raises if it is no UTC stamp
    assert rest.startswith(f"haqueue[{srv.pid}] INFO haqueue.events: ")


def test_status_shows_the_recent_events(tmp_path):
    import urllib.request

    from tests.support.servers import HOST, free_port

    admin = free_port()
    srv = start_haqueue("--admin", f"{HOST}:{admin}")  # no -V: a lone node prints no event
    try:
        deadline = time.monotonic() + 20
        while True:  # the node answers puts once it leads; poll /status for the event, bounded
            with urllib.request.urlopen(f"http://{HOST}:{admin}/status", timeout=10) as reply:
                status = json.loads(reply.read())
            if status["events"] or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert "leadership won" not in srv.stderr_tail(100_000)
    finally:
        srv.stop()
    won = [e for e in status["events"] if e["event"] == "leadership_won"]
    assert len(won) == 1 and won[0]["msg"].startswith("leadership won: term ")
    assert won[0]["ts"].endswith("Z") and won[0]["level"] == "info"
