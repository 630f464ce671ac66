"""Membership changes in virtual time (tests/support/ticked.py): add, remove, hand-off,
and a change cut short by the leader's death (replication/membership.py)."""

from __future__ import annotations

import pytest

from haqueue.core.commands import encode_batch
from haqueue.config.fsync_policy import NEVER
from haqueue.replication.membership import ADD, REMOVE
from haqueue.replication.replica import MembershipRefused
from haqueue.replication.raft_node import ReplicatedQueue
from tests.support.ticked import free_ports, raft_node, ticked_cluster


def _entry(n: int) -> bytes:
    return encode_batch(1_000 + n, [])


def _join(cluster, secret: str = "s") -> ReplicatedQueue:
    """A new, empty node that knows the current members, in the rounds from now on."""
    address = f"127.0.0.1:{free_ports(1)[0]}"
    partners = [n.selfNode.address for n in cluster.nodes]
    node = raft_node(address, partners, data_dir=None, policy=NEVER, secret=secret, timing=cluster.timing)
    node.transport.tryGetReady()
    cluster.nodes.append(node)
    return node


def _change(cluster, leader, op, address, seconds=2.0):
    outcome = []
    leader.change(op, address, outcome.append)
    cluster.run_until(lambda: outcome, seconds=seconds, what=f"{op} {address} committed")
    return outcome[0]


class Terms:
    """Every (term, leader) seen after each round: one leader per term, ever."""

    def __init__(self, cluster) -> None:
        self.cluster = cluster
        self.seen: dict[int, set] = {}

    def __call__(self) -> bool:
        for node in self.cluster.nodes:
            if node._isLeader():
                self.seen.setdefault(node.raftCurrentTerm, set()).add(node.selfNode.address)
        return all(len(leaders) == 1 for leaders in self.seen.values())


def test_added_node_catches_up_and_counts_in_the_majority():
    with ticked_cluster() as cluster:
        leader = cluster.leader()
        for n in range(20):
            assert cluster.commit(leader, _entry(n))[1] == 0
        new = _join(cluster)
        assert _change(cluster, leader, ADD, new.selfNode.address) is None
        assert new.selfNode.address in leader.members() and len(leader.members()) == 4
        assert leader.peers_for_majority() == 2  # 3 of 4
        cluster.run_until(lambda: new.raftLastApplied >= leader.raftCommitIndex, seconds=2.0,
                          what="the new node caught up")
        assert new.state.digest() == leader.state.digest()
        assert sorted(new.members()) == sorted(leader.members())


def test_removed_node_no_longer_counts_and_cannot_be_removed_twice():
    with ticked_cluster() as cluster:
        leader = cluster.leader()
        cluster.commit(leader, _entry(0))
        gone = cluster.followers()[0]
        assert _change(cluster, leader, REMOVE, gone.selfNode.address) is None
        assert gone.selfNode.address not in leader.members()
        assert leader.peers_for_majority() == 1  # 2 of 2
        with pytest.raises(MembershipRefused, match="not a member"):
            leader.change(REMOVE, gone.selfNode.address, lambda error: None)
        cluster.paused.add(gone)
        assert cluster.commit(leader, _entry(1))[1] == 0  # the two left commit alone


def test_one_change_at_a_time_and_never_the_leader_itself():
    with ticked_cluster() as cluster:
        leader = cluster.leader()
        with pytest.raises(MembershipRefused, match="first entry"):
            leader.change(ADD, "127.0.0.1:1", lambda error: None)
        cluster.commit(leader, _entry(0))
        with pytest.raises(MembershipRefused, match="cannot remove itself"):
            leader.change(REMOVE, leader.selfNode.address, lambda error: None)
        leader.change(ADD, "127.0.0.1:1", lambda error: None)
        with pytest.raises(MembershipRefused, match="not committed yet"):
            leader.change(ADD, "127.0.0.1:2", lambda error: None)


