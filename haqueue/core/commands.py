"""The replicated commands: what a log entry carries, and its wire format.

A log entry is one *batch*: the leader's wall-clock stamp (integer ms) and the
state-changing commands that arrived while the previous entry was in flight
(group commit, docs/design.md "Throughput"). Each command is a plain tuple whose
first element is an opcode below; arguments are ints, strs and bytes only, so
an entry serializes compactly and identically on every node.

Changing the log format, a checklist (in the manner of beanstalkd's WAL notes):
1. Never renumber or reuse an opcode; add new ones at the end.
2. Changing the arguments of an opcode means a new opcode.
3. Bump LOG_FORMAT_VERSION when an old node could not apply a new entry;
   nodes refuse entries of a version they do not know (see decode_batch).
   An entry carries the lowest version that knows all its commands, so a
   cluster being upgraded node by node keeps running until a new command
   is used (an old node then stops with one line instead of diverging).
4. Keep a data directory written by the old version: before the bump, run
   `scripts/write-old-journal COMMIT logvN-snapvM` with the last commit of
   the old version; it lands in tests/testdata/journals/ with what the old
   code said of it, and tests/replication/test_old_journals.py replays it and
   serves it with the current code. That test fails while a format below
   LOG_FORMAT_VERSION (or core/state.py's SNAPSHOT_FORMAT_VERSION) has no
   directory, or an opcode of an older format occurs in none.

A recorded exception to rule 2: RELEASE_ORPHANS gained its `epoch` field in
the repository's third commit (90869b0) without a new opcode. That was before
any release and before every stored data directory (the oldest,
tests/testdata/journals/logv1-snapv1, already writes three fields), and a
command of two fields is applied as epoch 0, which is what the code before it
did; so every journal replays to the same state. It stays so: a new opcode now
would make each leader change write an entry that a node of the previous
version refuses, stopping a rolling upgrade at its first election
(tests/core/test_release_orphans_arity.py).
"""

from __future__ import annotations

import io
import pickle
from operator import itemgetter

LOG_FORMAT_VERSION = 5
# The opcodes each version added start here. Version 3 is shared by two
# features built in parallel: the id service owns 15-19, Gearman 20-39.
FIRST_OPCODE_OF_VERSION = {1: 0, 2: 14, 3: 15, 4: 40, 5: 42}

