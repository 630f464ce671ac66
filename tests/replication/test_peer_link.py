"""PeerLink, the Raft connection: frames cut out of whatever the reads bring, and any doubt drops the link.

One side is a PeerLink on a real loopback socket, polled through on_loop.EpollPoller
as on a node; the other is a plain socket the test writes frames to byte by byte,
in bulk, tampered, or cut short (wire.py seals them as a peer would).
"""

from __future__ import annotations

import os
import socket
from contextlib import contextmanager

import haqueue.replication.pysyncobj_patches  # noqa: F401  (pysyncobj imported safely first)
import pysyncobj.tcp_server
import pysyncobj.transport
from pysyncobj.poller import POLL_EVENT_TYPE
from pysyncobj.tcp_connection import CONNECTION_STATE

from haqueue.replication import peer_link, raft_codec, raft_node, wire  # noqa: F401  (raft_node installs the links)
from haqueue.replication.on_loop import EpollPoller
from haqueue.replication.peer_link import PeerLink

KEY = wire.derive_cluster_key("secret")
APPEND = {"type": "append_entries", "term": 3, "commit_index": 7, "entries": [(b"\x01job", 8, 3)],
          "prevLogIdx": 7, "prevLogTerm": 3, "haq_seq": 5}


def ack(n: int) -> dict:
    return {"type": "next_node_idx", "next_node_idx": n, "reset": False, "success": True, "haq_seq": n}


class Peer:
    """The far end of a link: a plain socket and the cipher of another process."""

    def __init__(self, sock: socket.socket, binding: bytes) -> None:
        self.sock = sock
        self.cipher = wire.RaftCipher(KEY)
        self.binding = binding  # the link's recvRandKey
        self.unread = b""

    def frame(self, message) -> bytes:
        return self.cipher.seal(wire.encode(message), self.binding)

    def receive(self, poll, link_key: bytes):
        """The next frame the link sent, opened (the link seals with its sendRandKey)."""
        while len(self.unread) < 4 or len(self.unread) < 4 + wire.LENGTH.unpack_from(self.unread)[0]:
            poll()
            try:
                self.unread += self.sock.recv(1 << 20)
            except BlockingIOError:
                pass
        end = 4 + wire.LENGTH.unpack_from(self.unread)[0]
        frame, self.unread = self.unread[:end], self.unread[end:]
        return wire.decode(wire.RaftCipher(KEY).open(frame, link_key)[2])


@contextmanager
def linked(**link_options):
    """(link, peer, poll, received, downs): a connected link, its keys exchanged."""
    poller = EpollPoller()
    listener = socket.create_server(("127.0.0.1", 0))
    received, downs = [], []
    link = PeerLink(poller, onMessageReceived=received.append, onDisconnected=lambda: downs.append(1),
                    timeout=60.0, **link_options)
    link.encryptor = wire.RaftCipher(KEY)
    link.recvRandKey, link.sendRandKey = os.urandom(32), os.urandom(32)
    assert link.connect("127.0.0.1", listener.getsockname()[1])
    sock, _ = listener.accept()
    sock.setblocking(False)

    def poll() -> None:
        poller.poll(0)

    while link.state != CONNECTION_STATE.CONNECTED:
        poll()
    try:
        yield link, Peer(sock, link.recvRandKey), poll, received, downs
    finally:
        link.disconnect()
        sock.close()
        listener.close()
        poller.close()


def poll_until(poll, predicate, rounds: int = 1000) -> None:
    for _ in range(rounds):
        if predicate():
            return
        poll()
    assert predicate()


def test_pysyncobj_makes_links_for_the_peers_it_dials_and_accepts():
    assert pysyncobj.transport.TcpConnection is PeerLink
    assert pysyncobj.tcp_server.TcpConnection is PeerLink
    assert (peer_link.DISCONNECTED, peer_link.CONNECTING, peer_link.CONNECTED) == (
        CONNECTION_STATE.DISCONNECTED, CONNECTION_STATE.CONNECTING, CONNECTION_STATE.CONNECTED)
    assert (peer_link._READ, peer_link._WRITE, peer_link._ERROR) == (
        POLL_EVENT_TYPE.READ, POLL_EVENT_TYPE.WRITE, POLL_EVENT_TYPE.ERROR)


def test_a_frame_split_across_reads_arrives_once_whole():
    with linked() as (link, peer, poll, received, downs):
        frame = peer.frame(APPEND)
        for byte in range(len(frame) - 1):
            peer.sock.send(frame[byte:byte + 1])
            poll()
            poll()
            assert received == []
        peer.sock.send(frame[-1:])
        poll_until(poll, lambda: received)
        assert received == [APPEND] and link.state == CONNECTION_STATE.CONNECTED


def test_many_frames_in_one_read_arrive_in_order():
    with linked() as (link, peer, poll, received, downs):
        peer.sock.sendall(b"".join(peer.frame(ack(n)) for n in range(200)) + peer.frame(APPEND)[:10])
        poll_until(poll, lambda: len(received) == 200)
        assert received == [ack(n) for n in range(200)]
        assert link.state == CONNECTION_STATE.CONNECTED and downs == []


