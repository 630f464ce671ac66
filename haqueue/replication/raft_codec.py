"""The hot Raft messages in fixed binary framing; every other message pickled.

A link (peer_link.py) turns each message into bytes with `dumps` (then packs
and seals them: wire.py), and back with `loads`. Two kinds make up almost
all of a busy node's traffic: the leader's `append_entries` (every entry, and
every heartbeat) and the follower's `next_node_idx` acknowledgement. Pickling
a dict writes and reads back its keys as strings every time, and the receiver
builds the dict through the unpickler's generic dispatch; these two are
instead packed as a few fixed-size integers (struct), each entry as its index,
term and length before its bytes. Measured in this process (cProfile of a
follower under open-loop load, docs/benchmarks.md "CPU per replicated entry"),
pickle's loads and dumps were 8-16 % of a follower's interpreter time.

Rules:
- A message takes the binary form only if it is exactly one of the two shapes
  (the same keys, each value of the exact type: ints, bools, entries of
  (bytes, int, int), and haqueue's `haq_seq` absent, None or an int), so that
  `loads(dumps(m)) == m` with the same keys. Anything else (elections,
  pre-votes, keepalives, a snapshot's chunks, the connection's handshake
  tuple) is pickled (protocol 5; pysyncobj used 2), behind its own kind byte.
- No pysyncobj import.
- The first byte says which: PICKLED, APPEND or ACK. wire.encode relies on
  it never being 0xFF (its mark for a compressed message).
- Integers are signed 64-bit little-endian; a value outside that range takes
  the pickled form.
"""

from __future__ import annotations

import pickle
import struct

PICKLED, APPEND, ACK = 0, 1, 2

SEQ_KEY = "haq_seq"  # transport.APPEND_SEQ (not imported: transport imports pysyncobj's transport)
_APPEND_KEYS = frozenset(("type", "term", "commit_index", "entries", "prevLogIdx", "prevLogTerm"))
_ACK_KEYS = frozenset(("type", "next_node_idx", "reset", "success"))

# haq_seq: absent, None, or an int that follows
_SEQ_ABSENT, _SEQ_NONE, _SEQ_INT = 0, 1, 2
_APPEND_HEAD = struct.Struct("<BBqqqqqI")  # kind, seq form, term, commit, prevLogIdx, prevLogTerm, seq, count
_ENTRY_HEAD = struct.Struct("<qqI")  # index, term, length of the data that follows
_ACK = struct.Struct("<BBBqq")  # kind, flags (reset 1, success 2), seq form, next_node_idx, seq


def _seq_form(message: dict, keys: int):
    """(form, value) of haq_seq, or None if the message has other keys than `keys` + 1."""
    if len(message) == keys:
        return _SEQ_ABSENT, 0
    if len(message) != keys + 1 or SEQ_KEY not in message:
        return None
    seq = message[SEQ_KEY]
    if seq is None:
        return _SEQ_NONE, 0
    if type(seq) is int:
        return _SEQ_INT, seq
    return None


def _pack_append(message: dict) -> bytes | None:
    seq = _seq_form(message, 6)
    if seq is None or not _APPEND_KEYS.issubset(message):
        return None
    entries = message["entries"]
    term, commit = message["term"], message["commit_index"]
    prev_index, prev_term = message["prevLogIdx"], message["prevLogTerm"]
    if type(entries) is not list or not (type(term) is int and type(commit) is int
                                         and type(prev_index) is int and type(prev_term) is int):
        return None
    parts = [_APPEND_HEAD.pack(APPEND, seq[0], term, commit, prev_index, prev_term, seq[1], len(entries))]
    entry_head = _ENTRY_HEAD.pack
    for entry in entries:
        if type(entry) is not tuple or len(entry) != 3:
            return None
        data, index, entry_term = entry
        if type(data) is not bytes or type(index) is not int or type(entry_term) is not int:
            return None
        parts.append(entry_head(index, entry_term, len(data)))
        parts.append(data)
    return b"".join(parts)


def _pack_ack(message: dict) -> bytes | None:
    seq = _seq_form(message, 4)
    if seq is None or not _ACK_KEYS.issubset(message):
        return None
    next_index, reset, success = message["next_node_idx"], message["reset"], message["success"]
    if type(next_index) is not int or type(reset) is not bool or type(success) is not bool:
        return None
    return _ACK.pack(ACK, reset | success << 1, seq[0], next_index, seq[1])


_PACKERS = {"append_entries": _pack_append, "next_node_idx": _pack_ack}


def dumps(message) -> bytes:
    """A message's bytes."""
    if type(message) is dict:
        packer = _PACKERS.get(message.get("type"))
        if packer is not None:
            try:
                packed = packer(message)
            except struct.error:  # an int beyond 64 bits
                packed = None
            if packed is not None:
                return packed
    return b"\x00" + pickle.dumps(message, protocol=5)


def _with_seq(message: dict, form: int, seq: int) -> dict:
    if form == _SEQ_INT:
        message[SEQ_KEY] = seq
    elif form == _SEQ_NONE:
        message[SEQ_KEY] = None
    elif form != _SEQ_ABSENT:
        raise ValueError(f"haq_seq form {form}")
    return message


def _load_append(data: bytes) -> dict:
    _, form, term, commit, prev_index, prev_term, seq, count = _APPEND_HEAD.unpack_from(data)
    offset = _APPEND_HEAD.size
    entry_head = _ENTRY_HEAD.unpack_from
    head_size = _ENTRY_HEAD.size
    entries = []
    for _ in range(count):
        index, entry_term, length = entry_head(data, offset)
        offset += head_size
        end = offset + length
        if end > len(data):
            raise ValueError("append_entries: an entry runs past the message")
        entries.append((data[offset:end], index, entry_term))
        offset = end
    if offset != len(data):
        raise ValueError("append_entries: bytes after the last entry")
    return _with_seq({"type": "append_entries", "term": term, "commit_index": commit, "entries": entries,
                      "prevLogIdx": prev_index, "prevLogTerm": prev_term}, form, seq)


def _load_ack(data: bytes) -> dict:
    if len(data) != _ACK.size:
        raise ValueError("next_node_idx: wrong length")
    _, flags, form, next_index, seq = _ACK.unpack(data)
    if flags > 3:
        raise ValueError("next_node_idx: unknown flags")
    return _with_seq({"type": "next_node_idx", "next_node_idx": next_index,
                      "reset": bool(flags & 1), "success": bool(flags & 2)}, form, seq)


def loads(data: bytes):
    """The message of `data` (a failure drops the link)."""
    kind = data[0] if data else None
    try:
        if kind == APPEND:
            return _load_append(data)
        if kind == ACK:
            return _load_ack(data)
    except struct.error as exc:  # cut short
        raise ValueError(f"Raft message of kind {kind}: {exc}") from None
    if kind == PICKLED:
        return pickle.loads(memoryview(data)[1:])
    raise ValueError(f"unknown Raft message kind {kind}")
