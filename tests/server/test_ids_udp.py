"""The id service against a real node: JSON over UDP and GET /id/... on the admin port."""

from __future__ import annotations

import json
import re
import socket
import time
import urllib.error
import urllib.request

import pytest

from tests.support.servers import HOST, free_port, free_udp_port, start_haqueue

DEADLINE = 10.0


class IdClient:
    """id_server's client pattern: a connect()ed UDP socket, one datagram, read 256 bytes."""

    def __init__(self, port: int) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.connect((HOST, port))

    def close(self) -> None:
        self.sock.close()

    def ask(self, datagram: bytes, timeout: float = 0.5) -> bytes | None:
        """One try: the reply, or None if none came within timeout."""
        self.sock.settimeout(timeout)
        self.sock.send(datagram)
        try:
            return self.sock.recv(256)
        except (socket.timeout, ConnectionRefusedError):
            return None

    def call(self, datagram: bytes) -> dict:
        """Retry until a reply comes (as clients do: UDP, and the node may be electing itself)."""
        deadline = time.monotonic() + DEADLINE
        while time.monotonic() < deadline:
            reply = self.ask(datagram)
            if reply is not None:
                return json.loads(reply)
        raise AssertionError(f"no reply to {datagram!r} within {DEADLINE} s")


def get(rule: str = "o2o", app: str = "test", **extra) -> bytes:
    return json.dumps({"action": "get", "rule_name": rule, "app_name": app, **extra}).encode()


@pytest.fixture
def node(tmp_path):
    id_port, admin_port = free_udp_port(), free_port()
    data_dir = tmp_path / "data"
    args = ("--id-port", str(id_port), "--admin", f"{HOST}:{admin_port}")
    server = start_haqueue("-f", "0", *args, data_dir=str(data_dir))
    client = IdClient(id_port)
    yield server, client, admin_port, args, data_dir
    client.close()
    server.stop()


def test_o2o_ids_increase_and_continue_across_a_restart(node):
    server, client, admin_port, args, data_dir = node
    first = client.call(get(seq="a1"))
    assert first["code"] == 0 and first["message"] == "success" and first["seq"] == "a1"
    assert first["action"] == "get" and first["rule_name"] == "o2o" and first["app_name"] == "test"
    assert re.fullmatch(r"\d(0[1-9]|1[0-2])(0[1-9]|[12]\d|3[01])\d{4}", first["data"]), first["data"]
    ids = [first["data"]] + [client.call(get())["data"] for _ in range(20)]
    counters = [int(i[-4:]) for i in ids]
    assert counters == sorted(counters) and len(set(ids)) == len(ids)

    server.stop()
    restarted = start_haqueue("-f", "0", *args, data_dir=str(data_dir))
    try:
        after = [client.call(get())["data"] for _ in range(5)]
    finally:
        restarted.stop()
    assert not set(after) & set(ids)
    assert [int(i[-4:]) for i in after] == list(range(counters[-1] + 1, counters[-1] + 6))


def test_counter_rule_and_monitor(node):
    _, client, *_ = node
    values = [int(client.call(get("counter", "orders"))["data"]) for _ in range(5)]
    assert values == list(range(values[0], values[0] + 5))
    other_app = int(client.call(get("counter", "invoices"))["data"])
    assert other_app == values[0]  # counters are per (rule, app)
    report = client.call(json.dumps({"action": "monitor", "rule_name": "counter", "app_name": "orders",
                                     "seq": 9}).encode())
    assert report["code"] == 0 and report["seq"] == 9
    assert report["data"]["counter"] == values[-1] and report["data"]["node_offset"] == 0
    missing = client.call(json.dumps({"action": "monitor", "rule_name": "counter", "app_name": "none"}).encode())
    assert (missing["code"], missing["error"]) == (-1, "not_exist")


