"""Taking a backup on the serving leader: GET /backup on the admin port.

The rules:
- Only the leader that serves clients and holds its read lease answers (a
  follower, or a leader cut off from its majority, answers 503 naming the
  leader when it knows it): the state it copies is then the cluster's latest.
- The copy is taken on the event loop's thread, between two entries, so it is
  the state after exactly the last applied entry: on a leader every applied
  entry is committed (`index` in the header says which). A fork copies it
  for free, as the snapshot writer does (replication/snapshot.py
  write_in_child): the child, at the snapshot writer's niceness, turns the
  state into the backup file (backup/records.py, backup/fileformat.py) and
  writes it into a pipe, its length first; the node goes on serving and only
  copies the bytes from the pipe to the socket. Service pauses for the fork,
  as for a snapshot, and no longer.
- Times are taken relative to the leader's wall clock at the fork (never
  before the state's latest stamp).
- One backup at a time per node (a second answers 409). A client that goes
  away stops the child (SIGKILL); the child's failure before the first byte is
  a 500 with its reason.
- Each backup is an event: `backup_started` (index, term, who asked) and
  `backup_sent` (bytes) or `backup_failed` (why).
- The route is behind the admin token, like /status (admin.py).
"""

from __future__ import annotations

import asyncio
import os
import signal
import struct
import time

from haqueue import events
from haqueue.backup import fileformat, records
from haqueue.replication.replica import WRITER_NICENESS

ROUTE = "/backup"
CHUNK = 1 << 20  # bytes per read from the child's pipe
_LENGTH = struct.Struct(">Q")


class Refused(Exception):
    def __init__(self, code: int, message: str, headers: str = "") -> None:
        super().__init__(message)
        self.code = code
        self.headers = headers


def facts(node_server, taken_at: int) -> dict:
    """The header's facts about where and when the backup was taken."""
    from haqueue import __version__

    status = node_server.replica.status()
    options = node_server.options
    return {"taken_at_ms": taken_at, "index": status.get("applied_index") or 0, "term": status.get("term") or 0,
            "cluster": options.name, "node": options.node_id, "haqueue": __version__}


def _fork_writer(state, header_facts: dict, taken_at: int, write_fd: int) -> int:
    """Fork the child that writes `len(file)` then the file into `write_fd`; its pid."""
    pid = os.fork()
    if pid == 0:  # the child: no threads, no locks; write and leave
        code = 1
        try:
            os.closerange(3, write_fd)
            os.closerange(write_fd + 1, os.sysconf("SC_OPEN_MAX"))
            os.nice(WRITER_NICENESS)
            data = fileformat.encode(records.from_state(state, taken_at), header_facts)
            os.set_blocking(write_fd, True)
            view = memoryview(_LENGTH.pack(len(data)) + data)
            while view:
                view = view[os.write(write_fd, view[:CHUNK]):]
            code = 0
        except BaseException:
            pass
        finally:
            os._exit(code)
    return pid


