"""The lab's id workload: closed-loop UDP clients asking the VIP for ids, every request recorded.

Run in the client namespace as its own process, beside the queue workload:

    ip netns exec hqlab-client python -m haqueue.lab.idworkload --host VIP --port 1200 --history FILE

Each client is what id_server's own client is: a UDP socket `connect()`ed to
the VIP (so a reply from any other address is dropped by the kernel), one
request, wait for the reply, the next. It keeps going until SIGTERM/SIGINT.

History events (JSON lines, the queue workload's shape, workload.py):
    {"t", "w", "i", "type": "invoke" | "ok" | "fail" | "unknown", "f": "get", "v": "RULE/APP"}
- `ok` carries {"id": the id as the service rendered it}: code 0, and only code 0.
  Requests carry `seq` (the op id, echoed by the service) so that a late reply
  to a timed-out request is never taken for the next one's.
- `fail` is any other reply ({"err": its `error`}): not_leader, exhausted… The
  service says it handed out nothing.
- `unknown` is no reply within REPLY_TIMEOUT (0.2 s): the id may have been reserved
  and is then wasted, never handed out again (docs/id-service.md).
The checker (idchecker.py) reads it.
"""

from __future__ import annotations

import argparse
import json
import signal
import socket
import sys
import threading
import time

from haqueue.lab.workload import History

# The built-in plain increasing rule (exact mode) and the lab's segment-mode twin
# (lab.py's cluster file): both render the bare counter, so ids compare as integers.
RULES = ("counter", "segment")
# How long a client waits for a reply before it asks again. id_server's client
# waits 2 s; the lab asks again sooner so that failover is measured at 0.2 s
# resolution (the service's gap, not a client's timeout: a client with a 1 s
# timeout adds up to that to it). Normal replies take milliseconds.
REPLY_TIMEOUT = 0.2
MAX_REPLY = 256  # what id_server's client reads


class IdClient(threading.Thread):
    def __init__(self, name: str, history: History, host: str, port: int, rule: str, app: str, rate: float,
                 stop: threading.Event) -> None:
        super().__init__(name=name, daemon=True)
        self.history = history
        self.address = (host, port)
        self.rule = rule
        self.app = app
        self.interval = 1.0 / rate if rate > 0 else 0.0
        self.stop = stop

    def run(self) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.connect(self.address)
        sock.settimeout(REPLY_TIMEOUT)
        key = f"{self.rule}/{self.app}"
        next_at = time.monotonic()
        try:
            while not self.stop.is_set():
                if self.interval:
                    next_at = max(next_at + self.interval, time.monotonic())
                    self.stop.wait(max(0.0, next_at - time.monotonic()))
                op = next(self.history.ids)
                self.history.event(type="invoke", f="get", v=key, w=self.name, i=op)
                self.history.event(**self.ask(sock, op), f="get", v=key, w=self.name, i=op)
        finally:
            sock.close()

    def ask(self, sock: socket.socket, op: int) -> dict:
        request = json.dumps({"action": "get", "rule_name": self.rule, "app_name": self.app, "seq": op}).encode()
        try:
            sock.send(request)
            deadline = time.monotonic() + REPLY_TIMEOUT
            while True:
                sock.settimeout(max(0.001, deadline - time.monotonic()))
                reply = json.loads(sock.recv(MAX_REPLY))
                if reply.get("seq") != op:
                    # A late reply to an earlier, timed-out request: its id went to
                    # nobody (the history has that request as unknown). Taking it
                    # for this one would date it after ids it preceded.
                    continue
                if reply.get("code") == 0:
                    return {"type": "ok", "id": reply.get("data")}
                return {"type": "fail", "err": reply.get("error") or reply.get("message")}
        except (socket.timeout, TimeoutError):
            return {"type": "unknown", "err": "timeout"}
        except OSError as exc:  # ICMP port unreachable while no node holds the VIP's port
            return {"type": "unknown", "err": exc.__class__.__name__, "io": True}
        except ValueError:
            return {"type": "unknown", "err": "unreadable reply"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m haqueue.lab.idworkload")
    parser.add_argument("--host", required=True)
    parser.add_argument("--port", type=int, default=1200)
    parser.add_argument("--history", required=True)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--rate", type=float, default=50.0, help="requests per second, each client")
    parser.add_argument("--app", default="lab")
    parser.add_argument("--rules", default=",".join(RULES), help="rules the clients take in turn")
    args = parser.parse_args(argv)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    history = History(args.history)
    rules = args.rules.split(",")
    clients = [IdClient(f"id{n}", history, args.host, args.port, rules[n % len(rules)], args.app, args.rate, stop)
               for n in range(args.clients)]
    for client in clients:
        client.start()
    while not stop.is_set():
        stop.wait(0.5)
    for client in clients:
        client.join(timeout=REPLY_TIMEOUT * 2)
    history.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