def test_a_frame_bigger_than_one_read_arrives_whole():
    big = {**APPEND, "entries": [(os.urandom(3 * peer_link.READ_BYTES), 8, 3)]}
    with linked() as (link, peer, poll, received, downs):
        peer.sock.setblocking(True)
        frame = peer.frame(big) + peer.frame(ack(1))
        sent = 0
        while sent < len(frame):
            sent += peer.sock.send(frame[sent:sent + 50_000])
            poll()
        poll_until(poll, lambda: len(received) == 2)
        assert received == [big, ack(1)]


def test_a_tampered_frame_drops_the_link_and_nothing_after_it_is_read():
    with linked() as (link, peer, poll, received, downs):
        tampered = bytearray(peer.frame(ack(2)))
        tampered[-5] ^= 1
        peer.sock.sendall(peer.frame(ack(1)) + bytes(tampered) + peer.frame(ack(3)))
        poll_until(poll, lambda: link.state == CONNECTION_STATE.DISCONNECTED)
        assert received == [ack(1)] and downs == [1]


def test_a_replayed_frame_drops_the_link():
    with linked() as (link, peer, poll, received, downs):
        frame = peer.frame(ack(1))
        peer.sock.sendall(frame + frame)
        poll_until(poll, lambda: link.state == CONNECTION_STATE.DISCONNECTED)
        assert received == [ack(1)] and downs == [1]


def test_a_frame_bound_to_another_connection_drops_the_link():
    with linked() as (link, peer, poll, received, downs):
        peer.binding = os.urandom(32)
        peer.sock.sendall(peer.frame(ack(1)))
        poll_until(poll, lambda: link.state == CONNECTION_STATE.DISCONNECTED)
        assert received == [] and downs == [1]


