"""How Raft messages between haqueue nodes are sealed and packed on the wire.

pysyncobj 0.3.17 sends every message as `zlib.compress(pickle, 3)`, then, with
a password, Fernet-encrypts it. Measured on a 700-byte append_entries (one
group-commit entry): zlib 21 us, Fernet encrypt 23.5 us, decrypt 17 us; the
pickle itself 0.4 us. Each commit crosses four such encodings on its critical
path (leader to two followers, an acknowledgement back), so on a busy node
they were a large share of the Raft thread's time.

haqueue keeps pysyncobj's framing and its per-connection defences (a random
key each connection must echo, timestamps that never go back) and replaces the
two expensive parts through the seams pysyncobj looks up at run time:

1. Sealing: `pysyncobj.syncobj.getEncryptor(password)` is replaced by
   `RaftCipher`, AES-256-GCM (one C call per message; ~1 us). The key is
   derived from the cluster secret with PBKDF2 (as pysyncobj does), then per
   sender: each process picks a random 128-bit sender id and seals with
   HKDF(key, sender id), using a counter as the nonce. A nonce therefore never
   repeats under a key, however long a node runs (random 96-bit nonces under
   one shared key would reach GCM's safe limit of 2^32 messages within days).
   The header (version, timestamp, sender id, counter) is authenticated too.
2. Packing: pysyncobj's tcp_connection module compresses through its global
   `zlib`; `Packing` leaves small messages as they are (AES-GCM already
   authenticates them, and TCP checksums them) and compresses only big ones
   (snapshot chunks, large batches), at level 1, behind a 0xFF mark.
3. Encoding: tcp_connection's global `pickle` is raft_codec, which packs the
   hot messages (append_entries, next_node_idx) in fixed binary framing and
   pickles the rest.

Wire version 2 is (3) and Packing's mark; version 1 pickled everything and
framed small messages with zlib level 0.

Both ends must run this codec: a node of an older haqueue (Fernet) and a node
with another secret are refused alike; the first refusal from a peer is
logged with the likely reason, because pysyncobj drops such a link silently.
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import os
import struct
import time
import zlib

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from haqueue.replication import raft_codec

log = logging.getLogger(__name__)

VERSION = 2
_HEADER = struct.Struct(">BQ16sQ")  # version, timestamp, sender id, counter
_KEY_SALT = b"haqueue raft wire v1"
_PBKDF2_ROUNDS = 100_000
_RECEIVE_KEYS_KEPT = 64  # senders remembered; a restarted peer is a new sender
_REFUSAL_LOG_INTERVAL = 10.0
# Fernet tokens are urlsafe base64 of a 0x80 version byte: they start with "gAAAAA".
_FERNET_PREFIX = b"gAAAAA"

_OLDER_WIRE = ("it is sealed with wire version 1: that node runs an older haqueue; "
               "every node of a cluster must run the same wire version")

COMPRESS_FROM_BYTES = 64 * 1024
_COMPRESSED = 0xFF  # raft_codec's kinds are small numbers, never this


class WireError(Exception):
    """A message that is not sealed by a node of this cluster running this codec."""


def derive_cluster_key(secret: str | bytes) -> bytes:
    if isinstance(secret, str):
        secret = secret.encode()
    return hashlib.pbkdf2_hmac("sha256", secret, _KEY_SALT, _PBKDF2_ROUNDS, dklen=32)


def _sender_key(cluster_key: bytes, sender_id: bytes) -> AESGCM:
    hkdf = HKDF(algorithm=hashes.SHA256(), length=32, salt=sender_id, info=b"haqueue raft message")
    return AESGCM(hkdf.derive(cluster_key))


class RaftCipher:
    """pysyncobj's encryptor interface: encrypt_at_time, extract_timestamp, decrypt."""

    def __init__(self, cluster_key: bytes) -> None:
        self._cluster_key = cluster_key
        self.sender_id = os.urandom(16)
        self._seal = _sender_key(cluster_key, self.sender_id)
        self._counter = itertools.count(1)
        self._receive_keys: dict[bytes, AESGCM] = {}
        self._last_refusal_log = float("-inf")

    def encrypt_at_time(self, data: bytes, timestamp: int) -> bytes:
        counter = next(self._counter)
        header = _HEADER.pack(VERSION, timestamp, self.sender_id, counter)
        return header + self._seal.encrypt(b"\0\0\0\0" + counter.to_bytes(8, "big"), data, header)

    def extract_timestamp(self, token: bytes) -> int:
        if len(token) < _HEADER.size or token[0] != VERSION:
            self._refused(token, _OLDER_WIRE if token[:1] == b"\x01" else "not a haqueue Raft message")
        return _HEADER.unpack_from(token)[1]

    def decrypt(self, token: bytes) -> bytes:
        if len(token) < _HEADER.size or token[0] != VERSION:
            self._refused(token, _OLDER_WIRE if token[:1] == b"\x01" else "not a haqueue Raft message")
        _, _, sender_id, counter = _HEADER.unpack_from(token)
        opener = self._receive_keys.get(sender_id)
        if opener is None:
            opener = _sender_key(self._cluster_key, sender_id)
            if len(self._receive_keys) >= _RECEIVE_KEYS_KEPT:
                self._receive_keys.pop(next(iter(self._receive_keys)))
        header = token[: _HEADER.size]
        try:
            data = opener.decrypt(b"\0\0\0\0" + counter.to_bytes(8, "big"), token[_HEADER.size :], header)
        except InvalidTag:
            self._refused(token, "it fails authentication: does that node have another cluster secret?")
        # Remember a sender only once it proved to hold the key.
        self._receive_keys[sender_id] = opener
        return data

    def _refused(self, token: bytes, reason: str) -> None:
        if token.startswith(_FERNET_PREFIX):
            reason = ("it is sealed with pysyncobj's Fernet: that node runs an older haqueue; "
                      "every node of a cluster must run the same wire version")
        now = time.monotonic()
        if now - self._last_refusal_log >= _REFUSAL_LOG_INTERVAL:
            self._last_refusal_log = now
            log.warning("refusing a Raft connection: %s", reason)
        raise WireError(reason)


class Packing:
    """Stands in for the `zlib` module inside pysyncobj's tcp_connection."""

    error = zlib.error

    @staticmethod
    def compress(data: bytes, level: int = -1) -> bytes:
        if len(data) < COMPRESS_FROM_BYTES:
            return data
        return bytes((_COMPRESSED,)) + zlib.compress(data, 1)

    @staticmethod
    def decompress(data: bytes) -> bytes:
        if data[:1] == b"\xff":
            return zlib.decompress(memoryview(data)[1:])
        return data


def _get_encryptor(password) -> RaftCipher:
    return RaftCipher(derive_cluster_key(password))


def install(syncobj_module, tcp_connection_module) -> None:
    """Route pysyncobj's sealing and packing through this module (idempotent).

    The modules are passed in by pysyncobj_patches, the one place that
    imports pysyncobj's internals, so this codec imports no pysyncobj."""
    syncobj_module.getEncryptor = _get_encryptor
    tcp_connection_module.zlib = Packing
    tcp_connection_module.pickle = raft_codec