class BackupRoute:
    """GET /backup on one node: at most one at a time."""

    def __init__(self, node_server) -> None:
        self.server = node_server
        self.running = False

    def refusal(self, leader_admin: str | None) -> Refused | None:
        server = self.server
        replica = server.replica
        if replica is None or not server.serving or not replica.is_leader() or not replica.read_lease_valid():
            where = f"Location: {leader_admin.rstrip('/')}{ROUTE}\r\n" if leader_admin else ""
            return Refused(503, "not the serving leader: take the backup on the leader\n", where)
        if self.running:
            return Refused(409, "a backup is being taken on this node already\n")
        return None

    async def send(self, writer: asyncio.StreamWriter, peer) -> None:
        """Fork the writer now and stream its file as the answer (refusal() said yes)."""
        from haqueue.server.batcher import wall_ms

        loop = asyncio.get_running_loop()
        server = self.server
        state = server.state
        taken_at = max(wall_ms(), state.now)
        header_facts = facts(server, taken_at)
        read_fd, write_fd = os.pipe2(os.O_CLOEXEC)
        self.running = True
        forked_at = time.perf_counter()
        try:
            pid = _fork_writer(state, header_facts, taken_at, write_fd)
            fork_ms = round((time.perf_counter() - forked_at) * 1000, 1)  # the service's pause
        except OSError as exc:
            os.close(read_fd)
            self.running = False
            events.record("backup_failed", "backup not taken: cannot fork the writer: %s", exc.strerror or exc,
                          reason=str(exc))
            raise Refused(500, f"cannot fork the backup writer: {exc.strerror or exc}\n") from None
        finally:
            os.close(write_fd)
        events.record("backup_started", "backup of entry %d (term %d) for %s (fork %.1f ms)", header_facts["index"],
                      header_facts["term"], _who(peer), fork_ms, index=header_facts["index"],
                      term=header_facts["term"], peer=_who(peer), fork_ms=fork_ms)
        reader = asyncio.StreamReader(limit=CHUNK)
        transport, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader),
                                                    os.fdopen(read_fd, "rb", buffering=0))
        sent, length = 0, -1
        try:
            try:
                length = _LENGTH.unpack(await reader.readexactly(_LENGTH.size))[0]
            except asyncio.IncompleteReadError:
                raise Refused(500, "the backup writer failed before writing\n") from None
            writer.write(f"HTTP/1.0 200 OK\r\nContent-Type: application/octet-stream\r\n"
                         f"Content-Length: {length}\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n"
                         .encode())
            while sent < length:
                chunk = await reader.read(min(CHUNK, length - sent))
                if not chunk:
                    raise ConnectionError(f"the backup writer stopped after {sent} of {length} bytes")
                writer.write(chunk)
                sent += len(chunk)
                await writer.drain()
            events.record("backup_sent", "backup of entry %d sent to %s: %d bytes", header_facts["index"],
                          _who(peer), length, index=header_facts["index"], bytes=length, peer=_who(peer))
        except BaseException as exc:
            reason = str(exc).strip() or type(exc).__name__
            events.record("backup_failed", "backup of entry %d not sent to %s: %s", header_facts["index"],
                          _who(peer), reason, reason=reason, bytes_sent=sent)
            raise
        finally:
            transport.close()
            _reap(pid, loop, finished=sent == length and sent > 0)
            self.running = False


def _reap(pid: int, loop: asyncio.AbstractEventLoop, finished: bool) -> None:
    """The child has written everything, or must stop (killed): reap it once it has
    exited, without waiting on the loop (a child of a big state takes milliseconds to
    tear its copy of the address space down)."""
    try:
        if not finished:
            os.kill(pid, signal.SIGKILL)
        if os.waitpid(pid, os.WNOHANG)[0]:
            return
        pidfd = os.pidfd_open(pid)
    except (ChildProcessError, ProcessLookupError):
        return

    def exited() -> None:
        loop.remove_reader(pidfd)
        os.close(pidfd)
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass

    loop.add_reader(pidfd, exited)


def _who(peer) -> str:
    return f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) and len(peer) >= 2 else str(peer)


async def answer(admin, writer: asyncio.StreamWriter, method: str, authorized: bool) -> None:
    """admin.py hands GET /backup here: the token, then a refusal or the file."""
    route = admin.__dict__.get("backup_route")
    if route is None:
        route = admin.backup_route = BackupRoute(admin.server)
    try:
        if not authorized:
            raise Refused(401, "token required\n")
        if method != "GET":
            raise Refused(405, "method not allowed\n")
        refused = route.refusal(admin._leader_admin())
        if refused is not None:
            raise refused
        await route.send(writer, writer.get_extra_info("peername"))
    except Refused as refused:
        from haqueue.server.admin import REASONS

        body = str(refused).encode()
        writer.write(f"HTTP/1.0 {refused.code} {REASONS[refused.code]}\r\nContent-Type: text/plain\r\n"
                     f"Content-Length: {len(body)}\r\n{refused.headers}Connection: close\r\n\r\n".encode() + body)
        await writer.drain()
