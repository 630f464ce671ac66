"""`haqueue job` / `haqueue tube` with --address: the exit statuses scripts rely on, and
what a person sees of odd bodies (haqueue/cli/job.py, tube.py, haqueue/console/console.py).

A real haqueue node for the server's answers; for the connection breaking at a chosen
moment, a real socket peer that speaks a scripted beanstalkd conversation and then closes.
"""

from __future__ import annotations

import base64
import io
import json
import os
import signal
import socket
import sys
import threading

import pytest

from haqueue.cli.main import main
from tests.support.servers import RawConn, start_haqueue


@pytest.fixture(scope="module")
def node():
    server = start_haqueue("-z", "100")
    try:
        yield server
    finally:
        server.stop()


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_bodies_are_shown_safely_to_a_terminal_and_whole_to_a_script(node, capsys, monkeypatch):
    at = ("--address", f"{node.host}:{node.port}")
    code, out, _ = run(capsys, "job", "put", "--tube", "odd", "over\rwrite", *at)
    text_id = int(out)
    code, out, _ = run(capsys, "job", "put", "--tube", "odd", "--pri", "1", "clear\x1b[2J", *at)
    escape_id = int(out)
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"\x00\xff\x01")))
    code, out, _ = run(capsys, "job", "put", "--tube", "odd", "--pri", "2", "-", *at)
    binary_id = int(out)
    # A carriage return would let a body overwrite its own line: escaped.
    assert run(capsys, "job", "peek", "--tube", "odd", "ready", *at) == (0, f"id: {text_id}\nover\\rwrite\n", "")
    # An escape sequence never reaches the terminal: such a body is shown as hex.
    code, out, _ = run(capsys, "job", "show", str(escape_id), *at)
    assert out.endswith("body:\n(binary, 9 bytes) 63 6c 65 61 72 1b 5b 32 4a\n")
    code, out, _ = run(capsys, "job", "show", str(binary_id), *at)
    assert out.endswith("body:\n(binary, 3 bytes) 00 ff 01\n")
    code, out, _ = run(capsys, "job", "show", str(binary_id), "--json", *at)
    assert base64.b64decode(json.loads(out)["body_base64"]) == b"\x00\xff\x01"


def test_a_change_the_server_refuses_exits_3_naming_its_reply(node, capsys):
    at = ("--address", f"{node.host}:{node.port}")
    assert run(capsys, "job", "put", "x" * 101, *at) == \
        (3, "", "haqueue: put into tube default: the server answered JOB_TOO_BIG\n")
    with RawConn(node.host, node.port) as worker:
        worker.send(b"use held\r\nput 0 0 60 1\r\nh\r\nwatch held\r\nreserve-with-timeout 0\r\n")
        held = int(worker.recv_replies(4)[1].split()[1])
        code, _, err = run(capsys, "job", "delete", str(held), *at)
        assert (code, err) == (3, f"haqueue: job {held} is reserved by a worker: only that worker may delete it\n")
        code, _, err = run(capsys, "job", "bury", str(held), *at)
        assert (code, err) == (3, f"haqueue: job {held} is reserved by a worker: only that worker may bury it\n")


def test_a_draining_node_refuses_puts_with_exit_3(capsys):
    node = start_haqueue()
    try:
        os.kill(node.pid, signal.SIGUSR1)  # drain mode: puts answer DRAINING
        at = ("--address", f"{node.host}:{node.port}")
        for _ in range(100):  # the signal is handled on the node's loop: bounded retries
            code, out, err = run(capsys, "job", "put", "x", *at)
            if code == 3:
                break
        assert (code, err) == (3, "haqueue: put into tube default: the server answered DRAINING\n")
    finally:
        node.stop()


class ScriptedPeer:
    """A listening socket that answers each connection from a script, then closes it.
    Each script is a list of (expected line prefix, reply or None to close instead)."""

    def __init__(self, scripts: list[list[tuple[bytes, bytes | None]]]) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.scripts = list(scripts)
        self.seen: list[bytes] = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        for script in self.scripts:
            conn, _ = self.sock.accept()
            with conn:
                conn.settimeout(5)
                buf = b""
                for prefix, reply in script:
                    while b"\r\n" not in buf:
                        buf += conn.recv(4096)
                    line, _, buf = buf.partition(b"\r\n")
                    self.seen.append(line)
                    assert line.startswith(prefix), (line, prefix)
                    if line.startswith(b"put "):
                        buf = buf.partition(b"\r\n")[2]  # the body
                    if reply is None:
                        break
                    conn.sendall(reply)
        self.sock.close()


def test_a_put_whose_reply_is_lost_exits_5_and_is_not_sent_again(capsys):
    peer = ScriptedPeer([[(b"haqueue-operator console", b"NOTED\r\n"), (b"use t", b"USING t\r\n"),
                          (b"put ", None)]])
    code, out, err = run(capsys, "job", "put", "--tube", "t", "once", "--address", f"127.0.0.1:{peer.port}",
                         "--timeout", "2")
    peer.thread.join(5)
    assert (code, out) == (5, "")
    assert err.startswith(f"haqueue: 127.0.0.1:{peer.port}: the connection closed after the change was sent")
    assert [line for line in peer.seen if line.startswith(b"put ")] == [b"put 0 0 60 4"]  # once


def test_a_read_whose_connection_breaks_is_retried_and_answered(capsys):
    peer = ScriptedPeer([[(b"haqueue-operator console", b"NOTED\r\n"), (b"list-tubes", None)],
                         [(b"haqueue-operator console", b"UNKNOWN_COMMAND\r\n"),  # as beanstalkd answers
                          (b"list-tubes", b"OK 14\r\n---\n- default\n\r\n")]])
    assert run(capsys, "tube", "list", "--address", f"127.0.0.1:{peer.port}") == (0, "default\n", "")
