"""The lab's workload: producers faster than consumers through the VIP, every operation recorded.

Run in the client namespace as its own process:

    ip netns exec hqlab-client python -m haqueue.lab.workload run --host VIP --history FILE
    ip netns exec hqlab-client python -m haqueue.lab.workload drain --host VIP --history FILE

`run` keeps going until SIGTERM/SIGINT; `drain` reserves and deletes every job
left, then records the server's remaining job counts, and exits.

The history is JSON lines, one per event, Jepsen style:
    {"t": monotonic seconds, "w": worker, "c": connection no., "i": op id,
     "type": "invoke" | "ok" | "fail" | "unknown", "f": "put" | "reserve" | "delete", "v": value}
- put's value is its body, unique across runs (TAG-WORKER-SEQ); `ok` carries
  {"id": job id}.
- `fail` means the operation certainly did not happen: nothing was sent
  (connect failed: `io` is true), or the server answered with an error
  (`err` names it; a reserve that TIMED_OUT is a `fail` with err "TIMED_OUT").
- `unknown` means the request may have been applied: the connection broke or
  timed out after it was sent. A put whose connection broke before the reply
  is `unknown`, never `fail`.
- "close" events (type "close") mark when a worker saw its connection die:
  the server releases that connection's reservations (docs/design.md I5).
Timestamps are time.monotonic(), which is CLOCK_MONOTONIC and shared by every
process on the host, so the chaos runner's fault times compare with them.

Why a backlog: producers put faster than consumers take, so the queue is
never empty when a fault hits and a lost job cannot hide in an empty queue.
Jobs get a long time-to-run so a duplicate delivery means an orphan release
(the holder's connection died), not a slow consumer.
"""

from __future__ import annotations

import argparse
import itertools
import json
import secrets
import signal
import socket
import sys
import threading
import time

TTR = 120  # seconds; far beyond any lab fault, so TTR expiry is not a source of duplicates
CONNECT_TIMEOUT = 0.25  # short: a SYN to a VIP in transit is lost; retry soon rather than wait 1 s
OP_TIMEOUT = 1.0  # `run --op-timeout` changes it: how long a client waits for an answer


class Broken(Exception):
    """The connection failed; `sent` says whether the request had left."""

    def __init__(self, why: str, sent: bool) -> None:
        super().__init__(why)
        self.why = why
        self.sent = sent


class History:
    """Appends events as JSON lines; thread safe; flushed on every line (a kill loses little)."""

    def __init__(self, path: str) -> None:
        self.file = open(path, "a", buffering=1)
        self.lock = threading.Lock()
        self.ids = itertools.count(1)

    def event(self, **fields) -> None:
        fields["t"] = round(time.monotonic(), 6)
        line = json.dumps(fields, separators=(",", ":"))
        with self.lock:
            self.file.write(line + "\n")

    def close(self) -> None:
        with self.lock:
            self.file.close()


class Client:
    """One beanstalk connection to host:port, reconnecting on demand."""

    def __init__(self, host: str, port: int) -> None:
        self.host = host
        self.port = port
        self.sock: socket.socket | None = None
        self.buf = b""
        self.serial = 0

    def connect(self) -> None:
        if self.sock is not None:
            return
        try:
            sock = socket.create_connection((self.host, self.port), timeout=CONNECT_TIMEOUT)
        except OSError as exc:
            raise Broken(f"connect: {exc.__class__.__name__}", sent=False) from None
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock = sock
        self.buf = b""
        self.serial += 1

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    def _readline(self, timeout: float) -> bytes:
        self.sock.settimeout(timeout)
        while b"\r\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionResetError("closed by server")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _read_exact(self, n: int, timeout: float) -> bytes:
        self.sock.settimeout(timeout)
        while len(self.buf) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionResetError("closed by server")
            self.buf += chunk
        data, self.buf = self.buf[:n], self.buf[n:]
        return data

    def request(self, data: bytes, timeout: float | None = None, body: bool = False) -> tuple[bytes, bytes | None]:
        """Send, read one reply line (and a body for RESERVED); raise Broken on any I/O failure."""
        timeout = OP_TIMEOUT if timeout is None else timeout
        self.connect()
        try:
            self.sock.settimeout(timeout)
            self.sock.sendall(data)
        except OSError as exc:
            # Part of it may be out: the server may act on it.
            self.close()
            raise Broken(f"send: {exc.__class__.__name__}", sent=True) from None
        try:
            line = self._readline(timeout)
            payload = None
            if body and line.startswith(b"RESERVED "):
                size = int(line.split()[2])
                payload = self._read_exact(size + 2, timeout)[:-2]
            return line, payload
        except (OSError, ValueError, IndexError) as exc:
            self.close()
            raise Broken(f"reply: {exc.__class__.__name__}", sent=True) from None


