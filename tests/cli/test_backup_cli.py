"""`haqueue backup` and `haqueue restore` on a lone node, and every bad input as one line."""

from __future__ import annotations

import json
import pickle
import urllib.error
import urllib.request

import greenstalk
import pytest

from haqueue.backup import fileformat, restore as restoring
from haqueue.cli.main import main
from haqueue.replication import snapshot
from tests.support import servers

TOKEN = "backup-secret"


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def one_line_error(code: int, err: str, says: str) -> None:
    assert code == 1
    assert err.count("\n") == 1 and err.startswith("haqueue: "), err
    assert says in err, err
    assert "Traceback" not in err


@pytest.fixture(scope="module")
def backup_file(tmp_path_factory):
    """A backup taken from a lone node with an admin token."""
    where = tmp_path_factory.mktemp("lone")
    admin = servers.free_port()
    with servers.haqueue("--admin", f"127.0.0.1:{admin}", "--admin-token", TOKEN, data_dir=where / "data") as node:
        client = greenstalk.Client((node.host, node.port), encoding=None)
        client.put(b"one", priority=3)
        client.put(b"two", delay=900)
        client.close()
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(f"http://127.0.0.1:{admin}/backup", timeout=5)
        assert refused.value.code == 401
        path = where / "lone.haqbackup"
        assert main(["backup", "--address", f"127.0.0.1:{admin}", "--token", TOKEN, "-o", str(path)]) == 0
        assert not (where / "lone.haqbackup.partial").exists()
        with urllib.request.urlopen(urllib.request.Request(
                f"http://127.0.0.1:{admin}/status", headers={"Authorization": f"Bearer {TOKEN}"}), timeout=5) as r:
            events = json.loads(r.read())["events"]
        assert [e["event"] for e in events if e["event"].startswith("backup")] == ["backup_started", "backup_sent"]
    return path


def test_backup_and_restore_of_a_lone_node_say_what_they_did(backup_file, tmp_path, capsys):
    code, out, _ = run(capsys, "restore", str(backup_file), "-b", str(tmp_path / "d1"), "-b", str(tmp_path / "d2"),
                       "--skip-ids", "1000")
    assert code == 0
    assert out.splitlines()[0] == ("restored 2 jobs (ready 1, delayed 1, reserved 0, buried 0) in 1 tubes "
                                   "(0 paused), 0 id counters, 0 Gearman jobs")
    assert "ids skip 1000: next job id 1003" in out
    # Both directories hold the same snapshot, which a node reads as its own.
    first, second = (tmp_path / d / restoring.SNAPSHOT_NAME for d in ("d1", "d2"))
    assert first.read_bytes() == second.read_bytes()
    state, raft_data = snapshot.read(str(first))
    assert state.digest()[:16] in out and sorted(state.jobs) == [1, 2]
    assert raft_data[0][2] == 0 and raft_data[0][1] >= 2


def test_a_restored_lone_node_serves_the_jobs_and_new_ids_above(backup_file, tmp_path, capsys):
    assert run(capsys, "restore", str(backup_file), "-b", str(tmp_path / "d"))[0] == 0
    with servers.haqueue(data_dir=tmp_path / "d") as node:
        client = greenstalk.Client((node.host, node.port), encoding=None)
        assert client.peek_ready().body == b"one"
        assert 800 < client.stats_job(2)["time-left"] <= 900
        third = client.put(b"three")
        assert third > 60_000_000  # auto: a minute at a million ids a second
        client.close()
    with servers.haqueue(data_dir=tmp_path / "d") as node:  # restarted: snapshot, then its own journal
        client = greenstalk.Client((node.host, node.port), encoding=None)
        assert client.peek(third).body == b"three" and client.peek(1).body == b"one"
        assert client.put(b"four") == third + 1
        client.close()


def test_a_restore_refuses_a_directory_in_use(backup_file, tmp_path, capsys):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "raft.journal").write_bytes(b"")
    one_line_error(*run(capsys, "restore", str(backup_file), "-b", str(tmp_path / "d"))[::2], "not empty")


