"""The Raft wire: frames sealed with AES-GCM per sender and bound to a connection, small messages flat."""

from __future__ import annotations

import logging
import os
import pickle
import struct
import zlib

import haqueue.replication.pysyncobj_patches  # noqa: F401  (pysyncobj imported safely first)
import pysyncobj.syncobj as syncobj_module
import pytest
from cryptography.fernet import Fernet

from haqueue.replication import raft_node, wire  # noqa: F401  (raft_node installs the wire)
from haqueue.replication.wire import (
    COMPRESS_FROM_BYTES,
    RaftCipher,
    WireError,
    decode,
    derive_cluster_key,
    encode,
    open_plain,
    plain_frame,
)

KEY = derive_cluster_key("secret")
BOUND = os.urandom(32)  # the receiver's connection key


def test_a_frame_sealed_by_one_node_opens_on_another():
    sender, receiver = RaftCipher(KEY), RaftCipher(KEY)
    frame = sender.seal(b"append_entries", BOUND)
    assert struct.unpack_from("<I", frame)[0] == len(frame) - 4
    sender_id, counter, payload = receiver.open(memoryview(frame), BOUND)
    assert (sender_id, counter, payload) == (sender.sender_id, 1, b"append_entries")
    assert b"append_entries" not in frame and BOUND not in frame


def test_a_frame_bound_to_one_connection_does_not_open_on_another(caplog):
    frame = RaftCipher(KEY).seal(b"payload", BOUND)
    for other in (os.urandom(32), b""):
        with caplog.at_level(logging.WARNING), pytest.raises(WireError):
            RaftCipher(KEY).open(frame, other)


def test_nonces_never_repeat_within_a_sender_or_across_senders():
    a, b = RaftCipher(KEY), RaftCipher(KEY)
    frames = [a.seal(b"same", b"") for _ in range(100)] + [b.seal(b"same", b"")]
    assert len(set(frames)) == len(frames)
    assert [RaftCipher(KEY).open(f, b"")[1] for f in frames[:3]] == [1, 2, 3]
    assert a.sender_id != b.sender_id


@pytest.mark.parametrize("position", [0, 4, 9, 25, 30, -1])  # length, version, sender id, counter, body, tag
def test_any_changed_byte_is_refused(position):
    frame = bytearray(RaftCipher(KEY).seal(b"payload", BOUND))
    frame[position] ^= 1
    with pytest.raises(WireError):
        RaftCipher(KEY).open(bytes(frame), BOUND)


def test_another_secret_is_refused_and_the_reason_is_logged(caplog, monkeypatch):
    monkeypatch.setattr(wire, "_last_refusal_log", float("-inf"))
    frame = RaftCipher(derive_cluster_key("other")).seal(b"payload", b"")
    with caplog.at_level(logging.WARNING), pytest.raises(WireError):
        RaftCipher(KEY).open(frame, b"")
    assert "another cluster secret" in caplog.text


@pytest.mark.parametrize("token, named", [
    (Fernet(Fernet.generate_key()).encrypt_at_time(b"payload", 7), "Fernet"),
    (b"\x01" + os.urandom(60), "wire version 1"),
    (b"\x02" + os.urandom(60), "wire version 2"),
])
def test_a_frame_of_an_older_haqueue_is_named_as_such(caplog, monkeypatch, token, named):
    monkeypatch.setattr(wire, "_last_refusal_log", float("-inf"))
    frame = struct.pack("i", len(token)) + token  # how pysyncobj framed them
    with caplog.at_level(logging.WARNING), pytest.raises(WireError):
        RaftCipher(KEY).open(frame, b"")
    assert named in caplog.text and "older haqueue" in caplog.text and "version (3)" in caplog.text


def test_refusals_are_logged_once_per_interval_not_per_message(caplog, monkeypatch):
    monkeypatch.setattr(wire, "_last_refusal_log", float("-inf"))
    receiver = RaftCipher(KEY)
    with caplog.at_level(logging.WARNING):
        for _ in range(5):
            with pytest.raises(WireError):
                receiver.open(b"\x40\0\0\0\x01" + os.urandom(60), b"")
    assert len(caplog.records) == 1


def test_the_keys_remembered_for_senders_stay_bounded():
    receiver = RaftCipher(KEY)
    for _ in range(200):
        receiver.open(RaftCipher(KEY).seal(b"x", b""), b"")
    assert len(receiver._receive_keys) <= 64


def test_a_plain_frame_carries_the_version_too():
    frame = plain_frame(b"\x00payload")
    assert open_plain(memoryview(frame)) == b"\x00payload"
    with pytest.raises(WireError):
        open_plain(struct.pack("<I", 8) + b"\x00payload")  # a version 2 node without a secret


def test_small_messages_are_left_as_they_are_and_big_ones_compressed():
    small = {"type": "request_vote", "term": 3}
    assert encode(small) == b"\x00" + pickle.dumps(small, protocol=5)
    assert decode(encode(small)) == small
    big = {"type": "append_entries", "term": 1, "commit_index": 1, "prevLogIdx": 1, "prevLogTerm": 1,
           "entries": [(b"job body " * (COMPRESS_FROM_BYTES // 4), 2, 1)]}
    packed = encode(big)
    assert packed[0] == 0xFF and len(packed) < COMPRESS_FROM_BYTES // 10
    assert zlib.decompress(packed[1:])[0] == 1  # raft_codec's APPEND inside
    assert decode(packed) == big


def test_pysyncobj_seals_with_the_raft_cipher_once_raft_node_is_loaded():
    assert isinstance(syncobj_module.getEncryptor("secret"), RaftCipher)


def test_a_connection_refuses_a_replayed_frame_and_a_second_sender():
    sender, other = RaftCipher(KEY), RaftCipher(KEY)
    opening = wire.Opening(RaftCipher(KEY))
    first, second = sender.seal(b"one", BOUND), sender.seal(b"two", BOUND)
    assert opening.open(first, BOUND) == b"one"
    assert opening.open(memoryview(second), BOUND) == b"two"
    for frame in (first, second, other.seal(b"three", BOUND)):
        with pytest.raises(WireError):
            opening.open(frame, BOUND)
    tampered = bytearray(sender.seal(b"four", BOUND))
    tampered[-1] ^= 1
    with pytest.raises(WireError):
        opening.open(bytes(tampered), BOUND)
    assert opening.open(sender.seal(b"five", BOUND), BOUND) == b"five"  # a refusal does not move the counter