def test_hand_off_elects_an_up_to_date_follower_and_the_old_leader_stays_out():
    with ticked_cluster() as cluster:
        leader = cluster.leader()
        for n in range(5):
            cluster.commit(leader, _entry(n))
        cluster.run_until(cluster.caught_up, seconds=1.0, what="followers caught up")
        term = leader.raftCurrentTerm
        terms = Terms(cluster)
        handed: list = []
        leader.hand_off(lambda target, error: handed.append((target, error)))
        cluster.run_until(lambda: handed, seconds=1.0, what="the hand-off")
        target, error = handed[0]
        assert error is None and not leader._isLeader()
        cluster.run_until(lambda: terms() and cluster.settled() and not leader._isLeader(), seconds=3.0,
                          what="a new leader after the hand-off")
        new = cluster.leader()
        assert new is not leader and new.raftCurrentTerm > term
        assert new.selfNode.address == target
        assert terms()


@pytest.mark.parametrize("rounds", [0, 1, 2], ids=["before it leaves", "as it leaves", "once acknowledged"])
@pytest.mark.parametrize("how", ["killed", "stuck"])
def test_change_cut_short_by_a_leader_kill_never_gives_two_leaders_of_one_term(how, rounds):
    with ticked_cluster() as cluster:
        leader = cluster.leader()
        cluster.commit(leader, _entry(0))
        new = _join(cluster)
        terms = Terms(cluster)
        leader.change(ADD, new.selfNode.address, lambda error: None)
        for _ in range(rounds):  # how far the change got before the leader went
            cluster.round()
        if how == "killed":
            leader.stop()  # its sockets close
        cluster.paused.add(leader)
        cluster.run_while(terms, seconds=3.0, what="one leader per term")
        rest = [n for n in cluster.nodes if n is not leader]
        leaders = [n for n in rest if n._isLeader()]
        assert len(leaders) == 1
        survivor = leaders[0]
        # Whatever happened to the change, every live node agrees on the group and commits.
        assert cluster.commit(survivor, _entry(1), seconds=3.0)[1] == 0
        cluster.run_until(lambda: all(n.members() == survivor.members() for n in rest if n is not new
                                      or new.selfNode.address in survivor.members()),
                          seconds=2.0, what="the live members agree on the group")
        if how == "stuck":  # its loop runs again: still one leader per term
            cluster.paused.discard(leader)
            cluster.run_while(terms, seconds=3.0, what="one leader per term after the old leader returns")


def _restart_with_file(cluster, node, partners, data_dir) -> ReplicatedQueue:
    """Stop `node` and start it again on its data directory, with `partners` as its file says."""
    node.stop()
    fresh = raft_node(node.selfNode.address, partners, data_dir=data_dir, policy=NEVER, secret="s",
                      timing=cluster.timing)
    fresh.transport.tryGetReady()
    cluster.nodes[cluster.nodes.index(node)] = fresh
    return fresh


@pytest.mark.parametrize("snapshot", [False, True], ids=["from the journal", "from the snapshot"])
def test_a_restarted_node_takes_its_group_from_its_log_not_its_old_file(tmp_path, snapshot):
    with ticked_cluster(data_root=str(tmp_path), journal_limit=1 << 30) as cluster:
        leader = cluster.leader()
        old_file = {n.selfNode.address for n in cluster.nodes}
        cluster.commit(leader, _entry(0))
        new = _join(cluster)
        assert _change(cluster, leader, ADD, new.selfNode.address) is None
        follower = next(n for n in cluster.followers() if n is not new)
        cluster.run_until(lambda: follower.raftLastApplied >= leader.raftCommitIndex, seconds=1.0,
                          what="the follower applied the change")
        if snapshot:
            for n in range(3):
                cluster.commit(leader, _entry(n + 1))
            follower.forceLogCompaction()
            cluster.until_snapshots(follower, 1)
            cluster.round()  # pysyncobj drops the journal prefix the snapshot covers
        data_dir = str(tmp_path / f"node{[n.selfNode.address for n in cluster.nodes].index(follower.selfNode.address)}")
        partners = sorted(old_file - {follower.selfNode.address})  # the file before add-node
        fresh = _restart_with_file(cluster, follower, partners, data_dir)
        if snapshot:  # the change is folded into the snapshot, which pysyncobj loads at the first tick
            assert len(fresh.members()) == 3
        else:  # read from the journal before the node says a word
            assert len(fresh.members()) == 4
        cluster.round()
        assert fresh.members() == sorted(old_file | {new.selfNode.address})
        assert fresh.peers_for_majority() == 2


