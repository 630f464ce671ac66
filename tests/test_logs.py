"""The text log's timestamp, left out only for journald (haqueue/logs.py), and the kept events."""

from __future__ import annotations

import io
import logging
import os
import re
import tempfile

from haqueue import events, logs


def configured_line(stream, monkeypatch, journal_stream: str | None, show_events: bool = True) -> str:
    if journal_stream is None:
        monkeypatch.delenv("JOURNAL_STREAM", raising=False)
    else:
        monkeypatch.setenv("JOURNAL_STREAM", journal_stream)
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    try:
        logs.configure(0, stream=stream, show_events=show_events)
        events.record("test_event", "something happened: %d", 7, node="n1")
    finally:
        for handler in list(root.handlers):
            root.removeHandler(handler)
        for handler in saved[0]:
            root.addHandler(handler)
        root.setLevel(saved[1])
    stream.seek(0)
    return stream.read().strip()


def test_a_text_line_starts_with_its_utc_time_unless_stderr_is_journald(monkeypatch):
    line = configured_line(io.StringIO(), monkeypatch, None)
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z haqueue\[\d+\] INFO haqueue\.events: "
                        r"something happened: 7", line), line
    with tempfile.TemporaryFile("w+") as journal:
        st = os.fstat(journal.fileno())
        line = configured_line(journal, monkeypatch, f"{st.st_dev}:{st.st_ino}")
    assert line.startswith("haqueue["), line  # journald stamps the line itself


def test_another_streams_journal_stream_still_gets_a_timestamp(monkeypatch):
    line = configured_line(io.StringIO(), monkeypatch, "1:2")  # stderr is not that stream
    assert re.match(r"\d{4}-\d\d-\d\dT", line), line


def test_the_last_fifty_events_are_kept_oldest_first():
    events.clear()
    for n in range(events.KEPT + 5):
        events.record("counted", "event %d", n, n=n)
    kept = events.recent()
    assert [e["n"] for e in kept] == list(range(5, events.KEPT + 5))
    assert kept[-1]["event"] == "counted" and kept[-1]["msg"] == f"event {events.KEPT + 4}"
    assert [e["n"] for e in events.recent(3)] == [events.KEPT + 2, events.KEPT + 3, events.KEPT + 4]


def test_a_quiet_node_prints_no_event_but_keeps_it_for_status(monkeypatch):
    events.clear()
    assert configured_line(io.StringIO(), monkeypatch, None, show_events=False) == ""
    assert events.recent()[-1]["msg"] == "something happened: 7" and events.recent()[-1]["node"] == "n1"
