"""removal.py: when a node may conclude it was removed, and the line it stops with."""

from haqueue.replication.removal import message, operator_of, removed_by

ME = "127.0.0.12:9002"
LEADER = {"role": "leader", "serving": True, "term": 4, "members": ["127.0.0.11:9001", "127.0.0.13:9003"],
          "members_settled": True,
          "events": [{"event": "membership_committed", "operator": "ann@ops (cli)",
                      "action": f"remove-node n2 ({ME})"},
                     {"event": "membership_committed", "operator": "bob@ops (cli)",
                      "action": "add-node n4 (127.0.0.14:9004)"}]}


def test_only_a_serving_leaders_settled_members_without_me_say_removed():
    assert removed_by(ME, 10, [None, LEADER]) is LEADER
    assert removed_by(ME, 10, [{**LEADER, "serving": False}]) is None  # a leader not serving yet
    assert removed_by(ME, 10, [{**LEADER, "role": "follower"}]) is None
    assert removed_by(ME, 10, [{**LEADER, "members_settled": False}]) is None  # may still be cut
    assert removed_by(ME, 10, [{**LEADER, "members": [ME]}]) is None
    assert removed_by(ME, 10, [{k: v for k, v in LEADER.items() if k != "members_settled"}]) is None  # older node


def test_a_node_with_nothing_of_the_log_waits_to_be_added():
    assert removed_by(ME, 0, [LEADER]) is None


def test_the_line_names_who_removed_it():
    assert operator_of(ME, LEADER) == "ann@ops (cli)"
    assert operator_of("127.0.0.99:1", LEADER) is None
    line = message("n2", "n1", "ann@ops (cli)", LEADER)
    assert line.startswith("n2 was removed from the cluster by ann@ops (cli) through leader n1 (term 4;")
    assert "\n" not in line
