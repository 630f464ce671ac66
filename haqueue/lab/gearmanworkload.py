"""The lab's Gearman workload: background jobs submitted and worked through the VIP, recorded.

Run in the client namespace as its own process, beside the queue workload:

    ip netns exec hqlab-client python -m haqueue.lab.gearmanworkload run --host VIP --history FILE
    ip netns exec hqlab-client python -m haqueue.lab.gearmanworkload drain --host VIP --history FILE

The history has the queue workload's shape (workload.py), so the queue's
checker (checker.py) judges it unchanged; what each operation means here:
- "put": SUBMIT_JOB_BG of function FUNCTION with a unique body; `ok` is its
  JOB_CREATED, with {"id": the job handle}.
- "reserve": GRAB_JOB; `ok` is a JOB_ASSIGN, with {"id": handle, "body": workload};
  NO_JOB is a `fail` with err "NO_JOB" (the queue was empty, not a failure).
- "delete": WORK_COMPLETE of that handle. Gearman answers nothing to it, so the
  worker sends its next GRAB_JOB right behind it and takes the grab's answer as
  the complete's: a connection's packets are handled in order and each state
  change is committed before the next packet is answered (docs/gearman.md), so
  an answer to the grab means the complete is in the log. If the connection
  breaks first, the complete is `unknown`.
Connection failures are `fail` with "io" before anything was sent, `unknown`
after, as in workload.py. `drain` grabs until the queue answers NO_JOB to
every worker, then records the server's `status` counts for FUNCTION.
"""

from __future__ import annotations

import secrets
import signal
import socket
import sys
import threading
import time

from haqueue.lab.workload import CONNECT_TIMEOUT, OP_TIMEOUT, Broken, History, _pace, mode_parser
from haqueue.protocol import gearman as g

FUNCTION = b"lab"
SLEEP_WAIT = 1.0  # after NO_JOB, how long a worker waits for NOOP before it grabs again


class GearmanClient:
    """One connection, reconnecting on demand; `call` sends bytes and reads the next packet."""

    def __init__(self, host: str, port: int) -> None:
        self.address = (host, port)
        self.sock: socket.socket | None = None
        self.decoder = g.GearmanDecoder(magic=g.RES)
        self.serial = 0
        self.on_connect: bytes = b""  # sent first on every new connection (a worker's CAN_DO)

    def connect(self) -> None:
        if self.sock is not None:
            return
        try:
            sock = socket.create_connection(self.address, timeout=CONNECT_TIMEOUT)
        except OSError as exc:
            raise Broken(f"connect: {exc.__class__.__name__}", sent=False) from None
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock, self.decoder = sock, g.GearmanDecoder(magic=g.RES)
        self.serial += 1
        if self.on_connect:
            self.send(self.on_connect)

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    def send(self, data: bytes) -> None:
        self.connect()
        try:
            self.sock.settimeout(OP_TIMEOUT)
            self.sock.sendall(data)
        except OSError as exc:
            self.close()
            raise Broken(f"send: {exc.__class__.__name__}", sent=True) from None

    def read(self, timeout: float = OP_TIMEOUT, skip_noop: bool = True) -> g.Packet | None:
        """The next packet (NOOP wake-ups skipped unless asked for); None when `skip_noop` is
        False and nothing came within `timeout` (the connection stays open)."""
        deadline = time.monotonic() + timeout
        try:
            while True:
                event = self.decoder.next_event()
                if isinstance(event, g.Packet):
                    if event.name == "NOOP" and skip_noop:
                        continue  # a wake-up that came after its sleep had ended
                    return event
                if event is not g.NEED_DATA:
                    raise ValueError(f"not a response packet: {event}")
                left = deadline - time.monotonic()
                if left <= 0:
                    if not skip_noop:
                        return None
                    raise TimeoutError("no answer")
                self.sock.settimeout(left)
                try:
                    chunk = self.sock.recv(65536)
                except TimeoutError:
                    if not skip_noop:
                        return None
                    raise
                if not chunk:
                    raise ConnectionResetError("closed by server")
                self.decoder.receive_data(chunk)
        except (OSError, ValueError) as exc:
            self.close()
            raise Broken(f"reply: {exc.__class__.__name__}", sent=True) from None

    def call(self, data: bytes, timeout: float = OP_TIMEOUT) -> g.Packet:
        self.send(data)
        return self.read(timeout)


class Actor(threading.Thread):
    def __init__(self, name: str, history: History, client: GearmanClient, stop: threading.Event) -> None:
        super().__init__(name=name, daemon=True)
        self.history = history
        self.client = client
        self.stop = stop

    def invoke(self, f: str, value=None) -> int:
        op = next(self.history.ids)
        self.history.event(type="invoke", f=f, v=value, w=self.name, c=self.client.serial, i=op)
        return op

    def complete(self, kind: str, f: str, value, op: int, **extra) -> None:
        self.history.event(type=kind, f=f, v=value, w=self.name, c=self.client.serial, i=op, **extra)

    def broken(self, f: str, value, op: int, exc: Broken) -> None:
        self.complete("unknown" if exc.sent else "fail", f, value, op, err=exc.why, io=True)


