"""The protocol's view of a node serving a stored old journal (tests/testdata/journals).

Owns: `observe`, what a node answers about its state over the beanstalkd
protocol, the id service and Gearman's admin protocol, with every
time-dependent field left out; scripts/write-old-journal records it from the old
code, tests/replication/test_old_journals.py compares the current code's with it.
Also the small client both use.
"""

from __future__ import annotations

import json
import socket

from tests.support.servers import HOST, RawConn

TEN_YEARS = 10 * 365 * 86400  # delays and pauses that outlast any test run
TIME_DEPENDENT = {"age", "time-left", "pause-time-left", "file"}


def yaml_dict(body: bytes) -> dict:
    """beanstalkd's flat YAML (stats-*) as a dict of str -> str."""
    out = {}
    for line in body.decode().splitlines()[1:]:
        key, _, value = line.partition(": ")
        out[key] = value
    return out


def yaml_list(body: bytes) -> list[str]:
    return [line[2:] for line in body.decode().splitlines()[1:]]


def body_of(reply: bytes) -> bytes:
    return reply.split(b"\r\n", 1)[1][:-2]


class Client(RawConn):
    def cmd(self, line: str, body: bytes | None = None, expect: str | None = None) -> bytes:
        data = line.encode() + b"\r\n"
        if body is not None:
            data += body + b"\r\n"
        self.send(data)
        reply = self.recv_reply()
        if expect is not None and not reply.startswith(expect.encode()):
            raise RuntimeError(f"{line!r}: expected {expect}, got {reply[:80]!r}")
        return reply

    def put(self, pri: int, delay: int, ttr: int, body: bytes) -> int:
        reply = self.cmd(f"put {pri} {delay} {ttr} {len(body)}", body, expect="INSERTED")
        return int(reply.split()[1])

    def reserved_id(self, line: str = "reserve-with-timeout 0") -> int:
        return int(self.cmd(line, expect="RESERVED").split()[1])


def id_get(port: int, app: str) -> str:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(5)
        s.sendto(json.dumps({"action": "get", "rule_name": "counter", "app_name": app}).encode(), (HOST, port))
        reply = json.loads(s.recv(65536))
    if reply.get("code") != 0:
        raise RuntimeError(f"id get: {reply}")
    return reply["data"]


def observe(port: int, id_port: int | None = None, gearman_port: int | None = None) -> dict:
    """The protocol's view of a (restarted) node; no time-dependent fields."""
    c = Client(HOST, port)
    out = {}
    stats = yaml_dict(body_of(c.cmd("stats", expect="OK")))
    out["stats"] = {k: stats[k] for k in ("current-jobs-urgent", "current-jobs-ready", "current-jobs-reserved",
                                          "current-jobs-delayed", "current-jobs-buried", "total-jobs",
                                          "current-tubes")}
    tubes = sorted(yaml_list(body_of(c.cmd("list-tubes", expect="OK"))))
    out["tubes"] = {}
    for tube in tubes:
        st = yaml_dict(body_of(c.cmd(f"stats-tube {tube}", expect="OK")))
        out["tubes"][tube] = {k: v for k, v in st.items() if k not in TIME_DEPENDENT}
        # which job comes first: priority order, and the buried queue's order
        c.cmd(f"use {tube}", expect="USING")
        for kind in ("ready", "delayed", "buried"):
            reply = c.cmd(f"peek-{kind}")
            out["tubes"][tube][f"peek-{kind}"] = int(reply.split()[1]) if reply.startswith(b"FOUND") else None
    c.cmd("use default", expect="USING")
    out["jobs"] = {}
    for job_id in range(1, int(stats["total-jobs"]) + 1):
        reply = c.cmd(f"stats-job {job_id}")
        if reply.startswith(b"NOT_FOUND"):
            continue
        st = yaml_dict(body_of(reply))
        body = body_of(c.cmd(f"peek {job_id}", expect="FOUND"))
        out["jobs"][str(job_id)] = {"stats": {k: v for k, v in st.items() if k not in TIME_DEPENDENT},
                                    "body": body.decode("latin-1")}
    c.close()
    if id_port:
        out["next_id"] = id_get(id_port, "orders")
    if gearman_port:
        from tests.support.gearman import GearConn
        gc = GearConn(gearman_port)
        out["gearman_status"] = sorted(gc.admin(b"status").decode().splitlines())
        gc.close()
    return out
