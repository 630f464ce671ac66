"""Everything haqueue changes inside pysyncobj, installed in one place, for one version.

haqueue relies on pysyncobj internals that no release promises to keep
(name-mangled attributes, module globals it looks up at run time, its
journal's shape), each listed with its reason in docs/pysyncobj.md.
So the version is pinned, and checked here, when pysyncobj is first imported
through this module: another version stops the node with one line instead of
misbehaving subtly.

What is installed (docs/pysyncobj.md D18-D23 and D25 are these, in this order):
1. `socket.inet_ntop` put back: pysyncobj 0.3.17 replaces it with a
   Windows-only function on every platform when its tcp_connection module is
   imported (pysyncobj/win_inet_pton.py); pyroute2 and anything else in the
   process that decodes an address would fail afterwards.
2. `createJournal`: a `JournalSpec` path builds haqueue's DurableJournal
   (journal.py), which fsyncs; any other argument reaches pysyncobj's own.
3. The wire (wire.py): AES-GCM sealing instead of Fernet, small messages
   left uncompressed, and the hot messages in binary framing (raft_codec.py),
   through haqueue's own links (peer_link.py, D33) in place of TcpConnection.
4. One clock: pysyncobj reads CLOCK_MONOTONIC_RAW through a `monotonicTime`
   name in each of its modules, while raft_node read time.monotonic
   (CLOCK_MONOTONIC) to set pysyncobj's election deadline and to time its
   peers' messages: two clocks, compared. Both now read `monotonic()` below
   (time.monotonic), so every deadline compares readings of one clock. A test replaces
   its source (`use_clock`) to run a cluster in virtual time, ticked by hand
   (tests/support/ticked.py).
5. `Node.__hash__`, `__eq__` and `__ne__` read the node's id directly (they went
   through a property), and `__eq__` answers an identical node at once.
6. `createPoller`: every node polls its sockets through on_loop.EpollPoller,
   whose one descriptor the server's event loop watches, so that the node
   ticks on the loop (on_loop.py) rather than in a thread of its own.
7. The serializer's `atomicReplace` fsyncs the file before the rename and the
   directory after it: a snapshot received from the leader was renamed over
   this node's own while its bytes were still only in the page cache, so a
   power loss could leave an empty snapshot in its place (and the node could
   not start again).
The behaviour changed by subclassing (SyncObj, TCPTransport) lives in
raft_node.py and transport.py; nothing outside haqueue/replication imports pysyncobj.
"""

from __future__ import annotations

import socket as _socket
import time as _time
from contextlib import contextmanager

PINNED_VERSION = "0.3.17"

_real_inet_ntop = _socket.inet_ntop
import pysyncobj  # noqa: E402  (the import that replaces socket.inet_ntop)
import pysyncobj.syncobj as _syncobj_module  # noqa: E402
import pysyncobj.tcp_connection  # noqa: E402,F401
from pysyncobj.version import VERSION as _VERSION  # noqa: E402

_socket.inet_ntop = _real_inet_ntop

if _VERSION != PINNED_VERSION:
    raise ImportError(
        f"haqueue needs pysyncobj {PINNED_VERSION} exactly (it patches that version's internals); "
        f"found {_VERSION}: pip install 'pysyncobj=={PINNED_VERSION}'"
    )

SyncObjException = pysyncobj.SyncObjException


class JournalSpec(str):
    """A journal path that also says how to fsync it (see createJournal above)."""

    def __new__(cls, path: str, policy) -> "JournalSpec":
        spec = super().__new__(cls, path)
        spec.policy = policy
        spec.journal = None  # the DurableJournal, once pysyncobj has built it
        return spec


_clock = _time.monotonic
_clocked_modules: list = []  # pysyncobj's modules, each reading the clock as `monotonicTime`


def monotonic() -> float:
    """Seconds on the clock pysyncobj and raft_node share (docs/pysyncobj.md D21)."""
    return _clock()


def _point_clock(source) -> None:
    # pysyncobj reads its clock dozens of times per message: its modules call the
    # source itself, not monotonic() above, which would be a second call each time.
    for module in _clocked_modules:
        module.monotonicTime = source


@contextmanager
def use_clock(source):
    """Read `source()` instead of the monotonic clock until the block ends (tests only:
    a cluster ticked by hand in virtual time)."""
    global _clock
    previous, _clock = _clock, source
    _point_clock(source)
    try:
        yield
    finally:
        _clock = previous
        _point_clock(previous)


def _node_hash(node) -> int:
    # pysyncobj's Node hashes through its `id` property: two Python calls per
    # lookup of a dict keyed by nodes, a hundred lookups per committed entry.
    return hash(node._id)


def _node_eq(node, other) -> bool:
    # pysyncobj's compares through the `id` property, both sides. A dict finds an
    # identical key without calling it; equal-but-distinct nodes still meet (a node
    # named by an id in a membership request, a group read back from a snapshot).
    return node is other or (isinstance(other, _Node) and node._id == other._id)


def _node_ne(node, other) -> bool:
    # pysyncobj's goes through __eq__ (for Python 2): a second call per `!=`.
    return node is not other and not (isinstance(other, _Node) and node._id == other._id)


def _durable_replace(source: str, target: str) -> bool:
    """pysyncobj's atomicReplace (os.rename on Linux), made durable (D25)."""
    import os

    fd = os.open(source, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    os.rename(source, target)
    directory = os.open(os.path.dirname(os.path.abspath(target)) or ".", os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)
    return True


_installed = False
_Node = None  # pysyncobj.node.Node, once installed


def install() -> None:
    """Install the patches (idempotent); raft_node.py calls it when it loads."""
    global _installed
    if _installed:
        return
    from haqueue.replication import wire
    from haqueue.replication.journal import DurableJournal

    original_create_journal = _syncobj_module.createJournal

    def create_journal(journal_file=None):
        if isinstance(journal_file, JournalSpec):
            journal_file.journal = DurableJournal(str(journal_file), journal_file.policy)
            return journal_file.journal
        return original_create_journal(journal_file)

    _syncobj_module.createJournal = create_journal
    from pysyncobj.poller import POLL_EVENT_TYPE

    from haqueue.replication import on_loop
    from haqueue.replication.on_loop import EpollPoller

    assert (on_loop._READ, on_loop._WRITE, on_loop._ERROR) == (
        POLL_EVENT_TYPE.READ, POLL_EVENT_TYPE.WRITE, POLL_EVENT_TYPE.ERROR)
    _syncobj_module.createPoller = lambda _poller_type: EpollPoller()
    import pysyncobj.dns_resolver
    import pysyncobj.tcp_server
    import pysyncobj.transport

    from haqueue.replication import peer_link

    _clocked_modules[:] = [_syncobj_module, pysyncobj.tcp_connection, pysyncobj.transport, pysyncobj.dns_resolver,
                           peer_link]
    _point_clock(_clock)
    import pysyncobj.node

    global _Node
    _Node = pysyncobj.node.Node
    _Node.__hash__ = _node_hash
    _Node.__eq__ = _node_eq
    _Node.__ne__ = _node_ne
    wire.install(_syncobj_module)
    peer_link.install(pysyncobj.transport, pysyncobj.tcp_server)
    import pysyncobj.serializer

    pysyncobj.serializer.atomicReplace = _durable_replace
    _installed = True
