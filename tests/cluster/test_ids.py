"""The id service on a real three-node cluster: ids through the VIP while the leader is killed.

Every node gets `--id-port`; the leader serves it on its own address and on
the VIP (127.0.0.100 on loopback, bound with IP_FREEBIND). The client is
id_server's pattern, a connect()ed UDP socket: it only sees replies that come
from the VIP, the address it sent to.
"""

from __future__ import annotations

import json
import signal
import socket
import time
import urllib.error
import urllib.request

import pytest

from tests.cluster.convergence import wait_converged
from tests.support import servers

VIP = "127.0.0.100"
FAILOVER_BOUND = 10.0
ELECTION_BOUND = 5.0
IDS_EACH_SIDE = 30


def free_udp_port() -> int:
    return servers.free_udp_port(VIP)  # free on the VIP, where the leader binds it too


def get_id(sock: socket.socket, deadline: float, rule: str = "counter") -> int | None:
    """One id of `rule` (its id is its counter), retrying each 0.3 s until deadline (None then)."""
    request = json.dumps({"action": "get", "rule_name": rule, "app_name": "failover"}).encode()
    while time.monotonic() < deadline:
        sock.send(request)
        try:
            reply = json.loads(sock.recv(256))
        except (socket.timeout, ConnectionRefusedError):
            continue
        assert reply["code"] == 0, reply
        return int(reply["data"])
    return None


def test_ids_through_the_vip_never_repeat_or_go_back_across_a_leader_kill(make_cluster):
    port = free_udp_port()
    cluster = make_cluster(["-f0", "--id-port", str(port)])
    old = cluster.leader()
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.settimeout(0.3)
    sock.connect((VIP, port))
    try:
        before = [get_id(sock, time.monotonic() + 10) for _ in range(IDS_EACH_SIDE)]
        assert None not in before, "the leader did not serve ids on the VIP"
        killed_at = time.monotonic()
        cluster.kill_node(old.id)
        first = get_id(sock, killed_at + FAILOVER_BOUND)
        assert first is not None, f"no id within {FAILOVER_BOUND} s of killing {old.id}"
        new = cluster.leader(timeout=5, exclude=old.id)
        assert new is not None and new.id != old.id
        after = [first] + [get_id(sock, time.monotonic() + 10) for _ in range(IDS_EACH_SIDE - 1)]
    finally:
        sock.close()
    assert_increasing_across(before, after)
    assert min(after) > max(before)

    # The killed node comes back and agrees on the counters (same digest).
    cluster.start_node(old.id)
    wait_converged(cluster, timeout=15)


def test_followers_answer_not_leader_naming_the_leader(make_cluster):
    """id_server's client walks its server list until code == 0: a follower's
    answer names the leader's id endpoint, where the next try succeeds."""
    port = free_udp_port()
    cluster = make_cluster(["-f0", "--id-port", str(port)])
    leader = cluster.leader()
    spec = cluster.spec
    follower = next(n for n in spec.nodes if n.id != leader.id)
    request = json.dumps({"action": "get", "rule_name": "o2o", "app_name": "walk", "seq": 1}).encode()
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.settimeout(0.3)
        sock.connect((follower.address, port))
        deadline = time.monotonic() + 10
        reply = None
        while reply is None or reply.get("leader") is None:  # until it has heard from the leader
            assert time.monotonic() < deadline, f"no not_leader reply naming the leader: {reply}"
            sock.send(request)
            try:
                reply = json.loads(sock.recv(256))
            except socket.timeout:
                continue
            assert (reply["code"], reply["error"], reply["seq"]) == (-1, "not_leader", 1), reply
    assert reply["leader"] == f"{spec.node(leader.id).address}:{port}"
    host, _, leader_port = reply["leader"].rpartition(":")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.settimeout(2)
        sock.connect((host, int(leader_port)))
        sock.send(request)
        assert json.loads(sock.recv(256))["code"] == 0

    # The HTTP form on the follower: 503, retry in a second, at the leader.
    path = "/id/o2o/walk?seq=2"
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(f"http://{follower.address}:{follower.admin_port}{path}", timeout=5)
    assert refused.value.code == 503 and refused.value.headers["Retry-After"] == "1"
    location = refused.value.headers["Location"]
    assert location == f"http://{spec.node(leader.id).address}:{spec.node(leader.id).admin_port}{path}"
    with urllib.request.urlopen(location, timeout=5) as answer:
        assert json.loads(answer.read())["code"] == 0


SEGMENT_RULE = """
[[id_rules]]
name = "seg"
format = "{counter:019}"
mode = "segment"
segment = 50
"""


