"""`haqueue tube ...` and `haqueue job ...` against a real three-node cluster, through its
cluster file (haqueue/cli/tube.py, job.py over haqueue/console/console.py).

Each command runs in-process through the real entry point (haqueue.cli.main.main, which
turns errors into one line and an exit status) and its output is compared exactly; each
change is checked through the beanstalkd protocol with a plain client. The whole set runs
once on the first leader and again after that leader is killed between two commands.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from haqueue import admin_client
from haqueue.cli.main import main
from tests.cluster.clients import client_for, job_stats
from tests.support.servers import RawConn

FAILOVER_TIMEOUT = 15.0


def run(capsys, *args: str) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of `haqueue ARGS`."""
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def operator_events(member, token=None) -> list[dict]:
    status = admin_client.status(member.address, member.admin_port, timeout=2, token=token)
    return [e for e in status["events"] if e.get("event") == "operator"]


def exercise(capsys, cluster, tube: str) -> None:
    """Every job and tube command once, each change checked through the protocol."""
    cfg = ("--config", str(cluster.config_path))
    leader = cluster.leader()

    code, out, _ = run(capsys, "job", "put", "--tube", tube, "--pri", "7", "first body", *cfg)
    assert code == 0
    first = int(out)
    code, out, _ = run(capsys, "job", "put", "--tube", tube, "--pri", "9", "second", "--json", *cfg)
    assert code == 0
    second = json.loads(out)["id"]
    assert second > first
    code, out, _ = run(capsys, "job", "put", "--tube", tube, "--delay", "3600", "later", *cfg)
    delayed = int(out)

    assert run(capsys, "job", "peek", "--tube", tube, "ready", *cfg) == (0, f"id: {first}\nfirst body\n", "")
    code, out, _ = run(capsys, "job", "peek", "--tube", tube, "delayed", "--json", *cfg)
    assert (code, json.loads(out)) == (0, {"id": delayed, "body": "later"})
    code, out, err = run(capsys, "job", "peek", "--tube", tube, "buried", *cfg)
    assert (code, out, err) == (1, "", f"haqueue: no buried job in tube {tube}\n")

    # bury a ready job: reserved by id, then buried at its own priority
    assert run(capsys, "job", "bury", str(first), *cfg) == (0, f"buried job {first}\n", "")
    with client_for(cluster, leader.id) as client:
        stats = job_stats(client, first)
        assert (stats["state"], stats["pri"]) == ("buried", 7)
    code, out, _ = run(capsys, "job", "peek", "--tube", tube, "buried", "--json", *cfg)
    assert json.loads(out) == {"id": first, "body": "first body"}

    code, out, _ = run(capsys, "job", "show", str(first), "--json", *cfg)
    shown = json.loads(out)
    assert (shown["id"], shown["body"], shown["stats"]["state"], shown["stats"]["tube"]) == \
        (first, "first body", "buried", tube)
    code, out, _ = run(capsys, "job", "show", str(first), *cfg)
    assert f"tube: {tube}\nstate: buried\n" in out and out.endswith("body:\nfirst body\n")

    assert run(capsys, "job", "kick", str(first), *cfg) == (0, f"kicked job {first}\n", "")
    with client_for(cluster, leader.id) as client:
        assert job_stats(client, first)["state"] == "ready"
    code, _, err = run(capsys, "job", "kick", str(first), *cfg)
    assert (code, err) == (1, f"haqueue: job {first} is ready, not buried or delayed: nothing to kick\n")

    assert run(capsys, "job", "delete", str(second), "--json", *cfg) == \
        (0, json.dumps({"id": second, "result": "deleted"}) + "\n", "")
    with RawConn(leader.address, leader.client_port) as conn:
        conn.send(f"peek {second}\r\n".encode())
        assert conn.recv_reply() == b"NOT_FOUND\r\n"
    assert run(capsys, "job", "delete", str(second), *cfg) == (1, "", f"haqueue: job {second} not found\n")
    assert run(capsys, "job", "show", str(second), *cfg)[0] == 1

    code, out, _ = run(capsys, "tube", "list", *cfg)
    assert code == 0 and tube in out.split("\n") and "default" in out.split("\n")
    code, out, _ = run(capsys, "tube", "list", "--json", *cfg)
    assert tube in json.loads(out)
    code, out, _ = run(capsys, "tube", "stats", tube, "--json", *cfg)
    stats = json.loads(out)
    assert (stats["name"], stats["current-jobs-ready"], stats["current-jobs-delayed"]) == (tube, 1, 1)
    code, out, _ = run(capsys, "tube", "stats", tube, *cfg)
    assert f"name: {tube}\n" in out and "current-jobs-delayed: 1\n" in out
    assert run(capsys, "tube", "stats", "no-such-tube", *cfg) == (1, "", "haqueue: tube no-such-tube not found\n")

    assert run(capsys, "tube", "pause", tube, "600", *cfg) == (0, f"paused tube {tube} for 600 s\n", "")
    with client_for(cluster, leader.id) as client:
        assert client.stats_tube(tube)["pause"] == 600
    assert run(capsys, "tube", "pause", tube, "0", *cfg) == (0, f"resumed tube {tube}\n", "")

    # kick N: the delayed job goes to ready when none is buried
    assert run(capsys, "tube", "kick", tube, "5", "--json", *cfg) == \
        (0, json.dumps({"kicked": 1, "tube": tube}) + "\n", "")
    with client_for(cluster, leader.id) as client:
        assert job_stats(client, delayed)["state"] == "ready"

    # Each change is an event in the serving node's log, naming the console and the job.
    said = [e["msg"] for e in operator_events(cluster.spec.node(leader.id))]
    assert any(m.startswith("console at 127.") and f": bury job {first}: BURIED" in m for m in said), said
    assert any(f": delete job {second}: DELETED" in m for m in said), said
    assert any(f": kick-job job {first}: KICKED" in m for m in said), said
    assert any(f": pause-tube tube {tube}: PAUSED" in m for m in said), said


