"""The status page at / on the admin port, rendered by headless Chromium (Debian's package):
the leader and the tube counts are right, and the open page follows a failover
(haqueue/server/status_page.py, tests/support/browser.py)."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from tests.support.browser import require_chromium, running_chromium
from tests.support.servers import RawConn, free_port, start_haqueue

DOCS_SCREENSHOT = Path(__file__).resolve().parents[2] / "docs" / "status-page.png"
LEADER = "document.getElementById('leader').dataset.leader"


def cell(selector: str, column: str) -> str:
    return f"(document.querySelector('{selector} td.{column}') || {{}}).textContent"


def fill_tubes(leader) -> None:
    with RawConn(leader.address, leader.client_port) as conn:
        conn.send(b"use emails\r\n" + b"put 0 0 60 5\r\nhello\r\n" * 3
                  + b"use reports\r\n" + b"put 0 0 60 5\r\nhello\r\n" * 2 + b"put 0 3600 60 1\r\nx\r\n")
        replies = conn.recv_replies(8)
        assert [r.split()[0] for r in replies] == [b"USING"] + [b"INSERTED"] * 3 + [b"USING"] + [b"INSERTED"] * 3


@pytest.mark.parametrize("nodes", [3, 5])
def test_status_page_shows_the_leader_and_tubes_and_follows_a_failover(make_cluster, tmp_path, nodes):
    require_chromium()
    cluster = make_cluster(nodes=nodes)
    leader = cluster.leader()
    fill_tubes(leader)
    # Open the page on a follower, so the page's own node survives the failover.
    viewer = next(m for m in cluster.spec.nodes if m.id != leader.id)
    url = f"http://{viewer.address}:{viewer.admin_port}/"
    with running_chromium(url, tmp_path / "chromium") as page:
        page.wait_for(LEADER, lambda v: v == leader.id, what="leader shown")
        page.wait_for(cell("tr[data-tube=emails]", "ready"), lambda v: v == "3", what="emails ready")
        assert page.evaluate(cell("tr[data-tube=reports]", "ready")) == "2"
        assert page.evaluate(cell("tr[data-tube=reports]", "delayed")) == "1"
        roles = page.evaluate("Object.fromEntries([...document.querySelectorAll('#nodes tbody tr')]"
                              ".map(r => [r.dataset.node, r.dataset.role]))")
        assert roles == {m.id: "leader" if m.id == leader.id else "follower" for m in cluster.spec.nodes}
        assert len(roles) == nodes
        # Sparklines are inline SVG: nothing is loaded from anywhere but the node.
        assert page.evaluate("document.querySelectorAll('#tubes svg polyline').length") >= 4
        assert page.evaluate("[...document.querySelectorAll('script[src],link[href],img[src]')].length") == 0
        # Live: puts made while the page is open show up without a reload,
        # and give the sparklines a history (paced over a few of its polls).
        with RawConn(leader.address, leader.client_port) as conn:
            conn.send(b"use emails\r\n")
            conn.recv_reply()
            for _ in range(5):
                conn.send(b"put 0 0 60 5\r\nhello\r\n")
                assert conn.recv_reply().startswith(b"INSERTED")
                time.sleep(0.4)  # pacing the load across the page's one-second polls
        page.wait_for(cell("tr[data-tube=emails]", "ready"), lambda v: v == "8", what="new puts shown")
        assert page.evaluate("document.querySelector('tr[data-tube=emails] svg.ready polyline')"
                             ".getAttribute('points').split(' ').length") >= 2
        shot = page.screenshot()
        assert shot.startswith(b"\x89PNG") and len(shot) > 10_000
        (tmp_path / "status-page.png").write_bytes(shot)
        if os.environ.get("HAQUEUE_SAVE_SCREENSHOTS") and nodes == 3:  # the docs show three
            shutil.copyfile(tmp_path / "status-page.png", DOCS_SCREENSHOT)

        updates = page.evaluate("Number(document.body.dataset.updates)")
        cluster.kill_node(leader.id)  # SIGKILL by the PID this test started
        new_leader = cluster.leader(exclude=leader.id)
        assert new_leader is not None
        page.wait_for(LEADER, lambda v: v == new_leader.id, what="new leader shown", timeout=30)
        page.wait_for(f"document.querySelector('tr[data-node={leader.id}]').dataset.role",
                      lambda v: v == "unreachable", what="killed node shown unreachable")
        # The same page load, updated in place; the replicated tubes survived.
        assert page.evaluate("Number(document.body.dataset.updates)") > updates
        assert page.evaluate(cell("tr[data-tube=emails]", "ready")) == "8"


def test_with_an_admin_token_the_page_asks_for_it_once_and_then_shows_the_node(tmp_path):
    require_chromium()
    admin = free_port()
    server = start_haqueue("--admin", f"127.0.0.1:{admin}", "--admin-token", "s3cret")
    try:
        with running_chromium(f"http://127.0.0.1:{admin}/", tmp_path / "chromium") as page:
            page.wait_for("document.getElementById('login').hidden", lambda v: v is False,
                          what="the token form shown after a 401")
            assert page.evaluate("document.body.dataset.updates") is None  # nothing shown without it
            page.evaluate("document.getElementById('token').value = 's3cret';"
                          "document.getElementById('login').requestSubmit(); true")
            page.wait_for("Number(document.body.dataset.updates || 0)", lambda v: v >= 1, what="view shown")
            assert page.evaluate("document.getElementById('login').hidden") is True
            assert page.evaluate("document.querySelectorAll('#nodes tbody tr').length") == 1
    finally:
        server.stop()
