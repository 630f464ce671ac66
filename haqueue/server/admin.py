"""The per-node HTTP admin endpoint, for load balancers, keepalived and monitoring.

GET /        the status page (status_page.py): the cluster in a browser, live
GET /cluster JSON: the cluster as this node sees it, for the page and `haqueue top`
GET /health  200 while the node runs (any role)
GET /leader  200 only on the leader that is serving clients, else 503 — the
             same answer as `haqueue node is-leader` (docs/design.md I3), so
             keepalived and LVS route to the leader alone
GET /status  JSON: role, term, commit/applied index, serving, connections;
             with ?digest=1 also the replicated state's digest (docs/design.md I2)
GET /metrics the Prometheus text format (metrics.py): every node, followers too
GET /id/RULE/APP[?salt=S&seq=Q]  the id service (server/ids/http.py), the UDP
             reply's JSON body: 200 with an id; 503 not leader or outcome
             unknown (retry), with Retry-After: 1 and, on a follower that
             knows the leader, Location: the same path on the leader's
             admin port; 404 unknown rule, 409 exhausted or too many
             apps, 507 below the disk reserve, 400 bad input. GET /id/RULE/APP/monitor: the counter
GET /gc      JSON: the cycle collector (gc_policy.py): freezes, the longest
             pause, objects frozen; with ?collect=1 also the unreachable
             objects found among them by a full pass, which stops the node
             for as long as the pass takes (~0.4 s per million jobs): ask a
             follower
GET /backup  the serving leader's committed state as a backup file (haqueue/server/backup.py),
             behind the token; 503 elsewhere
GET /session, GET /tube/NAME, GET /job/ID, POST /op
             the status page's operations (operate.py): a CSRF token for this
             browser session, a tube's or a job's view with safe body
             previews, and one change (put, kick, kick-job, delete, pause,
             resume) made on the leader as a client's command is, carrying the
             CSRF token; behind the token like /cluster
POST /membership  cluster add-node / remove-node, on the leader (membership_http.py)
Anything else is 404; POST anywhere but /op and /membership, or any other method, is 405.
HTTP/1.0, one request per connection, tiny on purpose.

With a token (`--admin-token`, or the cluster file's cluster.admin_token),
/status, /cluster, /metrics and /gc answer 401 unless the request carries
`Authorization: Bearer TOKEN`: they show the cluster's shape, its tubes and
its state, and /gc?collect=1 can stall the node. The nodes send the token to
each other for /cluster's view, `haqueue top` and `cluster status` send the
cluster file's, `gen-prometheus` writes it into the scrape job, and the page
at / (static, no data of its own) asks for it once when /cluster says 401.
/health and /leader stay open, since keepalived's and the load balancers'
checks ask them and they say nothing more than "up" and "leader"; /id stays
open like the UDP port it mirrors (docs/id-service.md).
"""

from __future__ import annotations

import asyncio
import gc
import hmac
import json
import logging
from urllib.parse import unquote

from haqueue.server.gc_policy import cut_transport_cycle, frozen_garbage

log = logging.getLogger(__name__)

PROTECTED = ("/status", "/cluster", "/metrics", "/gc")
OPERATION_ROUTES = ("/session", "/tube/", "/job/")  # GET, behind the token (operate.py)
REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found",
           405: "Method Not Allowed", 409: "Conflict", 411: "Length Required", 413: "Payload Too Large",
           500: "Internal Server Error", 503: "Service Unavailable", 507: "Insufficient Storage"}


