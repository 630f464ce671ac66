"""Fixtures for the bench tests: a real beanstalkd, its raw stats, and a scripted impostor."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Iterator

import pytest

from tests.support.servers import ServerProcess, beanstalkd

CLOSE = object()  # a scripted reply that closes the connection instead


@pytest.fixture(scope="module")
def bs() -> Iterator[ServerProcess]:
    """One real beanstalkd for a test module; tests use distinct tubes."""
    with beanstalkd() as server:
        yield server


def server_stats(server: ServerProcess, tube: str | None = None) -> dict[str, int]:
    """`stats` (or `stats-tube TUBE`) over a raw connection: the server's own counters.

    beanstalkd drops a tube once it is empty and unused, so a missing tube reads as {}.
    """
    with server.connect() as conn:
        conn.send(b"stats\r\n" if tube is None else b"stats-tube " + tube.encode() + b"\r\n")
        reply = conn.recv_reply()
    if tube is not None and reply == b"NOT_FOUND\r\n":
        return {}
    head, _, body = reply.partition(b"\r\n")
    assert head.startswith(b"OK "), reply
    out = {}
    for line in body.decode().splitlines():
        key, sep, value = line.partition(":")
        if sep and value.strip().isdigit():
            out[key.strip()] = int(value.strip())
    return out


@contextlib.contextmanager
def scripted_server(respond: Callable[[bytes, int], bytes | object | None]) -> Iterator[int]:
    """A tiny asyncio server in a thread, speaking just enough beanstalkd to lie.

    `respond(command_line, puts_so_far)` returns the bytes to send back, None for
    silence, or CLOSE to hang up. Yields the port it listens on (127.0.0.1).
    """
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    state: dict = {}

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        puts = 0
        try:
            while line := await reader.readline():
                if line.startswith(b"put "):
                    await reader.readexactly(int(line.split()[4]) + 2)
                    puts += 1
                reply = respond(line.rstrip(b"\r\n"), puts)
                if reply is CLOSE:
                    break
                if reply:
                    writer.write(reply)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    async def start() -> None:
        state["server"] = await asyncio.start_server(handle, "127.0.0.1", 0)
        state["port"] = state["server"].sockets[0].getsockname()[1]

    def serve() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(start())
        ready.set()
        loop.run_forever()
        state["server"].close()
        tasks = asyncio.all_tasks(loop)
        for task in tasks:
            task.cancel()
        loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
        loop.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    assert ready.wait(5), "scripted server did not start"
    try:
        yield state["port"]
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)


def honest_use(line: bytes) -> bytes | None:
    """The reply a real server gives to `use TUBE`, or None for other commands."""
    if line.startswith(b"use "):
        return b"USING " + line[4:] + b"\r\n"
    return None