@pytest.mark.parametrize("damage, says", [
    (lambda data: data.replace(b"HAQUEUE-BACKUP 1 ", b"HAQUEUE-BACKUP 9 ", 1), "format 9 is newer"),
    (lambda data: data[:-10], "truncated"),
    (lambda data: data[:-5] + bytes(b ^ 0x55 for b in data[-5:]), "checksum does not match"),
    (lambda data: b"", "not a haqueue backup"),
    (lambda data: pickle.dumps("x"), "not a haqueue backup"),
])
def test_a_damaged_or_newer_backup_is_refused_in_one_line(backup_file, tmp_path, capsys, damage, says):
    bad = tmp_path / "bad.haqbackup"
    bad.write_bytes(damage(backup_file.read_bytes()))
    code, _, err = run(capsys, "restore", str(bad), "-b", str(tmp_path / "d"))
    one_line_error(code, err, says)
    assert not (tmp_path / "d").exists()


@pytest.mark.parametrize("args, says", [
    (["restore", "/nonexistent/backup", "-b", "/tmp/nowhere-restore"], "No such file"),
    (["restore", "FILE", "-b", "DIR", "--skip-ids", "lots"], "is not auto or a count"),
    (["restore", "FILE"], "Missing option"),
    (["backup", "-o", "x"], "give --config FILE or --address HOST:PORT"),
    (["backup", "--address", "nohost", "-o", "x"], "is not HOST:PORT"),
    (["backup", "--config", "/nonexistent.toml", "-o", "x"], "nonexistent.toml"),
])
def test_bad_input_is_one_line(tmp_path, capsys, args, says):
    args = [str(tmp_path / "f") if a == "FILE" else str(tmp_path / "d") if a == "DIR" else a for a in args]
    (tmp_path / "f").write_bytes(b"")
    code, _, err = run(capsys, *args)
    assert code != 0 and err.count("\n") == 1 and says in err and "Traceback" not in err, err


def test_backup_from_a_closed_port_is_one_line(tmp_path, capsys):
    port = servers.free_port()
    code, _, err = run(capsys, "backup", "--address", f"127.0.0.1:{port}", "-o", str(tmp_path / "x"))
    one_line_error(code, err, "backup: ")
    assert not (tmp_path / "x").exists() and not (tmp_path / "x.partial").exists()


def test_a_header_fields_file_round_trip_keeps_the_taken_at_time(backup_file):
    _, fields = fileformat.decode(backup_file.read_bytes())
    assert fields["format"] == 1 and fields["taken_at_ms"] > 1_700_000_000_000 and fields["index"] >= 2


def test_a_client_that_leaves_mid_backup_is_an_event_and_the_next_backup_works(tmp_path, capsys):
    import socket
    import time

    admin = servers.free_port()
    with servers.haqueue("--admin", f"127.0.0.1:{admin}", "-z", "20000", data_dir=tmp_path / "data") as node:
        body = b"b" * 16_000
        with socket.create_connection((node.host, node.port)) as sock:  # 16 MB: more than every buffer between
            sock.sendall((b"put 0 0 60 16000\r\n" + body + b"\r\n") * 1000)
            replies = b""
            while replies.count(b"\r\n") < 1000:
                replies += sock.recv(65536)
        with socket.create_connection(("127.0.0.1", admin)) as leaving:
            leaving.sendall(b"GET /backup HTTP/1.0\r\n\r\n")
            assert leaving.recv(4096).startswith(b"HTTP/1.0 200 OK")
        deadline = time.monotonic() + 10
        while True:
            with urllib.request.urlopen(f"http://127.0.0.1:{admin}/status", timeout=5) as answer:
                names = [e["event"] for e in json.loads(answer.read())["events"]]
            if "backup_failed" in names or time.monotonic() > deadline:
                break
            time.sleep(0.05)  # polling the node's events: no way to await one from outside
        assert [n for n in names if n.startswith("backup")] == ["backup_started", "backup_failed"]
        code, out, err = run(capsys, "backup", "--address", f"127.0.0.1:{admin}", "-o", str(tmp_path / "b"))
        assert code == 0, err
        records, _ = fileformat.decode((tmp_path / "b").read_bytes())
        assert len(records[5]) == 1000
