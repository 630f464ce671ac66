"""PeerLink: one TCP connection between two Raft nodes, in place of pysyncobj's TcpConnection.

pysyncobj's TCPTransport makes a TcpConnection for each peer it dials and
TcpServer one for each it accepts; pysyncobj_patches points both at this class
(docs/pysyncobj.md D33), which keeps TcpConnection's interface (connect, send,
disconnect, `state`, the callbacks, the handshake's `sendRandKey` and
`recvRandKey`, `encryptor`) and replaces its byte path. In a GIL profile of a
follower, tcp_connection.py was 17 % of the interpreter's time, for work that
is mostly bookkeeping:

- TcpConnection read until recv raised EAGAIN (an exception per event),
  asked the kernel for SO_ERROR after every recv, grew its read buffer by
  `bytes` concatenation and cut each message off by copying the rest. A link
  reads once per event (the poller is level-triggered: more bytes wake it
  again), cuts every whole frame out of that one buffer through a memoryview,
  and keeps only an unfinished frame's bytes for the next read.
- It wrapped every message after the handshake in a tuple with the
  receiver's connection key, so even the hot messages were pickled (raft_codec's
  binary forms were never taken on the wire). The key is now bound into each
  frame's authentication instead (wire.py), and the message goes out as is.
- It checked its timeout through two method calls per send and per event; a
  link reads the clock once.
- A send that did not go out whole waited in a buffer for the next send; a
  link asks the poller to say when the socket can take the rest.

Measured (an append_entries and its acknowledgement between two links on
loopback, both ends in one process): 59 -> 34 us of CPU per round trip, median
of seven runs each.

Rules kept from TcpConnection: a connection on which nothing has been read for
`timeout` seconds is dropped on its next event or send; any frame that does not
open (another secret, another wire version, a replay, bytes that do not
decode) drops the connection; `disconnect` calls the disconnected callback
once; the states are pysyncobj's CONNECTION_STATE numbers.

Frames are wire.py's; messages are dicts and tuples of pysyncobj's (raft_codec).
"""

from __future__ import annotations

import logging
import socket
import time

from haqueue.replication import wire

# pysyncobj.tcp_connection.CONNECTION_STATE's and pysyncobj.poller.POLL_EVENT_TYPE's
# values (tests/replication/test_peer_link.py checks them), so that this module imports no pysyncobj.
DISCONNECTED, CONNECTING, CONNECTED = 0, 1, 2
_READ, _WRITE, _ERROR = 1, 2, 4

# At most this much per recv. recv allocates the whole size first: at 256 KiB (above
# glibc's mmap threshold) a link round trip cost twice as much CPU as at 64 KiB.
READ_BYTES = 64 * 1024

# The longest frame a link buffers. Nothing is read into memory for a frame longer than
# this: the link is dropped when its length arrives. On a connection this node accepted,
# before any of its frames has opened (the peer proved nothing yet: the handshake, or a
# stranger on the Raft port), at most FIRST_FRAME_BYTES; otherwise at most `max_frame`, which the node raises
# to what its appends may carry (raft_node.py: twice its batch limit, for the per-entry
# framing of many small entries, plus a MiB). pysyncobj's TcpConnection had no bound:
# four bytes from anyone made a node wait to buffer up to 4 GiB.
FIRST_FRAME_BYTES = 64 * 1024
max_frame = 16 << 20


def allow_frames_of(size: int) -> None:
    """Let links buffer frames of `size` bytes (never lowers the bound: one process may
    hold several nodes, as the tests' ticked clusters do)."""
    global max_frame
    max_frame = max(max_frame, size)


monotonicTime = time.monotonic  # pysyncobj_patches points it at the shared clock (D21)

_LENGTH = wire.LENGTH.unpack_from
log = logging.getLogger(__name__)
_NO_KEY = b""