TICK = 0  # (TICK,) no change of its own: carries a stamp so deadlines fire
PUT = 1  # (PUT, tube, pri, delay_ms, ttr_ms, body)
RESERVE = 2  # (RESERVE, conn, (tube, ...))
RESERVE_JOB = 3  # (RESERVE_JOB, conn, id)
DELETE = 4  # (DELETE, conn, id)
RELEASE = 5  # (RELEASE, conn, id, pri, delay_ms)
BURY = 6  # (BURY, conn, id, pri)
TOUCH = 7  # (TOUCH, conn, id)
KICK = 8  # (KICK, tube, bound)
KICK_JOB = 9  # (KICK_JOB, id)
PAUSE_TUBE = 10  # (PAUSE_TUBE, tube, delay_ms)
DROP_CONN = 11  # (DROP_CONN, conn): the connection closed; its reservations go back
RELEASE_ORPHANS = 12  # (RELEASE_ORPHANS, (conn, ...), epoch): a new leader keeps only these
# connections' reservations; connections of epochs below `epoch` may reserve no more
FORGET_TUBE = 13  # (FORGET_TUBE, tube): no connection refers to it any more
# version 2
ID_RESERVE = 14  # (ID_RESERVE, rule, app, n): the id service hands out n values (core/ids.py)
# version 3 (15-19: the id service)
ID_SET_RULES = 15  # (ID_SET_RULES, (rule record, ...)): the id rules in force (core/ids.py)
# version 3: Gearman (core/gearman.py; conn as for beanstalk connections). RELEASE_ORPHANS
# also drops every Gearman connection but those it keeps: before any of these
# opcodes is logged there is no Gearman state, so old and new nodes agree on it.
GM_SUBMIT = 20  # (GM_SUBMIT, conn, function, unique, data, priority, background, run_at_ms)
GM_GRAB = 21  # (GM_GRAB, conn, (function, ...))
GM_WORK_STATUS = 22  # (GM_WORK_STATUS, conn, handle, numerator, denominator)
GM_FINISH = 23  # (GM_FINISH, conn, handle): WORK_COMPLETE, WORK_FAIL or WORK_EXCEPTION
GM_DROP_CONN = 24  # (GM_DROP_CONN, conn): a Gearman connection closed
GM_MAX_QUEUE = 25  # (GM_MAX_QUEUE, function, size): the admin `maxqueue`; 0 lifts the bound
# version 4: Gearman as gearmand 1.1.20 does it (issue 28)
GM_SUBMIT_KEEP = 40  # (GM_SUBMIT_KEEP, conn, function, unique, data, priority, background, run_at_ms):
# GM_SUBMIT, except that a background submission coalescing with a foreground job makes
# it a background job (kept when its clients leave), and maxqueue bounds the function's
# jobs running or queued, as gearmand counts them (GM_SUBMIT: queued only)
GM_REQUEUE = 41  # (GM_REQUEUE, conn, handle): the worker's CAN_DO_TIMEOUT ran out; the job
# goes back to the end of its queue, as gearmand puts it back
# version 5: bounded entries
DROP_CONN_SOME = 42  # (DROP_CONN_SOME, conn, limit): DROP_CONN of at most `limit` of the closed
# connection's reservations, so that one entry's apply stays short; the rest stay reserved by
# it for the next. The server sends it only for a connection holding more than one entry's
# worth (server/beanstalk/drops.py), so a cluster being upgraded meets it rarely.

NAMES = {
    TICK: "tick",
    PUT: "put",
    RESERVE: "reserve",
    RESERVE_JOB: "reserve-job",
    DELETE: "delete",
    RELEASE: "release",
    BURY: "bury",
    TOUCH: "touch",
    KICK: "kick",
    KICK_JOB: "kick-job",
    PAUSE_TUBE: "pause-tube",
    DROP_CONN: "drop-conn",
    RELEASE_ORPHANS: "release-orphans",
    FORGET_TUBE: "forget-tube",
    ID_RESERVE: "id-reserve",
    ID_SET_RULES: "id-set-rules",
    GM_SUBMIT: "gearman-submit",
    GM_GRAB: "gearman-grab",
    GM_WORK_STATUS: "gearman-work-status",
    GM_FINISH: "gearman-finish",
    GM_DROP_CONN: "gearman-drop-conn",
    GM_MAX_QUEUE: "gearman-max-queue",
    GM_SUBMIT_KEEP: "gearman-submit-keep",
    GM_REQUEUE: "gearman-requeue",
    DROP_CONN_SOME: "drop-conn-some",
}


class LogFormatError(ValueError):
    """An entry this code cannot apply (another version wrote it)."""


def encode_batch(stamp_ms: int, commands: list[tuple]) -> bytes:
    """Serialize one log entry. Pickle of primitives only: compact and fast in C."""
    # Opcodes only grow with versions, so the highest opcode decides; a table, not a
    # loop over the versions: this runs once per entry on the leader.
    top = max(map(_opcode, commands)) if commands else 0
    version = _VERSION_OF[top] if type(top) is int and 0 <= top < len(_VERSION_OF) else entry_version(top)
    data = pickle.dumps((version, stamp_ms, commands), protocol=5)
    if len(data) <= _MEMO_BYTES and _MEMO_OPCODES.issuperset(map(_opcode, commands)):
        global _memo
        _memo = [*_memo[1 - _MEMO_ENTRIES:], (data, stamp_ms, commands)]
    return data


def entry_version(opcode: int) -> int:
    """The lowest log format version that knows `opcode`."""
    for version in range(LOG_FORMAT_VERSION, 1, -1):
        if opcode >= FIRST_OPCODE_OF_VERSION[version]:
            return version
    return 1


