"""Leader stickiness for real votes (Raft thesis 4.2.3; docs/pysyncobj.md D9, D24): no lease overlaps a newer leader.

A leader answers reads and hands out reservations while its read lease holds
(docs/pysyncobj.md D12): a majority acknowledged appends it sent within
`hear_window`, and each of those followers refuses to help elect anyone
else for `election_min` after hearing it. Pre-votes always obeyed that rule;
a real `request_vote` did not (pysyncobj grants it, and adopts its term, with
no such check), so a candidate whose pre-vote was granted in a moment of
silence could win the vote later, after the silence ended and the leader's
lease was renewed. Issue 23, A1.

The nodes are real (pysyncobj, loopback sockets), ticked by hand in virtual
time (tests/support/ticked.py); `Links` cuts, heals and holds messages where
each node receives them.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.ticked import ticked_cluster


class Links:
    """The network between ticked nodes, seen at each receiver: pairs cut (both ways) or held."""

    def __init__(self, nodes) -> None:
        self.cut: set[tuple[str, str]] = set()  # (sender, receiver) addresses
        self.hold = None  # (sender, receiver, message) -> True to hold it back instead of delivering
        self.held: list = []  # (deliver, sender, message)
        for node in nodes:
            self.watch(node)

    def watch(self, node) -> None:
        """Put `node`'s receiving end under these links (a node that restarted needs it anew)."""
        transport = node.transport
        deliver = transport._onMessageReceivedCallback
        receiver = node.selfNode.address

        def filtered(sender, message):
            if (sender.address, receiver) in self.cut:
                return
            if self.hold is not None and self.hold(sender.address, receiver, message):
                self.held.append((deliver, sender, message))
                return
            deliver(sender, message)

        transport._onMessageReceivedCallback = filtered

    def sever(self, a, b) -> None:
        a, b = a.selfNode.address, b.selfNode.address
        self.cut |= {(a, b), (b, a)}

    def mend(self, a, b) -> None:
        a, b = a.selfNode.address, b.selfNode.address
        self.cut -= {(a, b), (b, a)}

    def release(self) -> None:
        """Deliver what was held, in order (as the receiver's tick would read it)."""
        held, self.held = self.held, []
        for deliver, sender, message in held:
            deliver(sender, message)


def no_lease_overlaps_another_leader(cluster) -> bool:
    """While a node's read lease holds, no leader of a newer term exists (nor a
    second lease: its holder would be such a leader). A deposed leader that
    has not heard of it yet may still think it leads; it cannot hold a lease."""
    for holder in cluster.nodes:
        if holder.read_lease_valid():
            if any(n._isLeader() and n.raftCurrentTerm >= holder.raftCurrentTerm
                   for n in cluster.nodes if n is not holder):
                return False
    return True


def _c_wins_b_over_in_silence(cluster, links, a, b, c) -> None:
    """A leads; A-C cut; A-B silent until B grants C's pre-vote; C's request_vote
    to B held back; A-B heard again, and B acknowledges A's append (A's lease renewed)."""
    timing, term = cluster.timing, a.raftCurrentTerm
    cluster.run_until(a.read_lease_valid, seconds=1, what="A's lease")
    # B must not campaign on its own timer: the test wants C's pre-vote
    # granted by B, not a race between them (pysyncobj asks this before campaigning).
    b._SyncObj__connectedToAnyone = lambda: False
    links.sever(a, c)
    links.hold = lambda sender, receiver, m: (m.get("type") == "request_vote" and receiver == b.selfNode.address)
    cluster.run(seconds=timing.election_max)  # C asks for pre-votes; B, hearing A, refuses
    assert c.raftCurrentTerm == term
    links.sever(a, b)  # A-B drops: B stops hearing A...
    cluster.run_until(lambda: links.held, seconds=timing.election_min + 2 * timing.election_max,
                      what="C's request_vote after B granted its pre-vote")
    assert c.raftCurrentTerm == term + 1
    links.mend(a, b)  # ...and comes back before A's leader fallback
    assert a._isLeader()
    cluster.run_until(a.read_lease_valid, seconds=4 * timing.heartbeat, what="A's lease renewed by B")
    links.hold = None