class PeerLink:
    """A TcpConnection with a lean byte path (see the module's docstring)."""

    def __init__(self, poller, onMessageReceived=None, onConnected=None, onDisconnected=None,
                 socket=None, timeout=10.0, sendBufferSize=2 ** 13, recvBufferSize=2 ** 13,
                 keepalive=None):
        self.sendRandKey = None  # the peer's connection key: what this side binds its frames to
        self.recvRandKey = None  # this side's: what the peer's frames must be bound to
        self.encryptor: wire.RaftCipher | None = None
        self._poller = poller
        self._timeout = timeout
        self._send_buffer_size = sendBufferSize
        self._recv_buffer_size = recvBufferSize
        self._keepalive = keepalive
        self._on_message = onMessageReceived
        self._on_connected = onConnected
        self._on_disconnected = onDisconnected
        self._pending = bytearray()  # the start of a frame not yet whole
        self._needed = 0  # the bytes _pending must hold for its first frame to be whole
        self._unsent = bytearray()  # what the socket did not take yet
        self._opening = None  # wire.Opening: this connection's sender and counter, once it sends
        # FIRST_FRAME_BYTES binds an accepted connection until one of its frames opens; a
        # link this node dials reaches the peer it chose, whose first append may be big.
        self._trusted = socket is None
        self._last_read = monotonicTime()
        self._socket = socket
        self._fileno = None
        self.state = DISCONNECTED
        if socket is not None:
            self._fileno = socket.fileno()
            self.state = CONNECTED
            self._set_keepalive()
            poller.subscribe(self._fileno, self._on_event, _READ | _ERROR)

    # ------------------------------------------------------------ TcpConnection's interface
    def setOnConnectedCallback(self, onConnected):
        self._on_connected = onConnected

    def setOnMessageReceivedCallback(self, onMessageReceived):
        self._on_message = onMessageReceived

    def setOnDisconnectedCallback(self, onDisconnected):
        self._on_disconnected = onDisconnected

    def fileno(self):
        return self._fileno

    def getSendBufferSize(self):
        return len(self._unsent)

    def connect(self, host, port) -> bool:
        if host is None:
            return False
        self.state = DISCONNECTED
        self._fileno = None
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = self._socket = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self._send_buffer_size)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self._recv_buffer_size)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._set_keepalive()
        sock.setblocking(False)
        self._reset_buffers()
        self._trusted = True  # dialled: see __init__
        self._last_read = monotonicTime()
        try:
            sock.connect((host, port))
        except BlockingIOError:
            pass
        except OSError:
            sock.close()
            self._socket = None
            return False
        self._fileno = sock.fileno()
        self.state = CONNECTING
        self._poller.subscribe(self._fileno, self._on_event, _READ | _WRITE | _ERROR)
        return True

    def send(self, message) -> None:
        if self.state == DISCONNECTED:
            return
        if monotonicTime() - self._last_read > self._timeout:
            self.disconnect()
            return
        payload = wire.encode(message)
        encryptor = self.encryptor
        if encryptor is not None:
            frame = encryptor.seal(payload, self.sendRandKey or _NO_KEY)
        else:
            frame = wire.plain_frame(payload)
        if self._unsent or self.state != CONNECTED:
            self._unsent += frame  # the poller says when the socket can take it
            return
        sent = self._send_now(frame)
        if sent is None:
            return
        if sent < len(frame):
            self._unsent += memoryview(frame)[sent:]
            self._poller.subscribe(self._fileno, self._on_event, _READ | _WRITE | _ERROR)

    def disconnect(self) -> None:
        call = self._on_disconnected is not None and self.state != DISCONNECTED
        self.sendRandKey = None
        self.recvRandKey = None
        if self._socket is not None:
            self._socket.close()
            self._socket = None
        if self._fileno is not None:
            self._poller.unsubscribe(self._fileno)
            self._fileno = None
        self._reset_buffers()
        self.state = DISCONNECTED
        if call:
            self._on_disconnected()

    def finish(self, wait: float) -> int | None:
        """Before the node stops (transport.close_links): send what is still unsent,
        waiting up to `wait` seconds for the socket to take it, then end the sending
        side, so the peer reads FIN after the last bytes. The socket's descriptor, to
        wait on until the peer closes its side too (`drained`), or None."""
        sock = self._socket
        if sock is None or self.state != CONNECTED:
            return None
        try:
            if self._unsent:
                sock.settimeout(wait)
                sock.sendall(self._unsent)
                self._unsent = bytearray()
            sock.setblocking(False)
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            return None
        return self._fileno

    def drained(self) -> bool:
        """After `finish`: read and drop what the peer sent; True once it closed its side
        (or the link broke), so that closing ours now resets nothing."""
        sock = self._socket
        try:
            while sock.recv(READ_BYTES):
                pass
        except BlockingIOError:
            return False
        except OSError:
            pass
        return True

    # ------------------------------------------------------------ the byte path
    def _set_keepalive(self) -> None:
        if self._keepalive is not None and self._socket is not None:
            idle, interval, count = self._keepalive
            sock = self._socket
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, idle)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, interval)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, count)

    def _reset_buffers(self) -> None:
        self._pending = bytearray()
        self._unsent = bytearray()
        self._opening = None
        self._trusted = False  # a frame of this connection has opened (FIRST_FRAME_BYTES)

    def _on_event(self, descr, event) -> None:
        if descr != self._fileno:
            self._poller.unsubscribe(descr)
            return
        if event & _ERROR:
            if event & _READ and self.state == CONNECTED:
                # A peer that exits with answers unread resets the link, and its last
                # words (a resignation, D37) wait in our buffer ahead of the reset.
                self._drain()
            self.disconnect()
            return
        now = monotonicTime()
        if now - self._last_read > self._timeout:
            self.disconnect()
            return
        if self.state == CONNECTING:
            self._connected()
            return
        if event & _WRITE:
            self._send_unsent()
            if self.state == DISCONNECTED:
                return
        if event & _READ:
            self._read(now)

    def _connected(self) -> None:
        if self._socket.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR):
            self.disconnect()
            return
        if self._on_connected is not None:
            self._on_connected()  # the transport's handshake: its first send is kept in _unsent
        if self.state == DISCONNECTED:
            return
        self.state = CONNECTED
        self._last_read = monotonicTime()
        self._send_unsent()

    def _send_now(self, data) -> int | None:
        """How much of `data` the socket took now; None when the link dropped."""
        try:
            return self._socket.send(data)
        except (BlockingIOError, InterruptedError):
            return 0
        except OSError:
            self.disconnect()
            return None

    def _send_unsent(self) -> None:
        unsent = self._unsent
        if unsent:
            sent = self._send_now(unsent)
            if sent is None:
                return
            del unsent[:sent]
        self._poller.subscribe(self._fileno, self._on_event, _READ | _ERROR | (_WRITE if unsent else 0))

    def _drain(self) -> None:
        """Read whatever the socket still holds, until it has nothing more or the link drops."""
        sock = self._socket
        while self._socket is sock and self.state == CONNECTED and self._read(monotonicTime()):
            pass

    def _read(self, now: float) -> bool:
        """One read from the socket, its whole frames delivered; False if nothing came."""
        sock = self._socket
        try:
            data = sock.recv(READ_BYTES)
        except (BlockingIOError, InterruptedError):
            return False
        except OSError:
            self.disconnect()
            return False
        if not data:
            self.disconnect()  # the peer closed, perhaps in the middle of a frame
            return False
        self._last_read = now
        if self._pending:
            pending = self._pending
            pending += data
            if len(pending) < self._needed:
                return True  # a big frame arriving in pieces: no copy until it is whole
            data = bytes(pending)
            self._pending = bytearray()
        size = len(data)
        view = memoryview(data)
        start = 0
        while size - start >= 4:
            length = _LENGTH(data, start)[0]
            if length > (max_frame if self._trusted else FIRST_FRAME_BYTES):
                log.warning("raft link from %s dropped: a frame of %d bytes is over the bound", self._peer_name(), length)
                self.disconnect()
                return False
            end = start + 4 + length
            if end > size:
                break
            try:
                message = self._open(view[start:end])
            except Exception:  # WireError, or bytes raft_codec cannot read: the link is not trusted
                self.disconnect()
                return False
            self._trusted = True
            start = end
            if self._on_message is not None:
                self._on_message(message)
            if self._socket is not sock:
                return False  # the callback dropped the link (and may have dialled again)
        if start < size:
            self._pending = bytearray(view[start:])
            self._needed = end - start if size - start >= 4 else 4  # `end`: the unfinished frame's
        return True

    def _peer_name(self) -> str:
        try:
            host, port = self._socket.getpeername()[:2]
            return f"{host}:{port}"
        except (OSError, AttributeError, ValueError):
            return "a peer"

    def _open(self, frame):
        opening = self._opening
        if opening is None:
            if self.encryptor is None:
                return wire.decode(wire.open_plain(frame))
            opening = self._opening = wire.Opening(self.encryptor)
        return wire.decode(opening.open(frame, self.recvRandKey or _NO_KEY))


def install(transport_module, tcp_server_module) -> None:
    """Links for pysyncobj's transport and server (called by pysyncobj_patches)."""
    transport_module.TcpConnection = PeerLink
    tcp_server_module.TcpConnection = PeerLink
