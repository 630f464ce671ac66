"""roster.py: the nodes a view lists, the leader's members named through the file."""

from haqueue.roster import MEMBER, NOT_MEMBER, FileNode, leader_view, roster

FILE = [FileNode("n1", "127.0.0.11", 8001, "127.0.0.11:9001", 7001),
        FileNode("n2", "127.0.0.12", 8002, "127.0.0.12:9002", 7002),
        FileNode("n3", "127.0.0.13", 8003, "127.0.0.13:9003", 7003)]
N4_INFO = {"127.0.0.14:9004": {"id": "n4", "host": "127.0.0.14", "admin_port": 8004, "client_port": 7004}}


def test_without_a_member_list_the_file_is_the_roster():
    lines = roster(FILE, None)
    assert [(n.node, n.membership, n.in_file) for n in lines] == [("n1", MEMBER, True), ("n2", MEMBER, True),
                                                                    ("n3", MEMBER, True)]


def test_a_member_the_file_lacks_is_named_by_its_addition_and_a_removed_one_is_not_a_member():
    members = ["127.0.0.11:9001", "127.0.0.14:9004", "127.0.0.13:9003"]
    lines = roster(FILE, members, N4_INFO)
    assert [(n.node, n.membership, n.admin_port, n.client_port) for n in lines] == [
        ("n1", MEMBER, 8001, 7001), ("n3", MEMBER, 8003, 7003), ("n4", MEMBER, 8004, 7004),
        ("n2", NOT_MEMBER, 8002, 7002)]
    assert [n.in_file for n in lines] == [True, True, False, True]


def test_a_member_nobody_can_name_shows_its_raft_address():
    lines = roster(FILE, ["127.0.0.11:9001", "127.0.0.15:9005"])
    assert (lines[1].node, lines[1].host, lines[1].admin_port, lines[1].membership) == (
        "127.0.0.15:9005", "127.0.0.15", None, MEMBER)


def test_the_truth_is_the_serving_leaders_settled_members():
    follower = {"role": "follower", "serving": False, "members": ["a:1"]}
    unsettled = {"role": "leader", "serving": True, "members": ["a:1", "b:2"], "members_settled": False}
    leader = {"role": "leader", "serving": True, "members": ["a:1", "c:3"], "members_settled": True,
              "member_info": {"c:3": {"id": "n3"}}}
    assert leader_view([None, follower, unsettled]) is None
    assert leader_view([follower, None, leader]) == (["a:1", "c:3"], {"c:3": {"id": "n3"}})
