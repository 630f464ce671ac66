"""A connection that names itself with `haqueue-operator NAME` has each change recorded as an
event once it is applied (haqueue/server/beanstalk/operator_events.py); other connections never do."""

from __future__ import annotations

import asyncio

import pytest

from haqueue import events
from tests.support.session_host import LocalHost, connect, turn


@pytest.fixture
def host():
    loop = asyncio.new_event_loop()
    events.clear()
    try:
        yield LocalHost(loop)
    finally:
        loop.close()
        events.clear()


def send(host: LocalHost, session, data: bytes) -> None:
    """Hand the session `data` and let it run it all: a turn may end after any command
    (0.25 ms until it writes, limits.py), and the rest runs at the loop's next turns."""
    session.data_received(data)
    turn(host.loop, 10)


def operator_events() -> list[dict]:
    return [e for e in events.recent() if e["event"] == "operator"]


def test_an_operator_connection_s_changes_are_events_naming_who_what_and_which_job(host):
    session, transport = connect(host)
    send(host, session, b"haqueue-operator console\r\nuse mail\r\nput 0 0 60 2\r\nhi\r\n")
    assert transport.written == b"NOTED\r\nUSING mail\r\n"
    assert operator_events() == []  # recorded once applied, not when sent
    host.batcher.commit()
    send(host, session, b"delete 1\r\ndelete 1\r\npeek 1\r\n")
    host.batcher.commit()
    turn(host.loop, 10)
    assert transport.written.endswith(b"INSERTED 1\r\nDELETED\r\nNOT_FOUND\r\nNOT_FOUND\r\n")
    said = operator_events()
    assert [e["msg"] for e in said] == [
        "console at 127.0.0.1:1: put job 1 tube mail: INSERTED 1",
        "console at 127.0.0.1:1: delete job 1: DELETED",
        "console at 127.0.0.1:1: delete job 1: NOT_FOUND",
    ]  # the peek changes nothing: no event
    assert (said[0]["who"], said[0]["operation"], said[0]["job"], said[0]["tube"]) == \
        ("console at 127.0.0.1:1", "put", 1, "mail")


def test_a_connection_that_does_not_name_itself_records_no_events(host):
    session, transport = connect(host)
    send(host, session, b"put 0 0 60 2\r\nhi\r\ndelete 1\r\n")
    host.batcher.commit()
    turn(host.loop, 10)
    assert transport.written == b"INSERTED 1\r\nDELETED\r\n"
    assert operator_events() == []