@pytest.mark.parametrize("datagram, error", [
    (get(rule="nope"), "unknown_rule"),
    (get(app="bad app"), "bad_request"),
    (get(salt="abc"), "bad_request"),  # o2o has no {salt}
    (json.dumps({"action": "delete", "rule_name": "o2o", "app_name": "test"}).encode(), "unknown_action"),
    (json.dumps({"action": "get", "rule_name": "o2o", "pad": "x" * 20}).encode(), "bad_request"),
])
def test_bad_requests_get_their_error(node, datagram, error):
    _, client, *_ = node
    client.call(get())  # the node serves
    reply = client.ask(datagram, timeout=2)
    assert reply is not None and len(reply) <= 256
    decoded = json.loads(reply)
    assert decoded["code"] == -1 and decoded["error"] == error


def test_junk_gets_silence_and_the_node_keeps_serving(node):
    _, client, *_ = node
    client.call(get())
    for junk in (b"x", b"{}" * 30, b"\xff" * 100, b"[1,2,3]" + b" " * 50, b"{" + b"x" * 2000 + b"}"):
        assert client.ask(junk, timeout=0.3) is None
    assert client.call(get())["code"] == 0


def http_id(admin_port: int, path: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(f"http://{HOST}:{admin_port}{path}", timeout=5) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_http_form(node):
    _, client, admin_port, *_ = node
    udp = int(client.call(get("counter", "web"))["data"])
    status, body = http_id(admin_port, "/id/counter/web?seq=7")
    assert status == 200 and body["code"] == 0 and body["seq"] == "7"
    assert int(body["data"]) == udp + 1
    status, body = http_id(admin_port, "/id/counter/web/monitor")
    assert status == 200 and body["data"]["counter"] == udp + 1
    assert http_id(admin_port, "/id/nope/web")[0] == 404
    assert http_id(admin_port, "/id/counter/bad%20app")[0] == 400
    assert http_id(admin_port, "/id/counter")[0] == 400
    assert http_id(admin_port, "/id/counter/web?salt=x")[0] == 400


def commit_index(admin_port: int) -> int:
    with urllib.request.urlopen(f"http://{HOST}:{admin_port}/status", timeout=5) as reply:
        return json.loads(reply.read())["commit_index"]


HOSTILE = [
    b"x" * 1401,  # one past the size limit
    b'{"action":"get","rule_name":"counter","app_name":"' + b"a" * 1400 + b'"}',
    b"{" * 47,  # broken JSON
    b"[" * 1000 + b"]" * 400,  # deep nesting
    b'{"action":"get","rule_name":"counter","app_name":"a","x":NaN}',
    b"\x00" * 100,
    json.dumps({"action": ["get"], "rule_name": "counter", "app_name": "a"}).encode(),
    json.dumps({"action": "get", "rule_name": 7, "app_name": "a"}).encode(),
    json.dumps({"action": "get", "rule_name": "counter", "app_name": {"a": 1}}).encode(),
    json.dumps({"action": "get", "rule_name": "counter", "app_name": "a\u0000b"}).encode(),
    json.dumps({"action": "get", "rule_name": "counter", "app_name": "a<b>"}).encode(),
    json.dumps({"action": "get", "rule_name": "counter", "app_name": "\ud800xx"}).encode(),
    json.dumps({"action": "get", "rule_name": "no-such-rule", "app_name": "a"}).encode(),
    json.dumps({"action": "drop", "rule_name": "counter", "app_name": "a"}).encode(),
    json.dumps({"action": "get", "rule_name": "counter", "app_name": "a", "seq": [1]}).encode(),
    json.dumps({"action": "get", "rule_name": "counter", "app_name": "a", "salt": "zz"}).encode(),
    json.dumps({"action": "get", "rule_name": "counter", "app_name": "a", "seq": "s" * 100}).encode(),
]


def test_hostile_datagrams_get_an_error_or_silence_and_never_a_log_entry(node):
    _, client, admin_port, *_ = node
    client.call(get("counter", "a"))
    before = commit_index(admin_port)
    smallest = 47
    for datagram in HOSTILE:
        reply = client.ask(datagram, timeout=0.2)
        if reply is not None:  # an error, never success, never more than 256/47 times the request
            assert json.loads(reply)["code"] == -1, (datagram[:60], reply)
            assert len(reply) <= 256 and len(datagram) >= smallest
    assert commit_index(admin_port) == before  # nothing hostile reached the log
    value = int(client.call(get("counter", "a"))["data"])
    assert commit_index(admin_port) == before + 1 and value == 1


def test_a_source_over_the_rate_limit_is_dropped_and_served_again_after(tmp_path):
    id_port = free_udp_port()
    server = start_haqueue("--id-port", str(id_port), "--id-rate-limit", "200",  # burst 100
                           data_dir=str(tmp_path / "data"))
    client = IdClient(id_port)
    try:
        client.call(get("counter", "flood"))  # the node serves (a token or a few taken)
        request = get("counter", "flood")
        for _ in range(400):  # a burst, sent without waiting for replies
            client.sock.send(request)
        replies = 0
        client.sock.settimeout(0.5)
        try:
            while True:
                client.sock.recv(256)
                replies += 1
        except socket.timeout:
            pass
        # About the burst (100), plus what refilled while sending: far from 400.
        assert 90 <= replies < 250, replies
        assert client.call(get("counter", "flood"))["code"] == 0  # served again once it slows down
    finally:
        client.close()
        server.stop()


def test_a_wildcard_bound_socket_replies_from_the_address_each_request_was_sent_to():
    """With -l 0.0.0.0 the kernel would pick a reply's source by route (127.0.0.1
    here), and a client that connect()ed to 127.0.0.5, as id_server's client
    does, drops it. IP_PKTINFO names the request's destination as the source.
    Traffic stays on loopback; the wildcard socket lives for the test only."""
    import asyncio

    from haqueue.server.ids.udp import PktinfoTransport

    class Echo:
        transport = None

        def connection_made(self, transport):
            self.transport = transport

        def datagram_received(self, data, addr, local=None):
            if data == b"plain":
                self.transport.sendto(b"plain reply", addr)  # the kernel picks the source
            else:
                self.transport.sendto_from(b"pktinfo reply", addr, local)

        def connection_lost(self, exc):
            pass

    async def scenario() -> tuple[bytes | None, bytes | None]:
        loop = asyncio.get_running_loop()
        server = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        server.bind(("0.0.0.0", 0))
        transport = PktinfoTransport(loop, server, Echo())
        client = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        client.setblocking(False)
        client.connect(("127.0.0.5", server.getsockname()[1]))

        async def ask(data: bytes) -> bytes | None:
            client.send(data)
            try:
                return await asyncio.wait_for(loop.sock_recv(client, 256), 0.5)
            except asyncio.TimeoutError:
                return None

        try:
            return await ask(b"plain"), await ask(b"pktinfo")
        finally:
            client.close()
            transport.close()

    plain, pktinfo = asyncio.run(scenario())
    assert plain is None  # the premise: without IP_PKTINFO a connect()ed client hears nothing
    assert pktinfo == b"pktinfo reply"


ONE_NODE = """\
[cluster]
name = "solo"
vip = "127.0.0.100/8"
secret = "s"
client_port = {client}
admin_port = {admin}
raft_port = {raft}
id_port = {id_port}

[[nodes]]
id = "n1"
address = "127.0.0.1"
interface = "lo"
priority = 100

[[id_rules]]
name = "daily"
format = "{prefix}{{yy:02}}{{month:02}}{{day:02}}{{counter:04}}"
max_counter = 9999
reset_seconds = 86400
timezone = "+08:00"
"""


def test_file_rules_are_committed_and_a_change_that_could_repeat_ids_is_not(tmp_path):
    """A one-node cluster file with a rule: the node commits it and serves it.
    Restarted with the rule's format changed after it has counters, the node
    does not propose the change (one error line in its log), keeps serving
    the committed rule, and its counter goes on."""
    import subprocess
    import sys

    id_port = free_udp_port()
    ports = dict(client=free_port(), admin=free_port(), raft=free_port(), id_port=id_port)
    config = tmp_path / "cluster.toml"
    data = tmp_path / "data"
    client = IdClient(id_port)

    def run_node(prefix: str, log_name: str) -> list[dict]:
        config.write_text(ONE_NODE.format(prefix=prefix, **ports))
        log_path = tmp_path / log_name
        with open(log_path, "wb") as log:
            node = subprocess.Popen([sys.executable, "-m", "haqueue", "serve", "--config", str(config),
                                     "--node", "n1", "-b", str(data), "-f", "0"], stdout=log, stderr=log)
        try:
            deadline = time.monotonic() + DEADLINE
            while client.call(get("counter", "ready")).get("error") == "not_leader":  # still starting
                assert time.monotonic() < deadline, "the node never served"
            return [client.call(get("daily", "a")) for _ in range(3)], log_path
        finally:
            node.terminate()
            node.wait(timeout=10)

    try:
        first, _ = run_node("A", "first.log")
        second, log_path = run_node("B", "second.log")
    finally:
        client.close()
    assert all(reply["code"] == 0 for reply in first + second)
    assert [r["data"][0] for r in first + second] == ["A"] * 6  # still the committed format
    assert [int(r["data"][-4:]) for r in first + second] == list(range(6))
    refused = [line for line in log_path.read_text().splitlines() if "not proposed" in line]
    assert len(refused) == 1 and "format cannot change once the rule has counters" in refused[0], refused


EXTRA_RULE = """
[[id_rules]]
name = "extra"
format = "X{counter:04}"
max_counter = 9999
"""


def test_sighup_rereads_the_rules_and_the_leader_commits_them(tmp_path):
    """An edited cluster file takes effect on SIGHUP, as a committed entry; an
    edit that does not validate changes nothing and is one error line."""
    import signal
    import subprocess
    import sys

    id_port = free_udp_port()
    ports = dict(client=free_port(), admin=free_port(), raft=free_port(), id_port=id_port)
    config = tmp_path / "cluster.toml"
    config.write_text(ONE_NODE.format(prefix="A", **ports))
    log_path = tmp_path / "node.log"
    client = IdClient(id_port)
    with open(log_path, "wb") as log:
        node = subprocess.Popen([sys.executable, "-m", "haqueue", "serve", "--config", str(config),
                                 "--node", "n1", "-b", str(tmp_path / "data")], stdout=log, stderr=log)

    def wait_for(condition, what: str):
        deadline = time.monotonic() + DEADLINE
        while True:
            reply = client.call(get("extra", "a"))
            if condition(reply):
                return reply
            assert time.monotonic() < deadline, f"{what}: {reply}"
            time.sleep(0.05)  # polling pace, bounded by the deadline

    try:
        first = wait_for(lambda r: r.get("error") != "not_leader", "the node never served")
        assert first["error"] == "unknown_rule"
        config.write_text(ONE_NODE.format(prefix="A", **ports) + EXTRA_RULE)
        node.send_signal(signal.SIGHUP)
        assert wait_for(lambda r: r["code"] == 0, "SIGHUP did not bring the new rule")["data"] == "X0000"
        config.write_text(ONE_NODE.format(prefix="A", **ports).replace("{counter:04}", "{counter:02}"))
        node.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + DEADLINE
        while "id rules not reloaded" not in log_path.read_text():
            assert time.monotonic() < deadline, "no error line for a file that does not validate"
            time.sleep(0.05)
        assert client.call(get("extra", "a"))["data"] == "X0001"  # the committed rules stay
    finally:
        client.close()
        node.terminate()
        node.wait(timeout=10)
    errors = [line for line in log_path.read_text().splitlines() if "id rules not reloaded" in line]
    assert len(errors) == 1 and "needs a fixed width of at least 4" in errors[0]


def test_without_a_data_directory_the_admin_port_hands_out_no_ids():
    # In memory a restart starts every counter again; `serve` refuses --id-port
    # without -b (tests/cli/test_serve.py), and /id answers why instead of an id.
    admin_port = free_port()
    server = start_haqueue("--admin", f"{HOST}:{admin_port}")
    try:
        assert http_id(admin_port, "/id/counter/orders") == (
            503, {"code": -1, "message": "ids need -b DIR", "error": "no_journal"})
    finally:
        server.stop()
