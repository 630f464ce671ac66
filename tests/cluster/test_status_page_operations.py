"""The status page's operations in headless Chromium on a real three-node cluster
(haqueue/server/operate.py, status_page.py): peek a buried job, kick it, delete another,
pause and resume a tube, put a job whose body is HTML and script; each change checked
through the beanstalkd protocol. Without the admin token every operation is refused,
and a POST without the session's CSRF token is refused."""

from __future__ import annotations

import json
import os
from pathlib import Path

from haqueue import admin_client
from tests.cluster.clients import client_for, job_stats
from tests.support.browser import require_chromium, running_chromium
from tests.support.servers import RawConn

DOCS_SCREENSHOT = Path(__file__).resolve().parents[2] / "docs" / "status-page-operations.png"
TOKEN = "s3cret"
HOSTILE = '<img src=x onerror="window.pwned=1"><script>window.pwned=2</script>&amp; </pre>'
OPS = [{"op": "put", "tube": "work", "body": "x"}, {"op": "kick", "tube": "work", "count": 5},
       {"op": "kick-job", "job": 1}, {"op": "delete", "job": 2}, {"op": "pause", "tube": "work", "seconds": 60},
       {"op": "resume", "tube": "work"}]


def await_js(page, expression: str):
    """Evaluate an expression that yields a promise, and its value."""
    result = page.call("Runtime.evaluate", expression=expression, awaitPromise=True, returnByValue=True)
    if "exceptionDetails" in result:
        raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
    return result["result"].get("value")


def operate(page, request: dict) -> str:
    """Run one operation through the page's own code; the HTTP status it showed."""
    done = page.evaluate("Number(document.getElementById('op-result').dataset.done || 0)")
    await_js(page, f"operate({json.dumps(request)})")
    page.wait_for("Number(document.getElementById('op-result').dataset.done || 0)", lambda v: v > done,
                  what=f"{request['op']} answered")
    return page.evaluate("document.getElementById('op-result').dataset.status")


def tube_counts(client, tube: str) -> tuple:
    stats = client.stats_tube(tube)
    return (stats["current-jobs-ready"], stats["current-jobs-buried"], stats["current-jobs-delayed"],
            stats["pause"], stats["total-jobs"])


