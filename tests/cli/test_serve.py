"""`haqueue serve`'s beanstalkd-compatible flags, run as real commands."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.support.servers import RawConn, start_haqueue


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "haqueue", "serve", *args],
                          capture_output=True, text=True, timeout=20)


def test_dash_v_prints_the_version():
    result = run("-v")
    assert result.returncode == 0
    assert result.stdout.startswith("haqueue ") and "beanstalkd 1.12 protocol" in result.stdout


def test_dash_h_is_help_and_lists_the_beanstalkd_flags():
    result = run("-h")
    assert result.returncode == 0
    for flag in ("-l,", "-p,", "-b,", "-f,", "-F,", "-z,", "-s,", "-c", "-n", "-u,", "-V,", "-v,"):
        assert flag in result.stdout, flag


def test_an_unknown_user_is_one_line():
    result = run("-u", "no-such-user-here", "-p", "0")
    assert result.returncode == 1
    assert result.stderr.strip() == "haqueue: -u: no such user 'no-such-user-here'"


@pytest.mark.skipif(os.geteuid() != 0, reason="switching user needs root")
def test_dash_u_runs_the_server_as_that_user():
    srv = start_haqueue("-u", "nobody")
    try:
        with open(f"/proc/{srv.pid}/status") as f:
            uid_line = next(line for line in f if line.startswith("Uid:"))
        assert int(uid_line.split()[1]) == 65534  # nobody
        with RawConn(srv.host, srv.port) as conn:
            conn.send(b"put 0 0 10 2\r\nhi\r\n")
            assert conn.recv_until(1).startswith(b"INSERTED")
    finally:
        srv.stop()


def test_max_job_size_is_enforced():
    srv = start_haqueue("-z", "10")
    try:
        with RawConn(srv.host, srv.port) as conn:
            conn.send(b"put 0 0 10 11\r\n01234567890\r\nput 0 0 10 10\r\n0123456789\r\n")
            replies = conn.recv_until(2)
        assert replies.startswith(b"JOB_TOO_BIG\r\nINSERTED ")
    finally:
        srv.stop()


def test_config_without_node_is_a_usage_error(tmp_path):
    result = run("--config", str(tmp_path / "c.toml"))
    assert result.returncode == 2
    assert "--config and --node go together" in result.stderr


def test_a_bad_cluster_file_is_one_line(tmp_path):
    bad = tmp_path / "c.toml"
    bad.write_text("[cluster]\nname = 'x'\n")
    result = run("--config", str(bad), "--node", "n1")
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1 and "cluster.vip: missing" in result.stderr


def test_an_id_rule_that_could_repeat_ids_stops_the_node_in_one_line(tmp_path):
    bad = tmp_path / "c.toml"
    bad.write_text("[cluster]\nname = 'x'\nvip = '192.0.2.100/24'\nsecret = 's'\n"
                   "[[nodes]]\nid = 'n1'\naddress = '192.0.2.11'\ninterface = 'lo'\npriority = 100\n"
                   "[[id_rules]]\nname = 'daily'\nformat = '{month:02}{counter:04}'\nmax_counter = 9999\n"
                   "reset_seconds = 86400\n")
    result = run("--config", str(bad), "--node", "n1")
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1, result.stderr
    assert "id_rules[0]: id rule 'daily'" in result.stderr and "render the same for two cycles" in result.stderr


def test_a_bad_max_memory_is_one_line():
    result = run("-p", "0", "--max-memory", "lots")
    assert result.returncode == 1
    assert result.stderr.strip() == (
        "haqueue: --max-memory: 'lots' is not a size (bytes, or a number with KiB, MiB, GiB, K, M, G)")


def test_a_bad_disk_reserve_is_one_line():
    result = run("-p", "0", "--disk-reserve", "plenty")
    assert result.returncode == 1
    assert result.stderr.strip() == (
        "haqueue: --disk-reserve: 'plenty' is not a size (bytes, or a number with KiB, MiB, GiB, K, M, G)")


def test_limit_flags_show_in_stats():
    srv = start_haqueue("--max-connections", "77", "--max-tubes", "9", "--max-watched-tubes", "4",
                        "--max-memory", "3GiB")
    try:
        with RawConn(srv.host, srv.port) as conn:
            conn.send(b"stats\r\n")
            body = conn.recv_reply()
        for line in (b"haqueue-max-connections: 77", b"haqueue-max-tubes: 9",
                     b"haqueue-max-watched-tubes: 4", b"haqueue-max-memory: 3221225472",
                     b"haqueue-tls: false", b"haqueue-rejected-connections: 0"):
            assert b"\n" + line + b"\n" in body, line
    finally:
        srv.stop()


def test_id_port_with_a_unix_socket_is_one_line(tmp_path):
    result = run("-l", f"unix:{tmp_path}/s", "--id-port", "1200")
    assert result.returncode == 1
    assert result.stderr.strip() == (
        "haqueue: --id-port needs -l HOST (the id service's UDP address), not a Unix socket")


def test_an_id_port_in_use_is_one_line(tmp_path):
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as taken:
        taken.bind(("127.0.0.1", 0))
        port = taken.getsockname()[1]
        result = run("-l", "127.0.0.1", "-p", "0", "--id-port", str(port), "-b", str(tmp_path / "data"))
    assert result.returncode == 1
    assert result.stderr.strip() == f"haqueue: cannot serve ids on 127.0.0.1:{port}: Address already in use"


def test_an_id_port_without_a_data_directory_is_refused_with_one_line():
    # In memory a restart starts every counter again: the ids handed out before
    # it would be handed out again.
    result = run("-l", "127.0.0.1", "-p", "0", "--id-port", "1200")
    assert result.returncode == 1
    assert result.stderr.strip() == ("haqueue: --id-port 1200 needs -b DIR: without a journal on disk "
                                     "a restart would hand out the same ids again")


def test_gearman_port_with_a_unix_socket_is_one_line(tmp_path):
    result = run("-l", f"unix:{tmp_path}/s", "--gearman-port", "4730")
    assert result.returncode == 1
    assert result.stderr.strip() == (
        "haqueue: --gearman-port needs -l HOST (the Gearman port's address), not a Unix or inherited socket")


def test_a_gearman_port_that_is_the_beanstalk_port_is_one_line():
    result = run("-l", "127.0.0.1", "-p", "4730", "--gearman-port", "4730")
    assert result.returncode == 1
    assert result.stderr.strip() == "haqueue: --gearman-port 4730 is the beanstalkd port (-p)"


def test_a_gearman_port_in_use_is_one_line():
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run("-l", "127.0.0.1", "-p", "0", "--gearman-port", str(port))
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == (
        f"haqueue: cannot serve Gearman on 127.0.0.1:{port}: Address already in use")