_opcode = itemgetter(0)
_VERSION_OF = tuple(entry_version(opcode) for opcode in range(max(NAMES) + 1))

# Decode once. The leader encodes each entry and then decodes the same bytes to apply it
# (its Raft log holds bytes only), a tenth of a lone node's work per put (profiled). So
# the last entries encoded here are remembered with their commands, and decode_batch
# hands back those commands for bytes equal to them: the values unpickling would
# make, as unpickling a pickle of exact ints, strs, bytes, tuples and lists gives them
# back (of the same types). Only entries of the commands below, which the beanstalkd
# session builds of such values (parsed ints, ASCII tube names, bodies, a fresh tuple
# of watched tubes), and none of which the state keeps a mutable part of; the rest
# (id rules, Gearman) are always decoded. Entries are compared, never trusted by
# identity, so a follower sharing this process (the tests' ticked clusters) gets the
# same values either way, and bytes that differ in anything are decoded. A list
# replaced whole, not changed in place: decode_batch may run on another thread.
_MEMO_ENTRIES = 16  # more than the batcher has in flight (batcher.MAX_IN_FLIGHT)
_MEMO_BYTES = 256 << 10  # at most 4 MiB held, for entries never applied (leadership lost)
_MEMO_OPCODES = frozenset([TICK, PUT, RESERVE, RESERVE_JOB, DELETE, RELEASE, BURY, TOUCH, KICK, KICK_JOB,
                           PAUSE_TUBE, DROP_CONN, FORGET_TUBE])
_memo: list[tuple[bytes, int, list[tuple]]] = []


class _PlainValues(pickle.Unpickler):
    """Unpickles ints, strs, bytes, tuples and lists, never a class or a
    function: an entry that names one is foreign or forged, and unpickling it
    could run code on every node."""

    def find_class(self, module: str, name: str):
        raise pickle.UnpicklingError(f"log entries hold plain values only, not {module}.{name}")


def forget_encoded() -> None:
    """Forget the entries encoded so far: the next decode_batch of any of them unpickles it."""
    global _memo
    _memo = []


def decode_batch(data: bytes) -> tuple[int, list[tuple]]:
    global _memo
    memo = _memo
    if memo:
        for index, (known, stamp_ms, commands) in enumerate(memo):
            if known == data:
                _memo = memo[index + 1:]  # entries apply in order: the ones before it never will here
                return stamp_ms, commands
    try:
        version, stamp_ms, commands = _PlainValues(io.BytesIO(data)).load()
    except Exception as exc:  # a corrupt or foreign entry: refuse loudly
        raise LogFormatError(f"undecodable log entry: {exc}") from None
    if type(version) is not int or not 1 <= version <= LOG_FORMAT_VERSION:
        raise LogFormatError(f"log format version {version}, this node speaks {LOG_FORMAT_VERSION}")
    return stamp_ms, commands


# Pickle writes the int 14 as BININT1 14, these two bytes, wherever ID_RESERVE
# opens a command; a frame header can come between opcodes, never inside one.
ID_RESERVE_MARK = pickle.dumps(ID_RESERVE, protocol=5)[-3:-1]
assert ID_RESERVE_MARK == b"K\x0e"


def reserves_ids(entry: bytes) -> bool:
    """Does this entry hold an ID_RESERVE? Its values must be on disk before any is
    handed out, whatever the fsync policy (docs/id-service.md, "Durability").

    A byte search rules out nearly every other entry; the few it cannot (a 14
    elsewhere, a body holding those bytes) are decoded. An entry that does not
    decode reserves nothing here: applying it stops the node anyway."""
    if ID_RESERVE_MARK not in entry:
        return False
    try:
        _stamp, commands = decode_batch(entry)
    except LogFormatError:
        return False
    return any(type(command) is tuple and command and command[0] == ID_RESERVE for command in commands)
