"""Importing the replication layer leaves the standard library as it was."""

import socket
import subprocess
import sys


def test_importing_replication_keeps_socket_inet_ntop_working():
    code = (
        "import socket, haqueue.replication.raft_node; "
        "print(socket.inet_ntop(socket.AF_INET, bytes([127, 0, 0, 1])))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert out.stdout.strip() == "127.0.0.1", out.stderr
    assert socket.inet_ntop(socket.AF_INET6, bytes(16)) == "::"