def test_a_vote_asked_after_the_leader_was_heard_again_is_ignored_and_no_lease_overlaps_a_newer_leader():
    with ticked_cluster() as cluster:
        a = cluster.leader()
        b, c = cluster.followers()
        term, timing = a.raftCurrentTerm, cluster.timing
        links = Links(cluster.nodes)
        _c_wins_b_over_in_silence(cluster, links, a, b, c)
        links.release()  # C's request_vote reaches B at last
        cluster.run_while(lambda: no_lease_overlaps_another_leader(cluster), seconds=2 * timing.election_max,
                          what="no lease overlapping a newer leader")
        assert a._isLeader() and b.raftCurrentTerm == term, "B adopted C's term or A was deposed"
        # The cut heals: C, whose term outran A's, tells A, which steps down,
        # and one election brings everyone to one leader and one term.
        del b._SyncObj__connectedToAnyone
        links.mend(a, c)
        cluster.run_while(lambda: no_lease_overlaps_another_leader(cluster), seconds=3 * timing.election_max,
                          what="no lease overlapping a newer leader")
        cluster.run_until(cluster.settled, seconds=5, what="one leader of one term again")
        assert cluster.leader().raftCurrentTerm > term + 1


def test_a_restarted_node_ignores_votes_as_if_it_had_just_heard_the_leader():
    # B acknowledged A's append, then restarted: it remembers nothing of A, but
    # A's lease counts on B's promise. C's vote request reaching the new B
    # straight away must be ignored, as the old B would have ignored it.
    with ticked_cluster() as cluster:
        a = cluster.leader()
        b, c = cluster.followers()
        links = Links(cluster.nodes)
        _c_wins_b_over_in_silence(cluster, links, a, b, c)
        (_, sender, request), = links.held
        b = cluster.restart(b)
        assert a.read_lease_valid()
        # C's request_vote, read by the new B (through its own view of C).
        c_seen_by_b = next(n for n in b._SyncObj__otherNodes if n.address == sender.address)
        b.transport._onMessageReceivedCallback(c_seen_by_b, request)
        assert (b.raftCurrentTerm, b._SyncObj__votedForNodeId) == (0, None), "the new B took C's term or voted"


# ---------------------------------------------------------------- a property over random networks
def _phases(count: int, max_paused: int):
    pairs = [(i, j) for i in range(count) for j in range(count) if i != j]  # directed links between the nodes
    return st.lists(
        st.fixed_dictionaries({
            "cut": st.sets(st.sampled_from(pairs)),  # dropped
            "late": st.sets(st.sampled_from(pairs)),  # held back...
            "late_kind": st.sampled_from([None, "request_vote"]),  # ...every message, or only vote requests
            "release": st.booleans(),  # ...and delivered, in order, at the end of this phase or a later one
            "paused": st.sets(st.integers(0, count - 1), max_size=max_paused),  # nodes whose ticks are stuck
            "steps": st.integers(4, 120),  # rounds of STEP (0.005 s): 0.02 to 0.6 s
        }),
        min_size=1, max_size=6)


def _holds(late: set, kind):
    def hold(sender, receiver, message):
        return (sender, receiver) in late and (kind is None or message.get("type") == kind)
    return hold


def _no_overlap_through(schedule, count: int) -> None:
    with ticked_cluster(count=count) as cluster:
        nodes = cluster.nodes
        address = [n.selfNode.address for n in nodes]
        links = Links(nodes)
        for phase in schedule:
            links.cut = {(address[i], address[j]) for i, j in phase["cut"]}
            links.hold = _holds({(address[i], address[j]) for i, j in phase["late"]}, phase["late_kind"])
            cluster.paused = {nodes[i] for i in phase["paused"]}
            for _ in range(phase["steps"]):
                cluster.round()
                assert no_lease_overlaps_another_leader(cluster), cluster.describe()
            links.hold = None
            if phase["release"]:
                links.release()
                assert no_lease_overlaps_another_leader(cluster), cluster.describe()
        links.release()
        links.cut, cluster.paused = set(), set()
        cluster.run_while(lambda: no_lease_overlaps_another_leader(cluster), seconds=1.0)
        # And the cluster comes back together: one leader of one term.
        cluster.run_until(cluster.settled, seconds=10, what="one leader of one term after the network healed")


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_phases(3, max_paused=1))
def test_no_lease_overlaps_a_newer_leader_whatever_the_network_does(schedule):
    _no_overlap_through(schedule, 3)


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_phases(5, max_paused=2))
def test_among_five_no_lease_overlaps_a_newer_leader_whatever_the_network_does(schedule):
    # Five nodes: a lease needs two followers' acknowledgements, and two nodes may be stuck at once.
    _no_overlap_through(schedule, 5)
