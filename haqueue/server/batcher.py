"""Group commit: gather state-changing commands into Raft entries.

Commands arriving while entries are in flight ride in the next entry, with
at most MAX_IN_FLIGHT entries outstanding (docs/design.md "Throughput"). Every
command carries a continuation; when its entry is committed and applied, the
continuations run in the asyncio thread in log order, each with its own
result, and then `on_applied` with the entry's effects (what the server acts
on: haqueue/core/effects.py). If the entry fails (leadership lost, queue
full) its outcome is unknown, and each continuation receives `None`: the
session closes the connection rather than guess (docs/design.md I1).

So a worker's `delete` and the `reserve` it pipelines behind it, parsed in
the same loop turn, ride in one entry, in that order.

The leader stamps each entry with its wall clock, never running backwards.
"""

from __future__ import annotations

import asyncio
import threading
import time

from haqueue.core import commands as C
from haqueue.core.commands import encode_batch

MAX_IN_FLIGHT = 4
MAX_BATCH_COMMANDS = 2048
# An entry's bytes, whatever front end made its commands: the server tells
# pysyncobj that no entry is bigger than this plus one job (app.py), so none
# takes its chunked path (docs/pysyncobj.md D13; issue 23, B4: 512 Gearman
# submits of 64 KiB once made one 32 MiB entry).
MAX_BATCH_BYTES = 4 << 20
# The most jobs one KICK command moves: a bigger kick is split by the session into
# entries of at most this many (session.py, Session._kick), as the core fires at most
# core/state.py's DEADLINES_PER_ENTRY deadlines per entry: ~5 us a job, so an entry's
# apply stays far below an election timeout (issue 23, B3).
KICKS_PER_ENTRY = 5000
# What a command costs in an entry besides its strings and bytes: its opcode,
# ints and pickle framing (a put of an empty body pickles to about 20 bytes).
COMMAND_OVERHEAD = 32


def wall_ms() -> int:
    return int(time.time() * 1000)


def command_bytes(command) -> int:
    """At least what `command` adds to an encoded entry: its strings (as UTF-8), bytes and
    nested tuples (a reserve's watched tubes, the id rules), plus COMMAND_OVERHEAD each."""
    if command[0] == C.PUT:  # the common case first
        return COMMAND_OVERHEAD + len(command[1]) + len(command[5])
    return _value_bytes(command)


def _value_bytes(value) -> int:
    size = COMMAND_OVERHEAD
    for item in value:
        kind = type(item)
        if kind is bytes:
            size += len(item)
        elif kind is str:
            size += len(item) if item.isascii() else len(item.encode("utf-8", "surrogatepass"))
        elif kind is tuple or kind is list:
            size += _value_bytes(item)
    return size


def _cut(commands: list[tuple]) -> int:
    """How many of `commands` fit one entry: at most MAX_BATCH_COMMANDS and MAX_BATCH_BYTES
    (command_bytes); a single larger command still goes, alone."""
    size = 0
    for index, command in enumerate(commands[:MAX_BATCH_COMMANDS]):
        size += command_bytes(command)
        if size > MAX_BATCH_BYTES:
            return max(index, 1)
    return min(len(commands), MAX_BATCH_COMMANDS)


class Batcher:
    def __init__(self, replica, loop: asyncio.AbstractEventLoop, on_applied) -> None:
        self.replica = replica  # haqueue.replication.replica.Replica, or a stand-in
        self.loop = loop
        self.on_applied = on_applied  # on_applied(effects or None), after each entry's continuations
        self.pending: list[tuple] = []
        self.pending_conts: list = []
        self.pending_bytes = 0
        self.in_flight = 0
        self.flush_scheduled = False
        self.last_stamp = 0
        self.closed = False

    def submit(self, command: tuple, continuation) -> None:
        """Queue one command; continuation(result_or_None) runs once it is applied."""
        self.pending.append(command)
        self.pending_conts.append(continuation)
        self.pending_bytes += command_bytes(command)
        if not self.flush_scheduled and self.in_flight < MAX_IN_FLIGHT:
            # Flush once the loop has read every socket that is ready now,
            # so one entry carries all of them.
            self.flush_scheduled = True
            self.loop.call_soon(self._flush)

    def _flush(self) -> None:
        self.flush_scheduled = False
        while self.pending and self.in_flight < MAX_IN_FLIGHT and not self.closed:
            commands, conts = self.pending, self.pending_conts
            if len(commands) > MAX_BATCH_COMMANDS or self.pending_bytes > MAX_BATCH_BYTES:
                cut = _cut(commands)
                commands, self.pending = commands[:cut], commands[cut:]
                conts, self.pending_conts = conts[:cut], conts[cut:]
                self.pending_bytes = sum(map(command_bytes, self.pending))
            else:
                self.pending, self.pending_conts, self.pending_bytes = [], [], 0
            stamp = wall_ms()
            if stamp < self.last_stamp:
                stamp = self.last_stamp
            self.last_stamp = stamp
            self.in_flight += 1
            data = encode_batch(stamp, commands)
            loop, loop_thread = self.loop, threading.get_ident()  # _flush runs on the loop

            def done(applied, conts=conts):
                # On the server every replica calls back on the loop's thread (a
                # Raft node ticks there, on_loop.py; a lone node calls back inside
                # this very submit): a plain call_soon spares the wake-up write a
                # threadsafe one costs, once per entry. A node ticked from another
                # thread (a test ticking by hand) gets the threadsafe hand-over.
                if threading.get_ident() == loop_thread:
                    loop.call_soon(self._done, conts, applied)
                else:
                    loop.call_soon_threadsafe(self._done, conts, applied)

            self.replica.submit(data, done)

    async def committed(self, command: tuple):
        """Log `command` and wait for its result (None: its outcome is unknown)."""
        done = self.loop.create_future()
        self.submit(command, lambda result: done.done() or done.set_result(result))
        return await done

    def _done(self, conts, applied) -> None:
        self.in_flight -= 1
        if applied is None:
            for cont in conts:
                cont(None)
            self.on_applied(None)
        else:
            self.replica.observations.batch_commands.observe(len(conts))
            for cont, result in zip(conts, applied.results):
                cont(result)
            self.on_applied(applied.effects)
        if self.pending and not self.flush_scheduled:
            self._flush()

    def fail_pending(self) -> None:
        """Leadership is gone: nothing queued will be submitted."""
        conts = self.pending_conts
        self.pending, self.pending_conts, self.pending_bytes = [], [], 0
        for cont in conts:
            cont(None)