def test_page_operations_change_the_queue_and_refuse_without_token_or_csrf(make_cluster, tmp_path):
    require_chromium()
    cluster = make_cluster(["-f0", "--admin-token", TOKEN])
    leader = cluster.leader()
    with RawConn(leader.address, leader.client_port) as conn:
        conn.send(b"use work\r\nwatch work\r\nignore default\r\n"
                  b"put 5 0 60 6\r\npoison\r\nput 5 0 60 6\r\nsecond\r\nput 9 0 60 5\r\nthird\r\n"
                  b"reserve-with-timeout 0\r\n")
        replies = conn.recv_replies(7)
        poison, second, third = (int(r.split()[1]) for r in replies[3:6])
        assert replies[6].startswith(f"RESERVED {poison} ".encode())
        conn.send(f"bury {poison} 5\r\n".encode())
        assert conn.recv_reply() == b"BURIED\r\n"

    url = f"http://{leader.address}:{leader.admin_port}/"
    with running_chromium(url, tmp_path / "chromium") as page, client_for(cluster, leader.id) as client:
        page.wait_for("document.getElementById('login').hidden", lambda v: v is False, what="token asked for")
        before = tube_counts(client, "work")
        # Without the token every operation is refused, and nothing changes.
        post = ("fetch('/op', {method: 'POST', headers: %s, body: JSON.stringify(%s)}).then(r => r.status)")
        for request in OPS:
            assert operate(page, request) == "401", request  # the page asks, and is told no
            assert await_js(page, post % ("{}", json.dumps(request))) == 401, request
        assert await_js(page, "fetch('/tube/work').then(r => r.status)") == 401
        assert await_js(page, f"fetch('/job/{poison}').then(r => r.status)") == 401
        assert tube_counts(client, "work") == before

        page.evaluate(f"document.getElementById('token').value = '{TOKEN}';"
                      "document.getElementById('login').requestSubmit(); true")
        page.wait_for("Number(document.body.dataset.updates || 0)", lambda v: v >= 1, what="view shown")

        # A forged POST, with the token but without this session's CSRF token, is refused.
        bearer = json.dumps({"Authorization": f"Bearer {TOKEN}"})
        assert await_js(page, post % (bearer, json.dumps({"op": "delete", "job": second}))) == 403
        assert await_js(page, post % (bearer, json.dumps({"op": "delete", "job": second, "csrf": "0" * 64}))) == 403
        # ... and this session's CSRF token without the admin token is refused too.
        csrf = await_js(page, f"fetch('/session', {{headers: {bearer}}}).then(r => r.json()).then(j => j.csrf)")
        assert len(csrf) == 64
        assert await_js(page, post % ("{}", json.dumps({"op": "delete", "job": second, "csrf": csrf}))) == 401
        assert job_stats(client, second)["state"] == "ready"
        # GET never changes anything.
        assert await_js(page, f"fetch('/op?op=delete&job={second}').then(r => r.status)") == 405
        assert job_stats(client, second)["state"] == "ready"

        # Open the tube; peek the buried job.
        page.wait_for("!!document.querySelector('button.open-tube[data-tube=work]')", bool, what="work listed")
        page.evaluate("document.querySelector('button.open-tube[data-tube=work]').click(); true")
        buried = ".peek[data-kind=buried]"
        page.wait_for(f"document.querySelector('{buried}').dataset.job", lambda v: v == str(poison),
                      what="the buried job peeked")
        assert page.evaluate(f"document.querySelector('{buried} pre.body').textContent") == "poison"
        assert page.evaluate("document.querySelector('.peek[data-kind=ready]').dataset.job") == str(second)
        # Only a buried or delayed job offers a kick.
        assert page.evaluate("document.querySelectorAll('.peek[data-kind=ready] button.kick-job').length") == 0
        if os.environ.get("HAQUEUE_SAVE_SCREENSHOTS"):
            page.evaluate("document.getElementById('op-result').textContent = ''; true")
            DOCS_SCREENSHOT.write_bytes(page.screenshot())

        # Kick it.
        page.evaluate(f"document.querySelector('{buried} button.kick-job').click(); true")
        page.wait_for("document.getElementById('op-result').dataset.status", lambda v: v == "200", what="kicked")
        assert job_stats(client, poison)["state"] == "ready"
        page.wait_for(f"document.querySelector('{buried}').dataset.job", lambda v: v == "", what="none buried")

        # Delete another, looked up by id.
        page.evaluate(f"document.getElementById('job-id').value = '{third}';"
                      "document.getElementById('job-form').requestSubmit(); true")
        page.wait_for("document.getElementById('job-view').dataset.job", lambda v: v == str(third), what="job shown")
        page.evaluate("window.confirm = () => true;"
                      "document.querySelector('#job-view button.delete-job').click(); true")
        page.wait_for("document.getElementById('op-result').textContent", lambda v: v == "delete: DELETED",
                      what="deleted")
        assert job_stats(client, third) is None

        # Pause and resume the tube.
        page.evaluate("document.getElementById('pause-seconds').value = '600';"
                      "document.getElementById('pause-form').requestSubmit(); true")
        page.wait_for("document.getElementById('op-result').textContent", lambda v: v == "pause: PAUSED",
                      what="paused")
        stats = client.stats_tube("work")
        assert stats["pause"] == 600 and stats["pause-time-left"] > 590
        page.wait_for("document.getElementById('ops').dataset.paused", lambda v: v == "true", what="shown paused")
        page.evaluate("document.getElementById('op-result').textContent = '';"
                      "document.getElementById('resume').click(); true")
        page.wait_for("document.getElementById('op-result').textContent", lambda v: v == "resume: PAUSED",
                      what="resumed")
        assert client.stats_tube("work")["pause-time-left"] == 0
        page.wait_for("document.getElementById('ops').dataset.paused", lambda v: v == "false", what="shown resumed")

        # A body of HTML and script, put from the page, is shown as text and never runs.
        page.evaluate(f"document.getElementById('put-body').value = {json.dumps(HOSTILE)};"
                      "document.getElementById('put-form').requestSubmit(); true")
        page.wait_for("document.getElementById('op-result').textContent", lambda v: v.startswith("put: INSERTED"),
                      what="put")
        hostile = int(page.evaluate("document.getElementById('op-result').textContent").split()[-1])
        assert client.peek(hostile).body == HOSTILE.encode()
        page.evaluate(f"document.getElementById('job-id').value = '{hostile}';"
                      "document.getElementById('job-form').requestSubmit(); true")
        page.wait_for("document.getElementById('job-view').dataset.job", lambda v: v == str(hostile), what="shown")
        assert page.evaluate("document.querySelector('#job-view pre.body').textContent") == HOSTILE
        assert page.evaluate("document.querySelectorAll('#job-view img, #job-view script').length") == 0
        assert page.evaluate("document.querySelectorAll('img').length") == 0
        assert page.evaluate("window.pwned === undefined") is True

    # Each change is an event on the leader naming the page, the operation and the job.
    status = admin_client.status(leader.address, leader.admin_port, timeout=2, token=TOKEN)
    said = [e["msg"] for e in status["events"] if e.get("event") == "operator"]
    for expected in (f"kick-job job {poison}: KICKED", f"delete job {third}: DELETED",
                     "pause-tube tube work: PAUSED", f"put job {hostile} tube work: INSERTED {hostile}"):
        assert any(m.startswith("status-page at 127.") and m.endswith(expected) for m in said), (expected, said)


def test_a_change_asked_of_a_follower_s_page_is_refused_and_names_the_leader(make_cluster, tmp_path):
    require_chromium()
    cluster = make_cluster()
    leader = cluster.leader()
    follower = next(m for m in cluster.spec.nodes if m.id != leader.id)
    with RawConn(leader.address, leader.client_port) as conn:
        conn.send(b"use work\r\nput 0 0 60 1\r\nx\r\n")
        job_id = int(conn.recv_replies(2)[1].split()[1])
    with running_chromium(f"http://{follower.address}:{follower.admin_port}/", tmp_path / "chromium") as page:
        page.wait_for("Number(document.body.dataset.updates || 0)", lambda v: v >= 1, what="view shown")
        assert operate(page, {"op": "delete", "job": job_id}) == "503"
        shown = page.evaluate("document.getElementById('op-result').textContent")
        assert shown == (f"this node is not the leader: changes are made on the leader's page "
                         f"(http://{leader.address}:{leader.admin_port}/)")
        # Reads work on any node: the follower shows the job from its replicated state.
        page.evaluate(f"document.getElementById('job-id').value = '{job_id}';"
                      "document.getElementById('job-form').requestSubmit(); true")
        page.wait_for("document.getElementById('job-view').dataset.job", lambda v: v == str(job_id), what="shown")
    with client_for(cluster, leader.id) as client:
        assert job_stats(client, job_id)["state"] == "ready"
