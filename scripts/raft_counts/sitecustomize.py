"""Counters for scripts/raft-message-counts, loaded by every process started with this
folder on PYTHONPATH and HQ_COUNTS set (a folder): a node counts what its Raft path does
between a first SIGUSR2 (reset) and a second (written to HQ_COUNTS/PID.json).

What is counted (per node): group-commit entries and their commands (the batcher), append_entries
sent and the entries they carried, append_entries and acknowledgements received,
acknowledgements sent and in how many flushes, ticks, fdatasyncs, and the process's CPU time.
A measuring tool: it wraps haqueue's classes at start-up, never in a served cluster.
"""

import os

if os.environ.get("HQ_COUNTS"):
    import collections
    import json
    import signal
    import time

    counts = collections.Counter()
    window = {"on": False}

    def _cpu() -> float:
        t = os.times()
        return t.user + t.system

    def _toggle(*_args) -> None:
        if not window["on"]:
            counts.clear()
            window.update(on=True, wall=time.monotonic(), cpu=_cpu())
            return
        window["on"] = False
        out = dict(counts, wall=time.monotonic() - window["wall"], cpu=_cpu() - window["cpu"])
        with open(os.path.join(os.environ["HQ_COUNTS"], f"{os.getpid()}.json"), "w") as f:
            json.dump(out, f)

    signal.signal(signal.SIGUSR2, _toggle)

    from haqueue.replication import journal, raft_node, transport
    from haqueue.server import batcher

    def _wrap(cls, name, count):
        original = getattr(cls, name)

        def wrapper(self, *args, **kwargs):  # (tick takes light=, hot_path.py D32)
            count(*args)
            return original(self, *args, **kwargs)

        setattr(cls, name, wrapper)

    def _sent(node, message):
        kind = message.get("type")
        counts["sent " + str(kind)] += 1
        if kind == "append_entries":
            counts["entries sent"] += len(message.get("entries", ()))

    def _entry_done(conts, applied):
        counts["entries"] += 1
        counts["commands"] += len(conts)

    def _acks(acks):
        counts["acks sent"] += len(acks)
        counts["ack flushes"] += 1

    def _append_received(node, message, deliver, now):
        counts["appends received"] += 1
        counts["entries received"] += len(message.get("entries", ()))

    _wrap(transport.SyncingTransport, "send", _sent)
    _wrap(transport.SyncingTransport, "_send_acks", _acks)
    _wrap(transport.SyncingTransport, "_on_append_entries", _append_received)
    _wrap(transport.SyncingTransport, "_on_next_node_idx", lambda *a: counts.update(["acks received"]))
    _wrap(raft_node.ReplicatedQueue, "tick", lambda *a: counts.update(["ticks"]))
    _wrap(journal.DurableJournal, "_fdatasync", lambda *a: counts.update(["fdatasyncs"]))
    _wrap(batcher.Batcher, "_done", _entry_done)
