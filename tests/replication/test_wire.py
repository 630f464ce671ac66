"""The Raft wire codec: sealing with AES-GCM per sender, packing small messages flat."""

from __future__ import annotations

import logging
import os
import pickle
import zlib

import haqueue.replication.pysyncobj_patches  # noqa: F401  (pysyncobj imported safely first)
import pysyncobj.syncobj as syncobj_module
import pysyncobj.tcp_connection as tcp_connection_module
import pytest
from cryptography.fernet import Fernet

from haqueue.replication import raft_codec, raft_node  # noqa: F401  (raft_node installs the codec)
from haqueue.replication.wire import (
    COMPRESS_FROM_BYTES,
    Packing,
    RaftCipher,
    WireError,
    derive_cluster_key,
)

KEY = derive_cluster_key("secret")


def test_a_message_sealed_by_one_node_opens_on_another():
    sender, receiver = RaftCipher(KEY), RaftCipher(KEY)
    token = sender.encrypt_at_time(b"append_entries", 1234)
    assert receiver.extract_timestamp(token) == 1234
    assert receiver.decrypt(token) == b"append_entries"
    assert b"append_entries" not in token


def test_nonces_never_repeat_within_a_sender_or_across_senders():
    a, b = RaftCipher(KEY), RaftCipher(KEY)
    tokens = [a.encrypt_at_time(b"same", 1) for _ in range(100)] + [b.encrypt_at_time(b"same", 1)]
    assert len(set(tokens)) == len(tokens)
    assert a.sender_id != b.sender_id


@pytest.mark.parametrize("position", [1, 9, 30, -1])  # timestamp, sender id, counter, tag
def test_any_changed_byte_is_refused(position):
    token = bytearray(RaftCipher(KEY).encrypt_at_time(b"payload", 7))
    token[position] ^= 1
    with pytest.raises(WireError):
        RaftCipher(KEY).decrypt(bytes(token))


def test_another_secret_is_refused_and_the_reason_is_logged(caplog):
    token = RaftCipher(derive_cluster_key("other")).encrypt_at_time(b"payload", 7)
    with caplog.at_level(logging.WARNING), pytest.raises(WireError):
        RaftCipher(KEY).decrypt(token)
    assert "another cluster secret" in caplog.text


def test_a_fernet_token_from_an_older_node_is_named_as_such(caplog):
    token = Fernet(Fernet.generate_key()).encrypt_at_time(b"payload", 7)
    with caplog.at_level(logging.WARNING), pytest.raises(WireError):
        RaftCipher(KEY).extract_timestamp(token)
    assert "older haqueue" in caplog.text


def test_refusals_are_logged_once_per_interval_not_per_message(caplog):
    receiver = RaftCipher(KEY)
    with caplog.at_level(logging.WARNING):
        for _ in range(5):
            with pytest.raises(WireError):
                receiver.decrypt(b"\x01" + os.urandom(60))
    assert len(caplog.records) == 1


def test_the_keys_remembered_for_senders_stay_bounded():
    receiver = RaftCipher(KEY)
    for _ in range(200):
        receiver.decrypt(RaftCipher(KEY).encrypt_at_time(b"x", 1))
    assert len(receiver._receive_keys) <= 64


def test_small_messages_are_left_as_they_are_and_big_ones_compressed():
    small = b"\x00" + pickle.dumps({"type": "request_vote", "term": 3})
    assert Packing.compress(small, 3) is small
    assert Packing.decompress(small) is small
    big = b"\x00" + b"job body " * (COMPRESS_FROM_BYTES // 4)
    packed = Packing.compress(big, 3)
    assert packed[0] == 0xFF and zlib.decompress(packed[1:]) == big and len(packed) < len(big) // 10
    assert Packing.decompress(packed) == big


def test_a_token_of_the_older_wire_version_is_named_as_such(caplog):
    token = bytearray(RaftCipher(KEY).encrypt_at_time(b"payload", 7))
    token[0] = 1
    with caplog.at_level(logging.WARNING), pytest.raises(WireError):
        RaftCipher(KEY).extract_timestamp(bytes(token))
    assert "wire version 1" in caplog.text


def test_pysyncobj_uses_the_codec_once_raft_node_is_loaded():
    assert tcp_connection_module.zlib is Packing
    assert tcp_connection_module.pickle is raft_codec
    assert isinstance(syncobj_module.getEncryptor("secret"), RaftCipher)