def test_a_snapshot_holds_the_group_of_its_last_entry_not_a_change_appended_after_it():
    with ticked_cluster() as cluster:
        leader = cluster.leader()
        cluster.commit(leader, _entry(0))
        last = leader.raftLastApplied
        raft_data = (("cmd", last, leader.raftCurrentTerm), ("cmd", last - 1, leader.raftCurrentTerm), set())
        leader.change(ADD, "127.0.0.1:1", lambda error: None)
        cluster.round()  # appended (and in force on the leader), not committed: 127.0.0.1:1 never answers
        assert "127.0.0.1:1" in leader.members()
        group = {node.address for node in leader.group_at_snapshot(raft_data)[2]}
        assert group == {n.selfNode.address for n in cluster.nodes}


def test_a_follower_that_appends_an_add_and_its_removal_together_never_re_adds_the_node():
    from haqueue import events

    with ticked_cluster() as cluster:
        leader = cluster.leader()
        cluster.commit(leader, _entry(0))
        late = cluster.followers()[0]
        cluster.paused.add(late)  # it hears both changes in one batch when it is back
        ghost = _join(cluster).selfNode.address  # it answers: with `late` away, 3 of 4 need it
        events.clear()
        assert _change(cluster, leader, ADD, ghost) is None
        assert _change(cluster, leader, REMOVE, ghost) is None
        cluster.paused.discard(late)
        cluster.run_until(lambda: late.raftLastApplied >= leader.raftCommitIndex, seconds=2.0,
                          what="the late follower caught up")
        seen = [(e["change"], e["undone"]) for e in events.recent()
                if e.get("event") == "membership" and e.get("at") == late.selfNode.address and e["node"] == ghost]
        assert seen == [("add", False), ("remove", False)]
        assert late.members() == leader.members() and ghost not in late.members()


def test_pysyncobj_admin_messages_cannot_change_the_group_behind_the_leaders_checks():
    with ticked_cluster() as cluster:
        for node in cluster.nodes:
            callbacks = node.transport._onUtilityMessageCallbacks
            assert "status" in callbacks
            assert not {"add", "remove", "transfer"} & set(callbacks)


def test_an_addition_carries_the_new_nodes_addresses_to_every_member():
    with ticked_cluster() as cluster:
        leader = cluster.leader()
        cluster.commit(leader, _entry(0))
        new = _join(cluster)
        info = {"id": "n4", "host": "127.0.0.14", "admin_port": 8004, "client_port": 7004}
        outcome = []
        leader.change(ADD, new.selfNode.address, outcome.append, info)
        cluster.run_until(lambda: outcome, seconds=2.0, what="the addition committed")
        assert outcome == [None]
        cluster.run_until(lambda: all(new.selfNode.address in n.member_info() for n in cluster.nodes if n is not new),
                          seconds=2.0, what="every old member learnt the new one's addresses")
        for node in cluster.nodes:
            if node is not new:
                assert node.member_info() == {new.selfNode.address: info}
        assert leader.members_settled()


def _as_served(node) -> dict:
    """What a node's /status says of it (server/app.py + replica.py), for removal.py."""
    return {**node.status(), "serving": node._isLeader(), "members_settled": node.members_settled()}