def test_a_peer_closing_in_the_middle_of_a_frame_drops_the_link_once():
    with linked() as (link, peer, poll, received, downs):
        frame = peer.frame(APPEND)
        peer.sock.sendall(peer.frame(ack(1)) + frame[: len(frame) // 2])
        peer.sock.close()
        poll_until(poll, lambda: link.state == CONNECTION_STATE.DISCONNECTED)
        poll()
        assert received == [ack(1)] and downs == [1]
        link.send(ack(2))  # a send on a dropped link is a no-op, not an error
        assert downs == [1]


def test_frames_sent_just_before_a_reset_are_read_before_the_link_drops():
    # A peer that exits with bytes unread resets the link; its last words (a
    # resignation, docs/pysyncobj.md D37) wait in our buffer ahead of the reset.
    with linked() as (link, peer, poll, received, downs):
        link.send(ack(9))  # unread by the peer: its close resets
        peer.sock.sendall(peer.frame(ack(1)) + peer.frame(ack(2)))
        peer.sock.close()
        poll_until(poll, lambda: link.state == CONNECTION_STATE.DISCONNECTED)
        assert received == [ack(1), ack(2)] and downs == [1]


def test_a_stopping_link_sends_its_last_bytes_then_fin_and_waits_for_the_peers_close():
    # A node that stops (transport.close_links) must not reset its links: a reset drops
    # what the kernel had not delivered yet, a resignation among it (docs/pysyncobj.md D37).
    with linked() as (link, peer, poll, received, downs):
        key = link.sendRandKey
        link.send(ack(5))
        peer.sock.sendall(peer.frame(ack(2)))  # never read by the link
        assert link.finish(1.0) is not None
        assert not link.drained()  # the peer has not closed its side yet
        peer.sock.settimeout(5)
        while chunk := peer.sock.recv(1 << 16):  # up to the link's FIN; a reset would raise
            peer.unread += chunk
        assert peer.receive(lambda: None, key) == ack(5)
        peer.sock.close()  # as a PeerLink does when it reads FIN
        poll_until(lambda: None, link.drained)
        link.disconnect()


def test_a_dropped_link_dials_again_and_carries_messages_both_ways():
    with linked() as (link, peer, poll, received, downs):
        listener = socket.create_server(("127.0.0.1", 0))
        peer.sock.close()
        poll_until(poll, lambda: link.state == CONNECTION_STATE.DISCONNECTED)
        assert link.connect("127.0.0.1", listener.getsockname()[1])
        link.recvRandKey, link.sendRandKey = os.urandom(32), os.urandom(32)  # the handshake, again
        sock, _ = listener.accept()
        sock.setblocking(False)
        poll_until(poll, lambda: link.state == CONNECTION_STATE.CONNECTED)
        again = Peer(sock, link.recvRandKey)
        again.sock.sendall(again.frame(ack(9)))
        poll_until(poll, lambda: received)
        assert received == [ack(9)]
        link.send(APPEND)
        assert again.receive(poll, link.sendRandKey) == APPEND
        sock.close()
        listener.close()


def test_a_send_the_socket_cannot_take_at_once_goes_out_when_it_drains():
    big = {**APPEND, "entries": [(os.urandom(2 << 20), 8, 3)]}
    with linked(sendBufferSize=4096) as (link, peer, poll, received, downs):
        link.send(big)
        assert link.getSendBufferSize() > 0  # the rest waits for the poller to say the socket is writable
        link.send(ack(4))  # queued behind it, in order
        assert peer.receive(poll, link.sendRandKey) == big
        assert peer.receive(poll, link.sendRandKey) == ack(4)
        assert link.getSendBufferSize() == 0


def test_without_a_secret_frames_are_plain_but_versioned():
    with linked() as (link, peer, poll, received, downs):
        link.encryptor = None
        peer.sock.sendall(wire.plain_frame(wire.encode(ack(1))) + b"\x05\0\0\0\x02" + wire.encode(ack(2)))
        poll_until(poll, lambda: link.state == CONNECTION_STATE.DISCONNECTED)
        assert received == [ack(1)]  # the second is framed by wire version 2


def test_hot_messages_leave_in_their_binary_form_after_the_handshake():
    # pysyncobj wrapped each message in a tuple with the connection key, so the
    # codec pickled the tuple and never took its binary forms (wire version 2).
    with linked() as (link, peer, poll, received, downs):
        link.send(APPEND)
        link.send(ack(3))
        frames = []
        while len(frames) < 2:
            poll()
            try:
                peer.unread += peer.sock.recv(1 << 20)
            except BlockingIOError:
                pass
            while len(peer.unread) >= 4 and len(peer.unread) >= 4 + wire.LENGTH.unpack_from(peer.unread)[0]:
                end = 4 + wire.LENGTH.unpack_from(peer.unread)[0]
                frames.append(wire.RaftCipher(KEY).open(peer.unread[:end], link.sendRandKey)[2])
                peer.unread = peer.unread[end:]
        assert [f[0] for f in frames] == [raft_codec.APPEND, raft_codec.ACK]


def test_a_node_dials_a_dropped_link_again_and_the_cluster_commits_over_it():
    # SyncingTransport skips pysyncobj's dial pass while every link it dials is
    # up: a link that drops must bring the pass back. Ticked in virtual time.
    from haqueue.core.commands import PUT, encode_batch
    from tests.support.ticked import ticked_cluster

    with ticked_cluster() as cluster:
        leader = cluster.leader()
        dialler = next(node for node in cluster.nodes if node.transport._outgoing)
        conn = next(iter(dialler.transport._outgoing))
        conn.disconnect()  # dialled again at once, from the disconnect callback
        assert conn.state == CONNECTION_STATE.CONNECTING
        conn.disconnect()  # within connection_retry: left for a tick's dial pass
        assert conn.state == CONNECTION_STATE.DISCONNECTED
        cluster.run_until(lambda: conn.state == CONNECTION_STATE.CONNECTED, seconds=2 * cluster.timing.connection_retry,
                          what="the dropped link dialled again")
        leader = cluster.leader()
        applied, _ = cluster.commit(leader, encode_batch(1, [(PUT, "default", 0, 0, 60_000, b"x")]))
        assert applied is not None
        cluster.run_until(lambda: all(n.raftCommitIndex == leader.raftCommitIndex for n in cluster.nodes), seconds=1)


@contextmanager
def accepted():
    """(link, stranger, poll, received, downs): a link of a connection this node accepted."""
    poller = EpollPoller()
    listener = socket.create_server(("127.0.0.1", 0))
    stranger = socket.create_connection(listener.getsockname())
    sock, _ = listener.accept()
    sock.setblocking(False)
    received, downs = [], []
    link = PeerLink(poller, onMessageReceived=received.append, onDisconnected=lambda: downs.append(1),
                    socket=sock, timeout=60.0)
    link.encryptor = wire.RaftCipher(KEY)
    try:
        yield link, stranger, lambda: poller.poll(0), received, downs
    finally:
        link.disconnect()
        stranger.close()
        listener.close()
        poller.close()


def test_a_stranger_announcing_a_huge_frame_is_dropped_before_anything_is_buffered():
    with accepted() as (link, stranger, poll, received, downs):
        stranger.sendall(wire.LENGTH.pack(1 << 31) + b"x" * 1000)
        poll_until(poll, lambda: link.state == CONNECTION_STATE.DISCONNECTED)
        assert received == [] and downs == [1] and len(link._pending) == 0


def test_an_accepted_connection_gets_the_full_bound_once_a_frame_opened():
    with accepted() as (link, stranger, poll, received, downs):
        link.recvRandKey = os.urandom(32)
        peer = Peer(stranger, link.recvRandKey)
        stranger.sendall(peer.frame(ack(1)))
        poll_until(poll, lambda: received == [ack(1)])
        big = {**APPEND, "entries": [(os.urandom(2 * peer_link.FIRST_FRAME_BYTES), 8, 3)]}
        stranger.sendall(peer.frame(big))
        poll_until(poll, lambda: len(received) == 2)
        assert received[1] == big and downs == []


def test_no_link_buffers_a_frame_over_the_bound():
    with linked() as (link, peer, poll, received, downs):
        peer.sock.sendall(wire.LENGTH.pack(peer_link.max_frame + 1) + b"x" * 1000)
        poll_until(poll, lambda: link.state == CONNECTION_STATE.DISCONNECTED)
        assert received == [] and downs == [1]