@pytest.mark.slow
def test_every_console_command_works_through_the_cluster_file_before_and_after_a_failover(
        make_cluster, capsys):
    cluster = make_cluster()
    exercise(capsys, cluster, "before")
    old = cluster.leader()
    cluster.kill_node(old.id)  # SIGKILL by the PID the test started
    # No waiting for the election here: the next command finds the new leader itself.
    exercise(capsys, cluster, "after")
    assert cluster.leader(exclude=old.id) is not None
    # The first tube's jobs survived the failover, as the console sees them.
    code, out, _ = run(capsys, "tube", "stats", "before", "--json", "--config", str(cluster.config_path))
    assert json.loads(out)["current-jobs-ready"] == 2


def test_a_command_typed_during_a_failover_waits_for_the_new_leader(make_cluster, capsys):
    cluster = make_cluster()
    cfg = ("--config", str(cluster.config_path))
    code, out, _ = run(capsys, "job", "put", "--tube", "failover", "kept", *cfg)
    job_id = int(out)
    old = cluster.leader()
    cluster.kill_node(old.id)
    started = time.monotonic()
    assert run(capsys, "job", "show", str(job_id), "--json", *cfg)[0] == 0
    assert run(capsys, "job", "delete", str(job_id), *cfg) == (0, f"deleted job {job_id}\n", "")
    assert time.monotonic() - started < FAILOVER_TIMEOUT
    new = cluster.leader(exclude=old.id)
    with client_for(cluster, new.id) as client:
        assert job_stats(client, job_id) is None


def test_with_no_node_serving_the_console_exits_4_and_says_so(tmp_path, capsys):
    from haqueue.local_cluster import write_cluster_file

    config = write_cluster_file(tmp_path / "cluster.toml", client_port=29990)  # nothing started
    code, out, err = run(capsys, "tube", "list", "--config", str(config), "--timeout", "0.3")
    assert (code, out) == (4, "")
    assert err.startswith("haqueue: no node serves clients (n1, n2, n3) within 0.3 s; last: ")
    assert err.count("\n") == 1


def test_console_usage_mistakes_are_one_line_and_exit_2(tmp_path, capsys):
    assert run(capsys, "job", "show", "1") == (2, "", "haqueue: give either --config FILE or --address HOST:PORT\n")
    code, _, err = run(capsys, "job", "show", "1", "--address", "nowhere")
    assert (code, err) == (2, "haqueue: --address: 'nowhere' is not HOST:PORT\n")
    code, _, err = run(capsys, "tube", "stats", "bad name", "--address", "127.0.0.1:1")
    assert code == 2 and err.startswith("haqueue tube stats: Invalid value for 'NAME': 'bad name' is not a tube name")
    code, _, err = run(capsys, "job", "show", "1", "--config", str(tmp_path / "missing.toml"))
    assert code == 2 and err.count("\n") == 1 and "missing.toml" in err


def test_tail_follows_puts_without_reserving_them_through_a_failover(make_cluster, tmp_path):
    cluster = make_cluster()
    leader = cluster.leader()
    argv = [sys.executable, "-m", "haqueue", "tube", "tail", "logs", "--json", "--interval", "0.1",
            "--config", str(cluster.config_path)]
    out_path, err_path = tmp_path / "tail.out", tmp_path / "tail.err"
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        tail = subprocess.Popen(argv, stdout=out, stderr=err, env=dict(os.environ, PYTHONUNBUFFERED="1"))
    try:
        def lines() -> list[dict]:
            return [json.loads(line) for line in out_path.read_text().splitlines() if line]

        def wait_until(done, what: str):
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and tail.poll() is None:
                if value := done():
                    return value
                time.sleep(0.05)  # polling tail's output files, bounded by the deadline
            raise AssertionError(f"{what}: not within 20 s; stderr {err_path.read_text()!r}")

        # tail has read where the ids are once it says where it follows from
        wait_until(lambda: "following tube logs from job id" in err_path.read_text(), "tail started")
        with RawConn(leader.address, leader.client_port) as conn:
            conn.send(b"use other\r\nput 0 0 60 5\r\nnoise\r\nuse logs\r\nput 0 0 60 3\r\none\r\n"
                      b"put 0 0 60 3\r\ntwo\r\n")
            replies = conn.recv_replies(5)
        ids = [int(r.split()[1]) for r in replies if r.startswith(b"INSERTED")]
        got = wait_until(lambda: len(lines()) >= 2 and lines(), "two jobs shown")
        assert [(j["id"], j["body"], j["state"]) for j in got] == [(ids[1], "one", "ready"), (ids[2], "two", "ready")]

        cluster.kill_node(leader.id)
        new = cluster.leader(exclude=leader.id, timeout=FAILOVER_TIMEOUT)
        with RawConn(new.address, new.client_port) as conn:
            conn.send(b"use logs\r\nput 0 0 60 5\r\nthree\r\n")
            third = int(conn.recv_replies(2)[1].split()[1])
        got = wait_until(lambda: len(lines()) >= 3 and lines(), "the third job shown")
        assert [j["body"] for j in got] == ["one", "two", "three"] and got[2]["id"] == third
        with client_for(cluster, new.id) as client:
            assert client.stats_tube("logs")["current-jobs-ready"] == 3  # nothing reserved
        tail.send_signal(signal.SIGINT)
        assert tail.wait(timeout=10) in (0, 130)
    finally:
        if tail.poll() is None:
            tail.kill()
            tail.wait()