class AdminServer:
    def __init__(self, server, host: str, port: int, token: str | None = None) -> None:
        self.server = server
        self.host = host
        self.port = port
        self.token = token
        self._listener: asyncio.AbstractServer | None = None
        self._metrics = None  # made on the first scrape: prometheus-client loads only if asked
        self._sessions = None  # operate.Sessions, made when the page first asks for one

    async def start(self) -> None:
        self._listener = await asyncio.start_server(
            self._handle, self.host, self.port, reuse_address=True
        )

    async def stop(self) -> None:
        if self._listener is not None:
            self._listener.close()
            await self._listener.wait_closed()

    def authorized(self, head: bytes) -> bool:
        if self.token is None:
            return True
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"authorization":
                scheme, _, given = value.strip().partition(b" ")
                return scheme.lower() == b"bearer" and hmac.compare_digest(
                    given.strip(), self.token.encode())
        return False

    def answer(self, path: str) -> tuple[int, str, bytes | list[bytes]]:
        """(status, content type, body); a long body may come as a list of chunks."""
        node_server = self.server
        route, _, query = path.partition("?")
        if route == "/":
            from haqueue.server.status_page import page

            return 200, "text/html; charset=utf-8", page()
        if route == "/health":
            return 200, "text/plain", b"ok\n"
        if route == "/leader":
            if node_server.leads_and_is_followed():
                return 200, "text/plain", b"leader\n"
            return 503, "text/plain", b"not leader\n"
        if route == "/status":
            status = node_server.status()
            if "digest=1" in query.split("&") and node_server.replica is not None:
                status["digest"] = node_server.state.digest()
                status["jobs"] = len(node_server.state.jobs)
            return 200, "application/json", json.dumps(status, sort_keys=True).encode() + b"\n"
        if route == "/metrics":
            if self._metrics is None:
                from haqueue.server.metrics import Metrics

                self._metrics = Metrics(node_server)
            from haqueue.server.metrics import CONTENT_TYPE

            return 200, CONTENT_TYPE, self._metrics.exposition()
        if route == "/gc" and node_server.collector is not None:
            collector = node_server.collector
            report = {"freezes": collector.freezes, "longest_pause_ms": round(collector.longest_pause_ms, 3),
                      "frozen_objects": gc.get_freeze_count(), "thresholds": list(gc.get_threshold())}
            if "collect=1" in query.split("&"):
                report["frozen_garbage"] = frozen_garbage()
            return 200, "application/json", json.dumps(report, sort_keys=True).encode() + b"\n"
        return 404, "text/plain", b"not found\n"

    async def answer_async(self, path: str, authorized: bool = True) -> tuple[int, str, bytes | list[bytes]]:
        """`answer`, and the routes that wait for other nodes (/cluster) or a commit (/id).
        The one way in, so the token is checked here, for every protected route."""
        route = path.partition("?")[0]
        if route in PROTECTED and not authorized:
            return 401, "text/plain", b"token required\n"
        if path.startswith("/id/"):
            return await self._id(path)
        if route == "/cluster" and self.server.replica is not None:
            from haqueue.server.status_page import cluster_view

            view = await cluster_view(self.server)
            return 200, "application/json", json.dumps(view, sort_keys=True).encode() + b"\n"
        return self.answer(path)

    async def _id(self, path: str) -> tuple[int, str, bytes]:
        from haqueue.server.ids.http import answer  # here: a node that serves no ids never loads them

        server = self.server
        return await answer(path, server.options.data_dir is not None, lambda: server.id_requests)

    def _leader_admin(self) -> str | None:
        """http://ADDRESS:ADMIN_PORT/ of the leader this node knows (not itself), or None."""
        where = self._leader_admin_address()
        return f"http://{where}/" if where else None

    def _leader_admin_address(self) -> str | None:
        """ADDRESS:ADMIN_PORT of the leader this node knows (not itself): named by the
        cluster file, or by the entry that added it (roster.py), else None."""
        from haqueue.roster import FileNode, directory

        replica = self.server.replica
        status = replica.status() if replica is not None else {}
        leader = status.get("leader")
        if leader is None or leader == self.server.options.raft_address:
            return None
        known = directory([FileNode(*m) for m in self.server.options.members], status.get("member_info") or {})
        entry = known.get(leader)
        if entry is None or not entry.admin_port:
            return None
        return f"{entry.host}:{entry.admin_port}"

    def _operation_sessions(self):
        if self._sessions is None:
            from haqueue.server.operate import Sessions

            self._sessions = Sessions()
        return self._sessions

    async def operation(self, method: str, path: str, headers: dict, body: bytes, peer,
                        authorized: bool) -> tuple[int, str, bytes, str]:
        """The status page's operations (operate.py): (status, type, body, extra headers)."""
        from haqueue.server import operate

        route = path.partition("?")[0]
        extra = ""
        try:
            if not authorized:
                raise operate.Answer(401, "token required")
            sessions = self._operation_sessions()
            session_id = operate.cookie_value(headers.get("cookie"))
            if method == "POST":
                request = operate.parse_request(body)
                if not sessions.valid(session_id, request.get("csrf")):
                    raise operate.Answer(403, "CSRF token missing or wrong: reload the page")
                answer = await operate.perform(self.server, peer, request, self._leader_admin())
            elif route == "/session":
                if session_id is None:
                    session_id = sessions.new_id()
                    extra = f"Set-Cookie: {operate.COOKIE}={session_id}; Path=/; HttpOnly; SameSite=Strict\r\n"
                answer = {"csrf": sessions.csrf(session_id)}
            elif route.startswith("/tube/"):
                answer = operate.tube_view(self.server, unquote(route[len("/tube/"):]))
            else:
                text = route[len("/job/"):]
                if not text.isdigit() or not 0 < int(text) < 2**64:
                    raise operate.Answer(400, f"{text!r} is not a job id")
                answer = operate.job_view(self.server, int(text))
            code = 200
        except operate.Answer as refused:
            code, answer = refused.status, refused.body
        return code, "application/json", json.dumps(answer, sort_keys=True).encode() + b"\n", \
            extra + "Cache-Control: no-store\r\n"

    def _retry_headers(self, path: str) -> str:
        """An /id request this node cannot answer now: try again in a second,
        at the leader if this node knows which one it is (not itself)."""
        headers = "Retry-After: 1\r\n"
        where = self._leader_admin_address()
        if where:
            headers += f"Location: http://{where}{path}\r\n"
        return headers

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=2)
            request_line = head.split(b"\r\n", 1)[0].decode("latin-1")
            parts = request_line.split()
            extra = ""
            method = parts[0] if parts else ""
            route = parts[1].partition("?")[0] if len(parts) >= 2 else ""
            if len(parts) < 2 or method not in ("GET", "HEAD", "POST") or (
                    (method == "POST") != (route in ("/op", "/membership"))):
                code, kind, body = 405, "text/plain", b"method not allowed\n"
            elif route == "/backup":  # streamed from a forked writer (haqueue/server/backup.py)
                from haqueue.server.backup import answer as backup

                await backup(self, writer, method, self.authorized(head))
                return
            elif method == "POST" or route.startswith(OPERATION_ROUTES):
                headers = _headers(head)
                data = b""
                if method == "POST":
                    length = headers.get("content-length", "")
                    limit = 6 * self.server.max_job_size + (64 << 10)  # a body JSON-escaped, and the rest
                    if not length.isdigit():
                        raise _Early(411, b"Content-Length required\n")
                    if int(length) > limit:
                        raise _Early(413, b"request too large\n")
                    data = await asyncio.wait_for(reader.readexactly(int(length)), timeout=5)
                if route == "/membership":  # cluster add-node / remove-node (membership_http.py)
                    from haqueue.server import membership_http

                    code, kind, body = await membership_http.handle(self.server, headers, data, self.authorized(head))
                else:
                    code, kind, body, extra = await self.operation(
                        method, parts[1], headers, data, writer.get_extra_info("peername"), self.authorized(head))
            else:
                code, kind, body = await self.answer_async(parts[1], self.authorized(head))
            if code == 503 and parts[1].startswith("/id/"):
                extra = self._retry_headers(parts[1])
            reason = REASONS[code]
            chunks = body if isinstance(body, list) else [body]
            length = sum(len(chunk) for chunk in chunks)
            head = (f"HTTP/1.0 {code} {reason}\r\nContent-Type: {kind}\r\nContent-Length: {length}\r\n"
                    f"{extra}Connection: close\r\n\r\n").encode()
            writer.writelines([head, *chunks] if method != "HEAD" else [head])
            await writer.drain()
        except _Early as early:
            writer.write(f"HTTP/1.0 {early.code} {REASONS[early.code]}\r\nContent-Type: text/plain\r\n"
                         f"Content-Length: {len(early.body)}\r\nConnection: close\r\n\r\n".encode() + early.body)
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, asyncio.TimeoutError,
                ConnectionError, UnicodeDecodeError):
            pass
        finally:
            writer.close()
            cut_transport_cycle(writer.transport)


class _Early(Exception):
    """A request refused before its body is read (no length, too large)."""

    def __init__(self, code: int, body: bytes) -> None:
        super().__init__(code)
        self.code = code
        self.body = body


def _headers(head: bytes) -> dict[str, str]:
    """The request's headers, names lower-cased (the last of a repeated one wins)."""
    headers = {}
    for line in head.decode("latin-1").split("\r\n")[1:]:
        name, sep, value = line.partition(":")
        if sep:
            headers[name.strip().lower()] = value.strip()
    return headers
