"""The one VIP binder every front end uses (server/listeners.py), on real sockets.

bound_socket binds an address the host does not hold only with IP_FREEBIND (the VIP
arrives after leadership does); VipBinder warns and tries again every VIP_RETRY_S while
the address is taken, for as long as its front end wants it, and stops when cancelled.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket

import pytest

from haqueue.server import listeners
from haqueue.server.listeners import VipBinder, bound_socket

ABSENT = "198.18.0.77"  # in the benchmarking range: bound here, never sent to


def test_an_address_not_on_the_host_binds_only_with_freebind():
    with pytest.raises(OSError) as refused:
        bound_socket(ABSENT, 0)
    assert refused.value.errno == errno.EADDRNOTAVAIL
    for kind in (socket.SOCK_STREAM, socket.SOCK_DGRAM):
        sock = bound_socket(ABSENT, 0, kind, freebind=True)
        try:
            assert sock.getsockname()[0] == ABSENT
            assert sock.getsockopt(socket.SOL_IP, listeners.IP_FREEBIND) == 1
        finally:
            sock.close()


def test_a_taken_vip_is_tried_again_until_it_binds_and_no_more_once_cancelled(monkeypatch, caplog):
    monkeypatch.setattr(listeners, "VIP_RETRY_S", 0.01)
    holder = bound_socket("127.0.0.1", 0)  # another node on this host still holds it
    port = holder.getsockname()[1]
    attempts = []

    async def scenario():
        bound = asyncio.Event()

        async def bind():
            attempts.append(port)
            sock = bound_socket("127.0.0.1", port, freebind=True)
            sock.close()
            bound.set()

        binder = VipBinder("serve tests", "127.0.0.1", port, bind, lambda: True)
        await binder.bind()
        assert not bound.is_set() and binder._retry is not None
        holder.close()  # the other node let it go
        await asyncio.wait_for(bound.wait(), 5)
        assert binder._retry is None  # bound: nothing more is scheduled

        again = VipBinder("serve tests", "127.0.0.1", port, _refused, lambda: True)
        await again.bind()
        again.cancel()
        assert again._retry is None

    with caplog.at_level(logging.WARNING, logger="haqueue.server.listeners"):
        asyncio.run(scenario())
    assert len(attempts) >= 2
    assert f"cannot serve tests on the VIP 127.0.0.1:{port} yet" in caplog.text


def test_a_vip_no_longer_wanted_is_not_bound():
    calls = []

    async def bind():
        calls.append(1)

    asyncio.run(VipBinder("serve tests", ABSENT, 1, bind, lambda: False).bind())
    assert calls == []


async def _refused():
    raise OSError(errno.EADDRINUSE, "Address already in use")
