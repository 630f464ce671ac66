"""Arrivals: the connections that reach an early socket while the node starts, and when
their first bytes came.

A client harness connects 0.1 s after exec and may send `reserve-with-timeout 1`, or a
`put` with a delay, at once; it expects the time to count from when it sent the command,
as beanstalkd, ready within a few ms, counts it. A node that listens early (early.py)
reads its first command only once the server is loaded, 0.1-0.2 s after exec. So from
listening until the server takes the socket over, a thread watches it: it accepts each
connection and notes when its first bytes became readable (time.monotonic()'s clock) and
how many were readable then (FIONREAD). The server takes these connections with the
listening socket (node_start.py, server/listeners.py), and a session counts the delays and
timeouts of the commands complete within those bytes from that moment
(server/beanstalk/session.py, `arrived_early`): every one of them had arrived by then, so no delay
or timeout ends before it would have with beanstalkd; a command that came later counts
from when it is read, as any other.

Rules: the thread imports only C modules (_thread, select, time, fcntl, termios, as
early.py does: no start-up cost); it blocks in poll() until a connection or its bytes
come, or until `stop` writes to its pipe, so it costs nothing while nothing arrives; it
accepts, notes and stops under one lock, so once `stop` returns it touches nothing; at
most BACKLOG connections are taken (the rest wait in the kernel's backlog, as before);
an error in the thread ends the watching, never the node (the connections it took are
handed over all the same, without a time).
"""

from __future__ import annotations

import _socket
import _thread
import os
import select
import sys
import time
from fcntl import ioctl
from termios import FIONREAD

BACKLOG = 1024


class Arrivals:
    def __init__(self, listener: _socket.socket) -> None:
        self._listener = listener
        self._fd = listener.fileno()  # taken now: the server may detach the socket object
        self._family, self._type = listener.family, listener.type
        self._lock = _thread.allocate_lock()
        self._stopped = False
        self._wake_read, self._wake_write = os.pipe()
        # [socket, monotonic time its first bytes were readable (None: not yet), bytes then]
        self._taken: list[list] = []
        listener.setblocking(False)
        _thread.start_new_thread(self._watch, ())

    def stop(self) -> list[tuple[_socket.socket, float | None, int]]:
        """Stop watching; the connections taken so far, oldest first (once)."""
        with self._lock:
            if self._stopped:
                return []
            self._stopped = True
            taken, self._taken = self._taken, []
        try:
            os.write(self._wake_write, b"x")  # the thread wakes, sees _stopped, closes the pipe
        except OSError:
            pass  # the thread has ended already (an error ended its watching)
        os.close(self._wake_write)
        return [(sock, first, count) for sock, first, count in taken]

    def _watch(self) -> None:
        waiting: dict[int, list] = {}  # fd -> its entry in _taken, until its first bytes
        try:
            poller = select.poll()
            listener = self._fd
            poller.register(listener, select.POLLIN)
            poller.register(self._wake_read, select.POLLIN)
            while True:
                events = poller.poll()
                with self._lock:
                    if self._stopped:
                        return
                    now = time.monotonic()
                    for fd, _ in events:
                        if fd == listener:
                            self._accept(poller, waiting)
                        elif fd in waiting:
                            entry = waiting.pop(fd)
                            poller.unregister(fd)
                            entry[1] = now
                            entry[2] = _readable_bytes(fd)  # 0 if it closed without a word
        except Exception:  # the watching ends; the node starts all the same
            return
        finally:
            os.close(self._wake_read)

    def _accept(self, poller, waiting: dict[int, list]) -> None:
        while len(self._taken) < BACKLOG:
            try:
                fd, _ = self._listener._accept()
            except (BlockingIOError, InterruptedError):
                return
            sock = _socket.socket(self._family, self._type, 0, fileno=fd)
            entry = [sock, None, 0]
            self._taken.append(entry)
            waiting[fd] = entry
            poller.register(fd, select.POLLIN)
        poller.unregister(self._fd)  # the rest wait in the backlog


def _readable_bytes(fd: int) -> int:
    return int.from_bytes(ioctl(fd, FIONREAD, b"\0\0\0\0"), sys.byteorder, signed=True)