class Submitter(Actor):
    def __init__(self, *args, rate: float, tag: str, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.interval = 1.0 / rate
        self.tag = tag

    def run(self) -> None:
        next_at, seq = time.monotonic(), 0
        while not self.stop.is_set():
            next_at = _pace(next_at, self.interval)
            seq += 1
            body = f"{self.tag}-{self.name}-{seq}"
            try:
                self.client.connect()
            except Broken as exc:
                self.broken("put", body, self.invoke("put", body), exc)
                continue
            op = self.invoke("put", body)
            try:
                answer = self.client.call(g.request("SUBMIT_JOB_BG", FUNCTION, b"", body.encode()))
            except Broken as exc:
                self.broken("put", body, op, exc)
                continue
            if answer.name == "JOB_CREATED":
                self.complete("ok", "put", body, op, id=answer.args[0].decode())
            else:
                self.complete("fail", "put", body, op, err=f"{answer.name} {b' '.join(answer.args)[:80]!r}")
        self.client.close()


class Worker(Actor):
    """CAN_DO FUNCTION; grab, complete, grab…; sleeps (PRE_SLEEP) when the queue is empty."""

    def __init__(self, *args, rate: float, until_empty: bool = False, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.interval = 1.0 / rate if rate > 0 else 0.0
        self.until_empty = until_empty
        self.client.on_connect = g.request("CAN_DO", FUNCTION)
        self.drained = 0

    def run(self) -> None:
        next_at = time.monotonic()
        completing: tuple[str, int] | None = None  # (handle, op) of a WORK_COMPLETE awaiting the next answer
        while not self.stop.is_set():
            if self.interval:
                next_at = _pace(next_at, self.interval)
            try:
                self.client.connect()
            except Broken as exc:
                self.broken("reserve", None, self.invoke("reserve"), exc)
                continue
            if completing is not None and self.client.serial != completing[1]:
                completing = None  # its connection died: already recorded as unknown
            data = b""
            done = None
            if completing is not None:
                handle, _ = completing
                done = self.invoke("delete", handle)
                data = g.request("WORK_COMPLETE", handle.encode(), b"")
            grab = self.invoke("reserve")
            try:
                answer = self.client.call(data + g.request("GRAB_JOB"))
            except Broken as exc:
                if done is not None:
                    self.broken("delete", completing[0], done, exc)
                self.broken("reserve", None, grab, exc)
                completing = None
                continue
            if done is not None:
                self.complete("ok", "delete", completing[0], done)
                self.drained += 1
                completing = None
            if answer.name == "JOB_ASSIGN":
                handle, _, body = answer.args
                self.complete("ok", "reserve", None, grab, id=handle.decode(), body=body.decode("latin-1"))
                completing = (handle.decode(), self.client.serial)
                continue
            self.complete("fail", "reserve", None, grab, err=answer.name)
            if answer.name == "NO_JOB":
                if self.until_empty:
                    break
                self._sleep_until_noop()
        if completing is not None:
            # The last grab's job: complete it before leaving, acknowledged by an ECHO.
            handle = completing[0]
            done = self.invoke("delete", handle)
            try:
                self.client.call(g.request("WORK_COMPLETE", handle.encode(), b"") + g.request("ECHO_REQ", b"x"))
                self.complete("ok", "delete", handle, done)
            except Broken as exc:
                self.broken("delete", handle, done, exc)
        self.client.close()

    def _sleep_until_noop(self) -> None:
        try:
            self.client.send(g.request("PRE_SLEEP"))
            self.client.read(SLEEP_WAIT, skip_noop=False)  # NOOP: work arrived; None: a second passed
        except Broken:
            pass  # the connection broke: the next grab finds out


def remaining(host: str, port: int) -> dict:
    """The server's `status` line for FUNCTION: jobs queued (waiting or running)."""
    with socket.create_connection((host, port), timeout=OP_TIMEOUT) as sock:
        sock.settimeout(OP_TIMEOUT)
        sock.sendall(b"status\n")
        data = b""
        while not data.endswith(b".\n"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    for line in data.decode().splitlines():
        fields = line.split("\t")
        if fields[0] == FUNCTION.decode() and len(fields) == 4:
            return {"queued": int(fields[1]), "running": int(fields[2])}
    return {"queued": 0, "running": 0}


def run(args) -> int:
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    history = History(args.history)
    tag = args.tag or secrets.token_hex(4)
    actors = [Submitter(f"s{n}", history, GearmanClient(args.host, args.port), stop,
                        rate=args.submit_rate / args.submitters, tag=tag) for n in range(args.submitters)]
    actors += [Worker(f"w{n}", history, GearmanClient(args.host, args.port), stop,
                      rate=args.work_rate / args.workers) for n in range(args.workers)]
    for actor in actors:
        actor.start()
    while not stop.is_set():
        stop.wait(0.5)
    for actor in actors:
        actor.join(timeout=OP_TIMEOUT + SLEEP_WAIT + 1)
    history.close()
    return 0


def drain(args) -> int:
    stop = threading.Event()
    history = History(args.history)
    deadline = time.monotonic() + args.timeout
    while True:
        # Drain workers are named d…: the checker counts their deliveries as drained.
        workers = [Worker(f"d{n}", history, GearmanClient(args.host, args.port), stop, rate=0, until_empty=True)
                   for n in range(args.workers)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(timeout=max(0.0, deadline - time.monotonic()))
        left = remaining(args.host, args.port)
        if left["queued"] == 0 or time.monotonic() >= deadline:
            break
    history.event(type="remaining", v=left)
    history.close()
    print(f"drained; remaining {left}")
    return 0 if left["queued"] == 0 else 1


def main(argv: list[str] | None = None) -> int:
    parser, run_options = mode_parser("python -m haqueue.lab.gearmanworkload", 4730, "workers", 3, 8)
    run_options.add_argument("--submitters", type=int, default=4)
    run_options.add_argument("--submit-rate", type=float, default=60.0, help="background submits per second, all")
    run_options.add_argument("--work-rate", type=float, default=30.0, help="grabs per second, all workers")
    args = parser.parse_args(argv)
    return run(args) if args.mode == "run" else drain(args)


if __name__ == "__main__":
    sys.exit(main())
