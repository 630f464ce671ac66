"""How Raft messages between haqueue nodes are sealed, packed and framed on the wire.

pysyncobj 0.3.17 sends every message as `zlib.compress(pickle, 3)`, then, with
a password, Fernet-encrypts it. Measured on a 700-byte append_entries (one
group-commit entry): zlib 21 us, Fernet encrypt 23.5 us, decrypt 17 us; the
pickle itself 0.4 us. Each commit crosses four such encodings on its critical
path (leader to two followers, an acknowledgement back), so on a busy node
they were a large share of the Raft thread's time.

haqueue's links (peer_link.py, docs/pysyncobj.md D33) frame messages with this
module; pysyncobj's handshake (a random key each side of a connection picks and
the other must bind every later message to) keeps its meaning:

1. Sealing: `pysyncobj.syncobj.getEncryptor(password)` is replaced by
   `RaftCipher`, AES-256-GCM (one C call per message; ~1 us). The key is
   derived from the cluster secret with PBKDF2 (as pysyncobj does), then per
   sender: each process picks a random 128-bit sender id and seals with
   HKDF(key, sender id), using a counter as the nonce. A nonce therefore never
   repeats under a key, however long a node runs (random 96-bit nonces under
   one shared key would reach GCM's safe limit of 2^32 messages within days).
2. Binding: pysyncobj wrapped every message after the handshake in a tuple
   with the receiver's random connection key (and so pickled even the hot
   messages, whatever the codec did with the dict inside). The key is instead
   authenticated as part of the associated data, not sent: a message recorded
   on one connection fails authentication on any other, and the link refuses a
   counter that does not rise (a replay within the connection).
3. Packing: small messages are left as they are (AES-GCM already
   authenticates them, and TCP checksums them); big ones (snapshot chunks,
   large batches) are compressed at level 1 behind a 0xFF mark.
4. Encoding: raft_codec packs the hot messages (append_entries,
   next_node_idx) in fixed binary framing and pickles the rest.

A frame (wire version 3):

    length u32 LE (of what follows) | version u8 | sender id 16 | counter u64 LE | ciphertext + 16-byte tag

The associated data is the frame's first 29 bytes and the binding key (empty
until the receiver has picked one). Without a secret (tests, a trusted
network): length | version | payload. Version 2 was pysyncobj's framing (a
native int length, the timestamp, the tuple); version 1 pickled everything.

Both ends must run this wire: a node of an older haqueue (Fernet, versions 1
and 2) and a node with another secret are refused alike; the first refusal
from a peer is logged with the likely reason (the link drops the connection).
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

VERSION = 3
SEALED_HEAD = struct.Struct("<IB16sQ")  # length of the rest, version, sender id, counter
PLAIN_HEAD = struct.Struct("<IB")  # length of the rest, version
LENGTH = struct.Struct("<I")
TAG_BYTES = 16
_NONCE = struct.Struct("<Q4x")  # the counter, as AES-GCM's 96-bit nonce
_KEY_SALT = b"haqueue raft wire v1"
_PBKDF2_ROUNDS = 100_000
_RECEIVE_KEYS_KEPT = 64  # senders remembered; a restarted peer is a new sender
_REFUSAL_LOG_INTERVAL = 10.0
# Fernet tokens are urlsafe base64 of a 0x80 version byte: they start with "gAAAAA".
_FERNET_PREFIX = b"gAAAAA"

COMPRESS_FROM_BYTES = 64 * 1024
_COMPRESSED = 0xFF  # raft_codec's kinds are small numbers, never this


class WireError(Exception):
    """A message that is not sealed by a node of this cluster running this wire."""


def derive_cluster_key(secret: str | bytes) -> bytes:
    if isinstance(secret, str):
        secret = secret.encode()
    return hashlib.pbkdf2_hmac("sha256", secret, _KEY_SALT, _PBKDF2_ROUNDS, dklen=32)


def _sender_key(cluster_key: bytes, sender_id: bytes) -> AESGCM:
    hkdf = HKDF(algorithm=hashes.SHA256(), length=32, salt=sender_id, info=b"haqueue raft message")
    return AESGCM(hkdf.derive(cluster_key))


_last_refusal_log = float("-inf")


def refuse(frame, reason: str | None = None):
    """Raise WireError for `frame` (a whole frame, length first), naming the likely
    reason; logged at most once per _REFUSAL_LOG_INTERVAL."""
    global _last_refusal_log
    if reason is None:
        version = frame[4] if len(frame) > 4 else None
        if bytes(frame[4:10]) == _FERNET_PREFIX:
            reason = "it is sealed with pysyncobj's Fernet: that node runs an older haqueue"
        elif version in (1, 2):
            reason = f"it is framed with wire version {version}: that node runs an older haqueue"
        else:
            reason = "not a haqueue Raft message"
        reason += f"; every node of a cluster must run the same wire version ({VERSION})"
    now = time.monotonic()
    if now - _last_refusal_log >= _REFUSAL_LOG_INTERVAL:
        _last_refusal_log = now
        log.warning("refusing a Raft connection: %s", reason)
    raise WireError(reason)


class RaftCipher:
    """Seals frames for the links of one process, and opens theirs (pysyncobj's `encryptor`)."""

    def __init__(self, cluster_key: bytes) -> None:
        self._cluster_key = cluster_key
        self.sender_id = os.urandom(16)
        self._encrypt = _sender_key(cluster_key, self.sender_id).encrypt
        self._counter = itertools.count(1)
        self._receive_keys: dict[bytes, AESGCM] = {}

    def seal(self, payload: bytes, binding: bytes) -> bytes:
        """The whole frame of `payload`, bound to the receiver's connection key."""
        counter = next(self._counter)
        head = SEALED_HEAD.pack(SEALED_HEAD.size - 4 + len(payload) + TAG_BYTES, VERSION, self.sender_id, counter)
        return head + self._encrypt(_NONCE.pack(counter), payload, head + binding)

    def open(self, frame, binding: bytes) -> tuple[bytes, int, bytes]:
        """(sender id, counter, payload) of a whole frame (bytes or memoryview), or WireError."""
        if len(frame) < SEALED_HEAD.size + TAG_BYTES or frame[4] != VERSION:
            refuse(frame)
        _, _, sender_id, counter = SEALED_HEAD.unpack_from(frame)
        opener = self._receive_keys.get(sender_id)
        if opener is None:
            opener = _sender_key(self._cluster_key, sender_id)
            if len(self._receive_keys) >= _RECEIVE_KEYS_KEPT:
                self._receive_keys.pop(next(iter(self._receive_keys)))
        try:
            data = opener.decrypt(_NONCE.pack(counter), frame[SEALED_HEAD.size:],
                                  bytes(frame[:SEALED_HEAD.size]) + binding)
        except InvalidTag:
            refuse(frame, "it fails authentication: does that node have another cluster secret?")
        # Remember a sender only once it proved to hold the key.
        self._receive_keys[sender_id] = opener
        return sender_id, counter, data


class Opening:
    """The receiving side of one connection: opens its frames, and refuses one from a
    second sender or whose counter does not rise (a replay within the connection).
    After the first frame, the sender's key is at hand: no lookup per frame."""

    __slots__ = ("_cipher", "_sender", "_counter", "_decrypt")

    def __init__(self, cipher: RaftCipher) -> None:
        self._cipher = cipher
        self._sender = None
        self._counter = 0
        self._decrypt = None

    def open(self, frame, binding: bytes) -> bytes:
        """The payload of a whole frame (bytes or memoryview), or WireError."""
        if len(frame) < SEALED_HEAD.size + TAG_BYTES or frame[4] != VERSION:
            refuse(frame)
        _, _, sender, counter = SEALED_HEAD.unpack_from(frame)
        if sender != self._sender:
            if self._sender is not None:
                refuse(frame, "a second sender on one connection")
            _, counter, data = self._cipher.open(frame, binding)
            self._sender, self._counter = sender, counter
            self._decrypt = self._cipher._receive_keys[sender].decrypt
            return data
        if counter <= self._counter:
            refuse(frame, "a replayed message")
        try:
            data = self._decrypt(_NONCE.pack(counter), frame[SEALED_HEAD.size:],
                                 bytes(frame[:SEALED_HEAD.size]) + binding)
        except InvalidTag:
            refuse(frame, "it fails authentication: does that node have another cluster secret?")
        self._counter = counter
        return data


def plain_frame(payload: bytes) -> bytes:
    """The frame of `payload` without a secret."""
    return PLAIN_HEAD.pack(len(payload) + 1, VERSION) + payload


def open_plain(frame) -> bytes:
    if len(frame) < PLAIN_HEAD.size or frame[4] != VERSION:
        refuse(frame)
    return bytes(frame[PLAIN_HEAD.size:])


def encode(message) -> bytes:
    """A message's payload: raft_codec's bytes, compressed if big."""
    data = raft_codec.dumps(message)
    if len(data) < COMPRESS_FROM_BYTES:
        return data
    return bytes((_COMPRESSED,)) + zlib.compress(data, 1)


def decode(payload: bytes):
    if payload[:1] == b"\xff":
        return raft_codec.loads(zlib.decompress(memoryview(payload)[1:]))
    return raft_codec.loads(payload)


def _get_encryptor(password) -> RaftCipher:
    return RaftCipher(derive_cluster_key(password))


def install(syncobj_module) -> None:
    """Make pysyncobj's `encryptor` a RaftCipher (idempotent).

    The module is passed in by pysyncobj_patches, the one place that imports
    pysyncobj's internals, so this codec imports no pysyncobj."""
    syncobj_module.getEncryptor = _get_encryptor
