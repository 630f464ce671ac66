"""The status page's operation routes over HTTP on a real node (haqueue/server/operate.py,
admin.py): the token and the session's CSRF token guard every change, GET changes nothing,
bad requests get a clear refusal, and a change answers with the server's own reply."""

from __future__ import annotations

import http.client
import json

import pytest

from tests.support.servers import RawConn, free_port, start_haqueue

TOKEN = "s3cret"


@pytest.fixture(scope="module")
def node():
    admin = free_port()
    server = start_haqueue("--admin", f"127.0.0.1:{admin}", "--admin-token", TOKEN, "-z", "1000")
    server.admin = admin
    try:
        yield server
    finally:
        server.stop()


def request(node, method: str, path: str, body: bytes | None = None, headers: dict | None = None):
    conn = http.client.HTTPConnection("127.0.0.1", node.admin, timeout=5)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        answer = conn.getresponse()
        return answer.status, dict(answer.getheaders()), answer.read()
    finally:
        conn.close()


def session(node) -> tuple[str, str]:
    """(cookie header, csrf token) of a new page session."""
    status, headers, body = request(node, "GET", "/session", headers={"Authorization": f"Bearer {TOKEN}"})
    assert status == 200
    cookie = headers["Set-Cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
    return cookie.split(";")[0], json.loads(body)["csrf"]


def post(node, payload: dict, cookie: str | None = None, token: str | None = TOKEN) -> tuple[int, dict]:
    headers = {"Content-Type": "application/json"}
    if cookie:
        headers["Cookie"] = cookie
    if token:
        headers["Authorization"] = f"Bearer {token}"
    status, _, body = request(node, "POST", "/op", json.dumps(payload).encode(), headers)
    return status, json.loads(body)


def put_raw(node, tube: str, body: bytes) -> int:
    with RawConn(node.host, node.port) as conn:
        conn.send(b"use %s\r\nput 0 0 60 %d\r\n%s\r\n" % (tube.encode(), len(body), body))
        return int(conn.recv_replies(2)[1].split()[1])


def peek(node, job_id: int) -> bytes:
    with RawConn(node.host, node.port) as conn:
        conn.send(b"peek %d\r\n" % job_id)
        return conn.recv_reply()


def test_every_change_without_the_admin_token_is_refused_and_changes_nothing(node):
    job_id = put_raw(node, "guarded", b"keep me")
    cookie, csrf = session(node)
    for payload in ({"op": "delete", "job": job_id}, {"op": "kick-job", "job": job_id},
                    {"op": "put", "tube": "guarded", "body": "x"}, {"op": "kick", "tube": "guarded", "count": 1},
                    {"op": "pause", "tube": "guarded", "seconds": 60}, {"op": "resume", "tube": "guarded"}):
        assert post(node, {**payload, "csrf": csrf}, cookie, token=None) == (401, {"ok": False, "error": "token required"})
        assert post(node, {**payload, "csrf": csrf}, cookie, token="wrong")[0] == 401
    assert peek(node, job_id).startswith(b"FOUND")
    with RawConn(node.host, node.port) as conn:
        conn.send(b"stats-tube guarded\r\n")
        stats = conn.recv_reply()
    assert b"total-jobs: 1\n" in stats and b"pause: 0\n" in stats
    for path in ("/session", "/tube/guarded", f"/job/{job_id}"):
        assert request(node, "GET", path)[0] == 401


def test_a_post_without_its_session_s_csrf_token_is_refused(node):
    job_id = put_raw(node, "csrf", b"keep me")
    cookie, csrf = session(node)
    other_cookie, _ = session(node)
    forged = {"op": "delete", "job": job_id}
    assert post(node, forged, cookie)[0] == 403  # no token
    assert post(node, {**forged, "csrf": csrf})[0] == 403  # no session cookie
    assert post(node, {**forged, "csrf": csrf}, other_cookie)[0] == 403  # another session's
    assert post(node, {**forged, "csrf": csrf.upper()}, cookie)[0] == 403
    assert peek(node, job_id).startswith(b"FOUND")
    assert post(node, {**forged, "csrf": csrf}, cookie) == \
        (200, {"ok": True, "op": "delete", "job": job_id, "reply": "DELETED"})
    assert peek(node, job_id) == b"NOT_FOUND\r\n"


def test_get_never_changes_anything_and_other_methods_are_refused(node):
    job_id = put_raw(node, "gets", b"keep me")
    auth = {"Authorization": f"Bearer {TOKEN}"}
    assert request(node, "GET", f"/op?op=delete&job={job_id}", headers=auth)[0] == 405
    assert request(node, "POST", "/status", b"{}", auth)[0] == 405
    assert request(node, "DELETE", f"/job/{job_id}", headers=auth)[0] == 405
    assert request(node, "GET", f"/job/{job_id}", headers=auth)[0] == 200
    assert peek(node, job_id).startswith(b"FOUND")


def test_malformed_changes_get_a_clear_refusal(node):
    cookie, csrf = session(node)
    auth = {"Authorization": f"Bearer {TOKEN}", "Cookie": cookie}
    assert request(node, "POST", "/op", b"not json", {**auth})[0:1] == (400,)
    assert post(node, {"op": "explode", "csrf": csrf}, cookie)[1]["error"].startswith("unknown operation 'explode'")
    assert post(node, {"op": "put", "tube": "bad name", "body": "x", "csrf": csrf}, cookie) == \
        (400, {"ok": False, "error": "put: 'tube' must be a tube name"})
    assert post(node, {"op": "kick", "tube": "t", "count": -1, "csrf": csrf}, cookie)[0] == 400
    assert post(node, {"op": "delete", "job": 0, "csrf": csrf}, cookie)[0] == 400
    # The server's own refusals: a job over -z, a job that is not there.
    status, answer = post(node, {"op": "put", "tube": "t", "body": "x" * 1001, "csrf": csrf}, cookie)
    assert (status, answer["reply"]) == (409, "JOB_TOO_BIG")
    status, answer = post(node, {"op": "delete", "job": 999_999, "csrf": csrf}, cookie)
    assert (status, answer["error"]) == (404, "delete: NOT_FOUND")
    # Too large to read, or no length: refused before the body is read.
    status, _, _ = request(node, "POST", "/op", b"x" * (6 * 1000 + (64 << 10) + 1), auth)
    assert status == 413


def test_tube_and_job_views_preview_bodies_safely(node):
    text_id = put_raw(node, "views", b"<script>alert(1)</script>")
    binary_id = put_raw(node, "views", bytes(range(256))[:200])
    long_id = put_raw(node, "views", b"y" * 900)
    auth = {"Authorization": f"Bearer {TOKEN}"}
    status, _, body = request(node, "GET", "/tube/views", headers=auth)
    view = json.loads(body)
    assert status == 200 and view["stats"]["current-jobs-ready"] == 3
    assert view["peek"]["ready"]["id"] == text_id and view["peek"]["buried"] is None
    assert view["peek"]["ready"]["preview"] == {"kind": "text", "text": "<script>alert(1)</script>",
                                                "truncated": False, "size": 25}
    binary = json.loads(request(node, "GET", f"/job/{binary_id}", headers=auth)[2])["preview"]
    assert (binary["kind"], binary["size"], binary["text"][:11]) == ("binary", 200, "00 01 02 03")
    shown = json.loads(request(node, "GET", f"/job/{long_id}", headers=auth)[2])
    assert shown["stats"]["state"] == "ready" and shown["preview"]["size"] == 900
    assert request(node, "GET", "/tube/no-such-tube", headers=auth)[0] == 404
    assert request(node, "GET", "/job/abc", headers=auth)[0] == 400