class Worker(threading.Thread):
    def __init__(self, name: str, history: History, host: str, port: int, stop: threading.Event) -> None:
        super().__init__(name=name, daemon=True)
        self.history = history
        self.client = Client(host, port)
        self.stop = stop

    def op(self, f: str, value, request: bytes, timeout: float | None = None, body: bool = False):
        """Send one recorded request; return (reply line, payload, op id), or None after an I/O failure
        (already recorded as `fail` or `unknown`). The caller records the completion of a reply."""
        op_id = next(self.history.ids)
        h = self.history
        before = self.client.serial if self.client.sock is not None else None
        h.event(type="invoke", f=f, v=value, w=self.name, c=self.client.serial, i=op_id)
        try:
            line, payload = self.client.request(request, timeout, body)
        except Broken as exc:
            kind = "unknown" if exc.sent else "fail"
            h.event(type=kind, f=f, v=value, w=self.name, c=self.client.serial, i=op_id, err=exc.why, io=True)
            if exc.sent or before is not None:
                h.event(type="close", w=self.name, c=self.client.serial)
            return None
        return line, payload, op_id

    def complete(self, kind: str, f: str, value, op_id: int, **extra) -> None:
        self.history.event(type=kind, f=f, v=value, w=self.name, c=self.client.serial, i=op_id, **extra)


def _pace(next_at: float, interval: float) -> float:
    """Sleep until next_at; return the next slot (no catch-up burst after an outage)."""
    now = time.monotonic()
    if next_at > now:
        time.sleep(next_at - now)
        now = next_at
    return max(next_at + interval, now)


