"""The hot Raft messages round-trip through their binary form; everything else is pickled.

`loads(dumps(m)) == m` with the same keys is the whole contract (pysyncobj
and transport.py read these dicts); the binary form is only taken for the
exact shapes, and the tests check which form each message took.
"""

from __future__ import annotations

import pickle
import random

import pytest

from haqueue.replication import raft_codec
from haqueue.replication.raft_codec import ACK, APPEND, PICKLED, dumps, loads
from haqueue.replication.transport import APPEND_SEQ


def _append(entries, **extra):
    return {"type": "append_entries", "term": 7, "commit_index": 41, "entries": entries,
            "prevLogIdx": 40, "prevLogTerm": 6, **extra}


def _ack(**extra):
    return {"type": "next_node_idx", "next_node_idx": 42, "reset": False, "success": True, **extra}


HOT = [
    _append([]),  # a heartbeat
    _append([(b"\x01entry", 41, 7)], haq_seq=12),
    _append([(b"", 41, 7), (bytes(range(256)) * 40, 42, 7)], haq_seq=None),
    _ack(), _ack(haq_seq=3), _ack(haq_seq=None),
    _ack(reset=True, success=False, haq_seq=0),
    _append([(b"x", 2**62, -1)], haq_seq=-(2**63)),
]


@pytest.mark.parametrize("message", HOT, ids=range(len(HOT)))
def test_hot_messages_take_the_binary_form_and_come_back_equal(message):
    data = dumps(message)
    assert data[0] in (APPEND, ACK)
    back = loads(data)
    assert back == message and list(back) == sorted(back, key=list(message).index)
    assert all(type(back[key]) is type(message[key]) for key in message)


COLD = [
    {"type": "request_vote", "term": 3, "last_log_index": 9, "last_log_term": 2},
    {"type": "haqueue-keepalive", "term": 3},
    ("random key", {"type": "next_node_idx"}),  # the connection's handshake tuple
    _append([(b"x", 1, 1)], transmission="start"),  # a chunk of a big entry
    _append([(bytearray(b"x"), 1, 1)]),  # not bytes
    _append([[b"x", 1, 1]]),  # not a tuple
    _append([(b"x", True, 1)]),  # a bool is not an index
    _append([(b"x", 1, 1)], haq_seq="12"),
    _append([(b"x", 2**64, 1)]),  # beyond 64 bits
    _ack(reset=0),  # an int, not a bool
    _ack(next_node_idx=None),
    _ack(other=1),
    {k: v for k, v in _ack().items() if k != "reset"},
]


@pytest.mark.parametrize("message", COLD, ids=range(len(COLD)))
def test_other_messages_are_pickled_and_come_back_equal(message):
    data = dumps(message)
    assert data[0] == PICKLED
    assert loads(data) == message


def test_random_hot_messages_round_trip():
    rng = random.Random(24)
    for _ in range(500):
        entries = [(rng.randbytes(rng.randrange(0, 300)), rng.randrange(2**40), rng.randrange(100))
                   for _ in range(rng.randrange(0, 5))]
        extra = rng.choice([{}, {"haq_seq": None}, {"haq_seq": rng.randrange(-5, 2**40)}])
        message = rng.choice([_append(entries, **extra), _ack(reset=rng.random() < 0.5,
                                                               success=rng.random() < 0.5, **extra)])
        assert loads(dumps(message)) == message


@pytest.mark.parametrize("cut", [1, 5, 20])
def test_a_truncated_or_padded_message_is_refused(cut):
    data = dumps(_append([(b"entry bytes", 41, 7)], haq_seq=1))
    with pytest.raises(ValueError):
        loads(data[:-cut])
    with pytest.raises(ValueError):
        loads(data + b"\0" * cut)
    with pytest.raises(ValueError):
        loads(dumps(_ack())[:-cut])


def test_an_unknown_kind_is_refused():
    with pytest.raises(ValueError):
        loads(b"\x07" + pickle.dumps({}))


def test_the_binary_form_is_smaller_than_the_pickle():
    message = _append([(b"x" * 100, 41, 7)], haq_seq=1)
    assert len(dumps(message)) < len(pickle.dumps(message, protocol=2))
    assert raft_codec.SEQ_KEY == APPEND_SEQ