def assert_increasing_across(before: list, after: list) -> None:
    """Every request after the kill was answered, and no id repeats or goes back across it."""
    assert None not in after
    ids = before + after
    assert len(set(ids)) == len(ids), "an id was issued twice"
    assert ids == sorted(ids), "ids went back"


def segment_cluster(make_cluster):
    """A cluster serving ids on a free UDP port, with SEGMENT_RULE in its file: (port, cluster, leader)."""
    port = free_udp_port()
    cluster = make_cluster(["-f0", "--id-port", str(port)], start=False)
    with open(cluster.config_path, "a") as file:
        file.write(SEGMENT_RULE)
    cluster.start()
    leader = cluster.leader(timeout=15)
    assert leader is not None
    return port, cluster, leader


def test_file_rules_are_committed_and_segment_ids_skip_but_never_repeat_or_go_back_across_a_kill(make_cluster):
    """A segment-mode rule from the cluster file: the leader commits it, serves
    blocks from memory, and the next leader starts above every block the
    killed one held (values skip; none repeats, none goes back)."""
    port, cluster, old = segment_cluster(make_cluster)
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.settimeout(0.3)
    sock.connect((VIP, port))
    try:
        before = [get_id(sock, time.monotonic() + 10, "seg") for _ in range(IDS_EACH_SIDE)]
        assert None not in before, "the leader did not serve the file's segment rule"
        assert before == list(range(IDS_EACH_SIDE))  # one leader: consecutive, from its blocks
        killed_at = time.monotonic()
        cluster.kill_node(old.id)
        first = get_id(sock, killed_at + FAILOVER_BOUND, "seg")
        assert first is not None, f"no id within {FAILOVER_BOUND} s of killing {old.id}"
        after = [first] + [get_id(sock, time.monotonic() + 10, "seg") for _ in range(IDS_EACH_SIDE - 1)]
    finally:
        sock.close()
    assert_increasing_across(before, after)
    # The killed leader held the block 0-49 (and perhaps, prefetched, 50-99):
    # the next leader starts above every committed block, wasting the rest.
    assert first >= 50, f"the new leader began at {first}, inside a block the old one held"
    cluster.start_node(old.id)
    wait_converged(cluster, timeout=15)  # the rules and counters are the same on every node


def ask_once(address: tuple[str, int], request: bytes, timeout: float) -> dict | None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.settimeout(timeout)
        sock.connect(address)
        sock.send(request)
        try:
            return json.loads(sock.recv(256))
        except (socket.timeout, ConnectionRefusedError):
            return None


def test_a_paused_leader_resumed_after_a_new_one_serves_no_id_from_its_old_blocks(make_cluster):
    """SIGSTOP the leader while it holds a block, let the others elect and hand
    out higher ids, SIGCONT it, and ask it at once (its socket also holds the
    requests sent while it was stopped): its read lease has lapsed, so it
    answers no id from the block it still holds, only silence or not_leader."""
    port, cluster, old = segment_cluster(make_cluster)
    request = json.dumps({"action": "get", "rule_name": "seg", "app_name": "paused"}).encode()
    spec = cluster.spec
    old_address = (spec.node(old.id).address, port)
    first = ask_once(old_address, request, 5)
    assert first is not None and first["code"] == 0, first
    held = int(first["data"])  # it now holds the rest of the block, and a prefetched one
    cluster.signal_node(old.id, signal.SIGSTOP)
    try:
        new = cluster.leader(timeout=ELECTION_BOUND, exclude=old.id)
        assert new is not None, f"no other leader within {ELECTION_BOUND} s of pausing {old.id}"
        new_address = (spec.node(new.id).address, port)
        deadline = time.monotonic() + 10
        reply = None
        while reply is None or reply["code"] != 0:
            assert time.monotonic() < deadline, f"the new leader gave no id: {reply}"
            reply = ask_once(new_address, request, 0.5)
        newer = int(reply["data"])
        assert newer >= held + 50  # above the whole block the paused leader holds
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as stale:
            stale.connect(old_address)
            for _ in range(5):
                stale.send(request)  # queued in the paused node's socket
            cluster.signal_node(old.id, signal.SIGCONT)
            stale.settimeout(0.3)
            answers = []
            end = time.monotonic() + 2.0
            while time.monotonic() < end:
                try:
                    answers.append(json.loads(stale.recv(256)))
                except socket.timeout:
                    stale.send(request)
    finally:
        cluster.signal_node(old.id, signal.SIGCONT)
    served = [a for a in answers if a["code"] == 0]
    assert not served, f"the resumed leader served {served} after {new.id} gave {newer}"
    assert all(a["error"] == "not_leader" for a in answers), answers