def test_a_removed_node_learns_it_from_the_leader_and_disturbs_nobody_meanwhile():
    from haqueue.replication.removal import removed_by

    with ticked_cluster() as cluster:
        leader = cluster.leader()
        for n in range(3):
            cluster.commit(leader, _entry(n))
        cluster.run_until(cluster.caught_up, seconds=1.0, what="followers caught up")
        gone = cluster.followers()[0]
        me = gone.selfNode.address
        assert removed_by(me, gone.raftLastApplied, [_as_served(leader)]) is None  # a member
        assert _change(cluster, leader, REMOVE, me) is None
        term = leader.raftCurrentTerm
        # Several election timeouts, the removed node ticking all the while: no election anywhere.
        cluster.run_while(lambda: leader._isLeader() and all(n.raftCurrentTerm == term for n in cluster.nodes),
                          seconds=3.0, what="one leader, one term")
        assert not gone._isLeader() and me in gone.members()  # it never heard of its removal itself
        assert removed_by(me, gone.raftLastApplied, [_as_served(n) for n in cluster.nodes if n is not gone]) \
            == _as_served(leader)
        # A node holding nothing of the log is one waiting to be added: never told to stop.
        assert removed_by(me, 0, [_as_served(leader)]) is None


def test_a_leader_whose_last_change_is_not_committed_proves_nothing():
    from haqueue.replication.removal import removed_by

    with ticked_cluster() as cluster:
        leader = cluster.leader()
        cluster.commit(leader, _entry(0))
        cluster.run_until(cluster.caught_up, seconds=1.0, what="followers caught up")
        gone = cluster.followers()[0]
        for other in cluster.followers():
            cluster.paused.add(other)  # nobody acknowledges: the removal cannot commit
        leader.change(REMOVE, gone.selfNode.address, lambda error: None)
        cluster.run(seconds=0.05)
        assert gone.selfNode.address not in leader.members() and not leader.members_settled()
        assert removed_by(gone.selfNode.address, 1, [_as_served(leader)]) is None


def test_an_addition_with_addresses_is_still_the_entry_pysyncobj_and_older_haqueues_read():
    import pickle
    import pickletools

    from pysyncobj.node import TCPNode

    from haqueue.replication.membership import MEMBERSHIP_TYPE, parse_request

    info = {"id": "n4", "host": "127.0.0.14", "admin_port": 8004, "client_port": 7004}
    node = TCPNode("127.0.0.14:9004", haqueue_member=info)
    command = bytes([MEMBERSHIP_TYPE]) + pickle.dumps([ADD, node.id, node])  # as addNodeToCluster writes it
    assert parse_request(command) == (ADD, "127.0.0.14:9004")
    loaded = pickle.loads(command[1:])[2]
    assert loaded == TCPNode("127.0.0.14:9004") and hash(loaded) == hash(TCPNode("127.0.0.14:9004"))
    assert loaded.address == "127.0.0.14:9004" and loaded.haqueue_member == info
    # Only pysyncobj's own class and plain data: nothing an older haqueue could not unpickle.
    names = [arg for op, arg, _ in pickletools.genops(command[1:]) if op.name in ("SHORT_BINUNICODE", "BINUNICODE")]
    assert "pysyncobj.node" in names and "TCPNode" in names and not any("haqueue." in str(n) for n in names)


def test_a_received_snapshot_leaves_the_members_the_same_objects_as_the_transports():
    # D31: pysyncobj took the snapshot's unpickled nodes as its members while its
    # transport stayed keyed by the ones it had: equal, not identical, and every
    # lookup between them went through Node.__eq__.
    from tests.replication.test_snapshot_writer import LIMIT, _fill

    with ticked_cluster(journal_limit=LIMIT) as cluster:
        leader = cluster.leader()
        _fill(cluster, 4)
        cluster.until_snapshots(leader, 1)
        wiped = cluster.restart(cluster.followers()[0])  # empty: it needs the leader's snapshot
        cluster.run_until(lambda: wiped.raftLastApplied >= leader.raftCommitIndex and not wiped.snapshots.loading,
                          seconds=5, what="the snapshot received and applied")
        transport_nodes = {node.id: node for node in wiped.transport._nodes}
        members = wiped._SyncObj__otherNodes
        assert {node.id for node in members} == set(transport_nodes)
        assert all(transport_nodes[node.id] is node for node in members)
