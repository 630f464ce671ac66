"""A follower truncates only from a real conflict (Raft §5.3), never acknowledged entries."""

from haqueue.replication.append_guard import ACK_THROUGH, trim


def log_of(*terms, first=1):
    return [(b"", first + i, term) for i, term in enumerate(terms)]


def message(prev_idx, prev_term, entries, term=2):
    return {"type": "append_entries", "term": term, "commit_index": 0,
            "prevLogIdx": prev_idx, "prevLogTerm": prev_term,
            "entries": [(b"", idx, t) for idx, t in entries]}


def test_a_resend_of_entries_the_follower_has_keeps_its_longer_log():
    log = log_of(1, 2, 2, 2, 2, 2)  # indexes 1..6
    out = trim(message(2, 2, [(3, 2), (4, 2)]), log)  # a re-send cut short at 4
    assert out["prevLogIdx"] == 6 and out["prevLogTerm"] == 2 and out["entries"] == []


def test_entries_beyond_the_log_are_appended_after_the_matching_ones():
    log = log_of(1, 2, 2, 2)
    out = trim(message(2, 2, [(3, 2), (4, 2), (5, 2), (6, 2)]), log)
    assert out["prevLogIdx"] == 4
    assert [e[1] for e in out["entries"]] == [5, 6]


def test_a_conflicting_entry_still_truncates_from_the_conflict():
    log = log_of(1, 1, 1, 1)  # an old leader's entries at 3 and 4
    out = trim(message(2, 1, [(3, 1), (4, 2)]), log)
    assert out["prevLogIdx"] == 3 and [e[1] for e in out["entries"]] == [4]


def test_extra_entries_of_an_older_term_are_neither_claimed_nor_cut():
    log = log_of(1, 1, 1, 1)  # 3 and 4 were never confirmed by the term-2 leader
    sent = message(1, 1, [(2, 1)], term=2)
    sent["commit_index"] = 4
    out = trim(sent, log)
    # Acknowledging 4 could be false (the leader may hold other entries there),
    # but 3 and 4 may be committed entries of term 1: pysyncobj, handed a
    # message whose prevLogIdx is below 4, would delete them.
    assert out["prevLogIdx"] == 4 and out["prevLogTerm"] == 1 and out["entries"] == []
    assert out[ACK_THROUGH] == 2  # the transport acknowledges up to 2 only
    assert out["commit_index"] == 2  # and the follower commits nothing unconfirmed


def test_messages_pysyncobj_must_answer_itself_are_untouched():
    log = log_of(1, 2, 2, first=10)
    for m in (
        message(5, 1, [(6, 1)]),  # before the log (compacted): reset
        message(20, 2, []),  # beyond the log: reset
        message(11, 1, [(12, 2)]),  # term mismatch at prev: reset
        {"type": "append_entries", "term": 2, "commit_index": 0, "transmission": "start", "data": b"",
         "prevLogIdx": 10, "prevLogTerm": 1},
        {"type": "append_entries", "term": 2, "commit_index": 0, "serialized": None},
    ):
        assert trim(m, log) is m


def test_a_heartbeat_at_the_end_of_the_log_is_untouched():
    log = log_of(1, 2, 2)
    m = message(3, 2, [])
    assert trim(m, log) is m


def test_new_entries_right_after_the_log_are_handed_on_as_they_are():
    log = log_of(1, 2, 2)
    for m in (message(3, 2, [(4, 2), (5, 2)]), message(3, 1, [(4, 2)])):  # the usual case; a conflict at prev
        assert trim(m, log) is m