class Producer(Worker):
    def __init__(self, *args, rate: float, tag: str, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.interval = 1.0 / rate
        self.tag = tag

    def run(self) -> None:
        next_at = time.monotonic()
        seq = 0
        while not self.stop.is_set():
            next_at = _pace(next_at, self.interval)
            seq += 1
            value = f"{self.tag}-{self.name}-{seq}"
            data = value.encode()
            got = self.op("put", value, b"put 100 0 %d %d\r\n%s\r\n" % (TTR, len(data), data))
            if got is None:
                continue
            line, _, op_id = got
            parts = line.split()
            if parts and parts[0] in (b"INSERTED", b"BURIED") and len(parts) == 2:
                self.complete("ok", "put", value, op_id, id=int(parts[1]), reply=parts[0].decode())
            else:
                self.complete("fail", "put", value, op_id, err=line.decode("latin-1"))
        self.client.close()


class Consumer(Worker):
    def __init__(self, *args, rate: float, reserve_timeout: int = 1, until_empty: bool = False, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.interval = 1.0 / rate if rate > 0 else 0.0
        self.reserve_timeout = reserve_timeout
        self.until_empty = until_empty
        self.drained = 0

    def run(self) -> None:
        next_at = time.monotonic()
        while not self.stop.is_set():
            if self.interval:
                next_at = _pace(next_at, self.interval)
            got = self.op("reserve", None, b"reserve-with-timeout %d\r\n" % self.reserve_timeout,
                          timeout=OP_TIMEOUT + self.reserve_timeout, body=True)
            if got is None:
                continue
            line, payload, op_id = got
            parts = line.split()
            if parts[:1] != [b"RESERVED"] or payload is None:
                self.complete("fail", "reserve", None, op_id, err=line.decode("latin-1"))
                if self.until_empty and parts[:1] == [b"TIMED_OUT"]:
                    break
                continue
            job_id = int(parts[1])
            self.complete("ok", "reserve", None, op_id, id=job_id, body=payload.decode("latin-1"))
            got = self.op("delete", job_id, b"delete %d\r\n" % job_id)
            if got is None:
                continue
            line, _, op_id = got
            if line == b"DELETED":
                self.complete("ok", "delete", job_id, op_id)
                self.drained += 1
            else:
                self.complete("fail", "delete", job_id, op_id, err=line.decode("latin-1"))
        self.client.close()


BALLAST_TUBE = "lab-ballast"  # jobs that only make the state big; no worker watches it


def _stats(client: Client, command: bytes) -> dict:
    line, _ = client.request(command)
    if line == b"NOT_FOUND":
        return {}
    size = int(line.split()[1])
    text = client._read_exact(size + 2, OP_TIMEOUT).decode()
    counts = {}
    for row in text.splitlines():
        key, _, value = row.partition(": ")
        if key.startswith("current-jobs-"):
            counts[key] = int(value)
    return counts


def remaining(host: str, port: int) -> dict:
    """The server's current job counts, the ballast tube's left out (after a drain every one should be 0)."""
    client = Client(host, port)
    counts = _stats(client, b"stats\r\n")
    ballast = _stats(client, b"stats-tube " + BALLAST_TUBE.encode() + b"\r\n")
    client.close()
    return {key: value - ballast.get(key, 0) for key, value in counts.items()}


def ballast(args) -> int:
    """Top the ballast tube up to --jobs jobs of --size bytes (pipelined), so the replicated
    state is as big as a long campaign's: snapshots, restarts and catch-ups cost what they
    would then. Not part of any history: the checker never sees these jobs."""
    client = Client(args.host, args.port)
    client.request(b"use " + BALLAST_TUBE.encode() + b"\r\n")
    have = _stats(client, b"stats-tube " + BALLAST_TUBE.encode() + b"\r\n").get("current-jobs-ready", 0)
    body = b"b" * args.size
    command = b"put 0 0 120 %d\r\n%s\r\n" % (len(body), body)
    missing = max(0, args.jobs - have)
    while missing:
        n = min(missing, 500)
        client.sock.sendall(command * n)
        for _ in range(n):
            if not client._readline(30).startswith(b"INSERTED"):
                print("ballast: a put was refused", file=sys.stderr)
                return 1
        missing -= n
    print(json.dumps({"ballast_jobs": max(have, args.jobs)}))
    return 0


def run(args) -> int:
    history = History(args.history)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    workers: list[Worker] = [
        Producer(f"p{i}", history, args.host, args.port, stop, rate=args.put_rate / args.producers,
                 tag=args.tag or secrets.token_hex(4))
        for i in range(args.producers)
    ] + [
        Consumer(f"c{i}", history, args.host, args.port, stop, rate=args.take_rate / args.consumers)
        for i in range(args.consumers)
    ]
    for w in workers:
        w.start()
    while not stop.wait(0.2):
        pass
    for w in workers:
        w.join(timeout=OP_TIMEOUT * 3 + 1)
    history.close()
    return 0


def drain(args) -> int:
    """Take every job left, with several connections, then record what the server still holds."""
    history = History(args.history)
    stop = threading.Event()
    deadline = time.monotonic() + args.timeout
    rounds = 0
    counts: dict = {}
    while time.monotonic() < deadline:
        rounds += 1
        workers = [Consumer(f"d{rounds}-{i}", history, args.host, args.port, stop, rate=0,
                            reserve_timeout=1, until_empty=True) for i in range(args.consumers)]
        for w in workers:
            w.start()
        for w in workers:
            w.join(max(0.1, deadline - time.monotonic()))
        try:
            counts = remaining(args.host, args.port)
        except (Broken, OSError, ValueError, IndexError):
            counts = {}
            continue
        if counts and not any(counts.values()):
            break
    stop.set()
    history.event(type="remaining", v=counts)
    history.close()
    print(json.dumps(counts))
    return 0 if counts and not any(counts.values()) else 1


def mode_parser(prog: str, port: int, takers: str, run_takers: int, drain_takers: int):
    """`run` and `drain` with what both workloads share (this one's and gearmanworkload.py's):
    where, the history, how many take jobs; returns (parser, the `run` subparser) so
    that each adds its own producers and rates to `run`."""
    parser = argparse.ArgumentParser(prog=prog)
    sub = parser.add_subparsers(dest="mode", required=True)
    modes = {}
    for mode in ("run", "drain"):
        p = modes[mode] = sub.add_parser(mode)
        p.add_argument("--host", required=True)
        p.add_argument("--port", type=int, default=port)
        p.add_argument("--history", required=True)
        p.add_argument(f"--{takers}", type=int, default=run_takers if mode == "run" else drain_takers)
    modes["run"].add_argument("--tag", default=None, help="prefix of every body (default: random, unique per run)")
    modes["drain"].add_argument("--timeout", type=float, default=120.0)
    return parser, modes["run"]


def main(argv: list[str] | None = None) -> int:
    global OP_TIMEOUT
    parser, run_options = mode_parser("python -m haqueue.lab.workload", 11300, "consumers", 4, 32)
    run_options.add_argument("--producers", type=int, default=8)
    run_options.add_argument("--put-rate", type=float, default=80.0, help="puts per second, all producers")
    run_options.add_argument("--take-rate", type=float, default=40.0, help="reserves per second, all consumers")
    run_options.add_argument("--op-timeout", type=float, default=OP_TIMEOUT,
                             help="seconds a client waits for an answer before it gives the operation up")
    ballast_options = parser._subparsers._group_actions[0].add_parser("ballast")
    ballast_options.add_argument("--host", required=True)
    ballast_options.add_argument("--port", type=int, default=11300)
    ballast_options.add_argument("--history", default=None, help="unused: ballast is in no history")
    ballast_options.add_argument("--jobs", type=int, required=True)
    ballast_options.add_argument("--size", type=int, default=100)
    args = parser.parse_args(argv)
    if getattr(args, "op_timeout", None):
        OP_TIMEOUT = args.op_timeout
    return {"run": run, "drain": drain, "ballast": ballast}[args.mode](args)


if __name__ == "__main__":
    sys.exit(main())
