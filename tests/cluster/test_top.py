"""`haqueue top` in a real terminal (tmux): it shows the leader, the tubes and their depth,
follows a failover in place, and quits on q (haqueue/cli/top.py)."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from haqueue import admin_client
from tests.support.servers import RawConn
from tests.support.terminal import require_tmux, running_tmux


def leader_line(leader_id: str):
    return lambda screen: re.search(rf"^haqueue top .* leader {leader_id} ", screen, re.M) is not None


def row(screen: str, first: str) -> list[str]:
    for line in screen.splitlines():
        cells = line.split()
        if cells and cells[0] == first:
            return cells
    return []


def test_top_shows_the_cluster_live_and_follows_a_failover(make_cluster, tmp_path):
    require_tmux()
    cluster = make_cluster()
    leader = cluster.leader()
    argv = [sys.executable, "-m", "haqueue", "top", "--config", str(cluster.config_path), "--interval", "0.3"]
    with running_tmux(tmp_path / "tmux", argv) as term:
        term.wait_for(leader_line(leader.id), what=f"leader {leader.id} in the title")
        with RawConn(leader.address, leader.client_port) as conn:
            conn.send(b"use thumbnails\r\n" + b"put 0 0 60 1\r\nx\r\n" * 4)
            assert all(r.startswith((b"USING", b"INSERTED")) for r in conn.recv_replies(5))
        screen = term.wait_for(lambda s: row(s, "thumbnails")[1:2] == ["4"], what="thumbnails with 4 ready")
        assert row(screen, leader.id)[1:3] == ["leader", "yes"]
        for member in cluster.spec.nodes:
            if member.id != leader.id:
                assert row(screen, member.id)[1:3] == ["follower", "no"]

        cluster.kill_node(leader.id)  # SIGKILL by the PID this test started
        new_leader = cluster.leader(exclude=leader.id)
        screen = term.wait_for(leader_line(new_leader.id), timeout=30, what="new leader in the title")
        term.wait_for(lambda s: row(s, leader.id)[1:2] == ["unreachable"], what="killed node unreachable")
        assert row(term.screen(), "thumbnails")[1:2] == ["4"]
        # Redrawn in place: one title line on the screen, never a scrolling log.
        assert len(re.findall(r"^haqueue top ", term.screen(), re.M)) == 1

        term.send_keys("q")
        term.wait_for(lambda s: s == "(session ended)", what="top quits on q")


def leader_term(cluster) -> tuple[str, int] | None:
    """The serving leader's id and its term, as the leader itself reports them."""
    leader = cluster.leader()
    if leader is None:
        return None
    try:
        return leader.id, admin_client.status(leader.address, leader.admin_port, 1.0)["term"]
    except (OSError, ValueError):
        return None


@pytest.mark.parametrize("nodes", [3, 5])
def test_top_once_prints_one_frame_without_a_terminal(make_cluster, nodes):
    cluster = make_cluster(nodes=nodes)
    for _ in range(3):
        # A frame is a consistent picture only if no election ran while top asked the
        # nodes; on a loaded 2-CPU machine five freshly started nodes may hold one:
        # then the frame is taken again.
        before = leader_term(cluster)
        done = subprocess.run([sys.executable, "-m", "haqueue", "top", "--config", str(cluster.config_path)],
                              capture_output=True, text=True, timeout=30)
        if before is not None and leader_term(cluster) == before:
            break
    assert before is not None and leader_term(cluster) == before, "the leader kept changing"
    leader_id = before[0]
    assert done.returncode == 0, done.stderr
    assert f" leader {leader_id} " in done.stdout.splitlines()[0]
    assert "\x1b[" not in done.stdout  # no escape sequences into a pipe
    assert row(done.stdout, "default")[1:2] == ["0"]
    roles = {m.id: row(done.stdout, m.id)[1:3] for m in cluster.spec.nodes}
    assert len(roles) == nodes
    assert roles == {m.id: ["leader", "yes"] if m.id == leader_id else ["follower", "no"] for m in cluster.spec.nodes}


def test_top_says_in_one_line_when_no_node_answers(make_cluster):
    cluster = make_cluster(start=False)
    done = subprocess.run([sys.executable, "-m", "haqueue", "top", "--once", "--config",
                           str(cluster.config_path)], capture_output=True, text=True, timeout=30)
    assert done.returncode == 1
    assert "no node of the cluster answers /cluster" in done.stdout
    assert "Traceback" not in done.stderr
