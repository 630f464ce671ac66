"""Client load for crash tests: a producer that records every acknowledged put."""

from __future__ import annotations

import socket
import threading


def producer(host: str, port: int, acked: list, stop: threading.Event, body: bytes = b"hello") -> None:
    """Windowed puts until the connection dies; records every acknowledged id."""
    try:
        with socket.create_connection((host, port), timeout=5) as sock:
            buf = b""
            request = b"put 0 0 60 %d\r\n%s\r\n" % (len(body), body)
            while not stop.is_set():
                sock.sendall(request * 16)
                got = 0
                while got < 16:
                    chunk = sock.recv(65536)
                    if not chunk:
                        return
                    buf += chunk
                    while b"\r\n" in buf:
                        line, buf = buf.split(b"\r\n", 1)
                        if not line.startswith(b"INSERTED "):
                            return
                        acked.append(int(line.split()[1]))
                        got += 1
    except OSError:
        return  # killed or stopped under us: what was acknowledged is recorded
