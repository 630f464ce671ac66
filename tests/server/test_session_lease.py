"""A reply that hands a connection a job is written only while the leader's lease holds.

A leader whose apply stalled (its fsync stuck behind a large write) past an
election may apply a reservation that a newer leader has already released and
given to another worker. Such a leader's lease has lapsed (no majority
acknowledged its recent appends), so the RESERVED or TOUCHED reply waits; it
is written once the lease holds again, or never, if the node steps down and
drops the connection. Driven here with a Session on tests/support/session_host's
LocalHost, whose lease the test sets; the session rechecks it on a timer, and
the test awaits those rechecks (counted by the host) rather than sleeping.
"""

from __future__ import annotations

import asyncio

from haqueue.protocol import beanstalk as P
from tests.support.session_host import LocalHost, connect

RECHECKS = 3  # rechecks in which the held reply must stay unwritten
WAIT = 5.0  # seconds: a bound on awaiting rechecks 10 ms apart, never reached when all is well


async def _reserved_while_the_lease_lapsed():
    host = LocalHost(asyncio.get_running_loop())
    session, transport = connect(host)
    session.data_received(b"put 0 0 60 2\r\nhi\r\n")
    host.batcher.commit()
    session.data_received(b"reserve\r\n")
    host.replica.holds = False
    host.batcher.commit()
    await asyncio.wait_for(host.replica.asked_again(RECHECKS), WAIT)
    assert transport.written == b"INSERTED 1\r\n"  # RESERVED is held
    return host, session, transport


def test_a_reservation_is_not_answered_while_the_lease_has_lapsed_and_is_once_it_holds():
    async def scenario():
        host, session, transport = await _reserved_while_the_lease_lapsed()
        host.replica.holds = True
        await asyncio.wait_for(host.replica.asked_again(1), WAIT)
        return transport.written

    assert asyncio.run(scenario()) == b"INSERTED 1\r\n" + P.reserved(1, b"hi")


def test_a_reservation_held_for_the_lease_is_never_answered_after_a_step_down():
    async def scenario():
        host, session, transport = await _reserved_while_the_lease_lapsed()
        session.abort()  # what the step-down does to every connection
        await asyncio.sleep(0)  # the transport reports the loss at the loop's next turn
        host.replica.holds = True
        return session, transport

    session, transport = asyncio.run(scenario())
    assert transport.lost and transport.written == b"INSERTED 1\r\n"
    assert session.lease_timer is None  # no recheck left that could write it (a write would raise)


async def settle() -> None:
    """Let the loop run what is ready (a session's next turn), without waiting on time."""
    for _ in range(10):
        await asyncio.sleep(0)


def test_a_touch_waits_for_the_lease_too():
    async def scenario():
        host = LocalHost(asyncio.get_running_loop())
        session, transport = connect(host)
        session.data_received(b"put 0 0 60 2\r\nhi\r\nreserve\r\n")
        await settle()  # a turn may end after the put (limits.py): the reserve runs next turn
        host.batcher.commit()
        await settle()
        host.batcher.commit()
        await settle()
        answered = transport.written
        host.replica.holds = False
        session.data_received(b"touch 1\r\n")
        host.batcher.commit()
        await asyncio.wait_for(host.replica.asked_again(RECHECKS), WAIT)
        before = transport.written[len(answered):]  # nothing may be written meanwhile
        host.replica.holds = True
        await asyncio.wait_for(host.replica.asked_again(1), WAIT)
        return answered, before, transport.written[len(answered):]

    answered, before, after = asyncio.run(scenario())
    assert answered == b"INSERTED 1\r\n" + P.reserved(1, b"hi")
    assert (before, after) == (b"", b"TOUCHED\r\n")
