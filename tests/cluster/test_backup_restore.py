"""Backup under a steady load, restore into a fresh three-node cluster (issue 27).

Cluster A holds a job in every state (ready at two priorities, delayed, buried
out of id order, reserved by a connection held open, in a paused tube) and
has handed out id-service ids in exact and segment mode, while a checked
workload puts, reserves, deletes and buries. `haqueue backup` runs in the
middle of that load; the load and the id requests go on after it, so A hands
out job ids and ids the backup does not know. A is stopped, `haqueue restore`
prepares cluster B's three data directories, and B starts on them. Then:

- B holds exactly the backup's jobs, each with its tube, state, priority,
  time-to-run and body (the reservation, whose connection died with A, is
  ready again, as after a failover), the buried jobs in their order, the
  delayed job and the paused tube with their time left;
- every acknowledged put that was neither deleted nor sent for deletion
  before the backup began is in it (the copy is of committed state);
- B's next job id and its next ids of both rules are above every id A
  ever handed out, including the ones after the backup;
- B's three nodes agree (one digest), also after a follower's kill -9 and
  restart; A recorded the backup as events.
"""

from __future__ import annotations

import json
import time
import urllib.request

import greenstalk

from haqueue import admin_client
from haqueue.backup import fileformat
from haqueue.cli.main import main
from haqueue.core.job import RESERVED, STATE_NAMES
from tests.cluster.clients import client_for
from tests.cluster.convergence import wait_converged
from tests.cluster.workload import Workload

SEGMENT_RULE = """
[[id_rules]]
name = "seg"
format = "{counter:019}"
mode = "segment"
segment = 50
"""


def get_id(member, rule: str) -> int:
    url = f"http://{member.address}:{member.admin_port}/id/{rule}/backup-test"
    with urllib.request.urlopen(url, timeout=5) as answer:
        reply = json.loads(answer.read())
    assert reply["code"] == 0, reply
    return int(reply["data"])


def fixture_jobs(client: greenstalk.Client) -> dict[str, int]:
    """A job in every state; the reserved one stays held by `client`."""
    ids = {}
    client.use("fixed")
    ids["pri5"] = client.put(b"pri5", priority=5, ttr=30)
    ids["pri1"] = client.put(b"pri1", priority=1, ttr=90)
    ids["later"] = client.put(b"later", priority=7, delay=600, ttr=45)
    client.use("tobury")
    ids["bury-second"] = client.put(b"bury-second", priority=2)
    ids["bury-first"] = client.put(b"bury-first", priority=1)
    client.watch("tobury")
    client.ignore("default")
    for name in ("bury-first", "bury-second"):
        job = client.reserve(timeout=5)
        assert job.id == ids[name]
        client.bury(job, priority=3)
    client.use("paused")
    ids["paused"] = client.put(b"paused")
    client.pause_tube("paused", 600)
    client.use("held")
    ids["held"] = client.put(b"held", priority=9, ttr=300)
    client.watch("held")
    client.ignore("tobury")
    job = client.reserve(timeout=5)
    assert job.id == ids["held"]
    return ids


def test_backup_under_load_restores_into_a_new_cluster_with_every_job_and_ids_above_all(make_cluster, tmp_path,
                                                                                         capsys):
    backup_file = tmp_path / "a.haqbackup"
    a = make_cluster(["-f0"], start=False)
    with open(a.config_path, "a") as file:
        file.write(SEGMENT_RULE)
    a.start()
    leader = a.leader(timeout=15)
    assert leader is not None
    holder = client_for(a, leader.id)
    fixed = fixture_jobs(holder)
    ids_before = {rule: [get_id(leader, rule) for _ in range(20)] for rule in ("counter", "seg")}

    load = Workload(a, producers=2, consumers=1).start()
    try:
        assert load.wait_for_puts(leader.id, 300, timeout=20), "the load did not get going"
        started = time.monotonic()
        assert main(["backup", "--config", str(a.config_path), "-o", str(backup_file)]) == 0
        assert "backup of entry" in capsys.readouterr().out
        # A goes on: puts and ids the backup cannot know of.
        count = len(load.ledger.puts)
        deadline = time.monotonic() + 10
        while len(load.ledger.puts) < count + 300 and time.monotonic() < deadline:
            time.sleep(0.02)
        ids_after = {rule: [get_id(leader, rule) for _ in range(20)] for rule in ("counter", "seg")}
        # Asked of a follower, the command follows its answer to the leader.
        follower = next(m for m in a.spec.nodes if m.id != leader.id)
        assert main(["backup", "--address", f"{follower.address}:{follower.admin_port}",
                     "-o", str(tmp_path / "via-follower.haqbackup")]) == 0
        assert f"taken on {leader.id}" in capsys.readouterr().out
    finally:
        ledger = load.stop()
    assert not ledger.errors, ledger.errors
    events = [e["event"] for e in admin_client.status(leader.address, leader.admin_port, 2.0)["events"]]
    assert "backup_started" in events and "backup_sent" in events
    holder.close()
    a.stop()  # the old cluster is gone; its ids after the backup must not come back

    records, fields = fileformat.decode(backup_file.read_bytes())
    jobs = {rec[0]: rec for rec in records[5]}
    assert {fixed[k] for k in fixed} <= set(jobs)
    # Committed state: every put acknowledged before the backup began is there, unless
    # a delete was sent for it (an unacknowledged delete may have been applied).
    certain = {p.id for p in ledger.puts.values() if p.acked_at < started} - ledger.delete_sent
    assert certain <= set(jobs), f"acknowledged jobs missing from the backup: {sorted(certain - set(jobs))[:10]}"
    sent_bodies = {p.body for p in ledger.puts.values()} | ledger.unknown_puts
    assert all(rec[5] in sent_bodies or rec[0] in fixed.values() for rec in jobs.values())
    highest_job_id = max(max(ledger.puts), *fixed.values())

    b = make_cluster(["-f0"], start=False)
    with open(b.config_path, "a") as file:
        file.write(SEGMENT_RULE)
    dirs = [str(b.workdir / member.id) for member in b.spec.nodes]
    assert main(["restore", str(backup_file), *[arg for d in dirs for arg in ("-b", d)]]) == 0
    out = capsys.readouterr().out
    assert f"restored {len(jobs)} jobs" in out
    b.start()
    leader_b = b.leader(timeout=15)
    assert leader_b is not None
    client = client_for(b, leader_b.id)
    try:
        # Every job of the backup, as it was (a reservation is gone with its connection).
        seen = 0
        for job_id, rec in jobs.items():
            stats = client.stats_job(job_id)
            state = rec[6] if rec[6] != RESERVED else 0
            assert (stats["tube"], stats["state"], stats["pri"], stats["ttr"]) == (
                rec[1], STATE_NAMES[state], rec[2], rec[4] // 1000), (job_id, stats, rec)
            assert client.peek(job_id).body == rec[5]
            seen += 1
        stats = client.stats()
        assert stats["current-jobs-ready"] + stats["current-jobs-delayed"] + stats["current-jobs-buried"] \
            + stats["current-jobs-reserved"] == seen == len(jobs)
        later = client.stats_job(fixed["later"])
        assert later["state"] == "delayed" and 500 < later["time-left"] <= 600
        assert client.stats_tube("paused")["pause-time-left"] > 500
        assert client.stats_job(fixed["held"])["state"] == "ready"
        client.use("tobury")
        assert client.peek_buried().id == fixed["bury-first"]  # FIFO, not id order
        assert client.kick(1) == 1
        assert client.peek_buried().id == fixed["bury-second"]
        # Ids continue above every id A handed out, before and after the backup.
        client.use("new")
        assert client.put(b"first in b") > highest_job_id
    finally:
        client.close()
    for rule in ("counter", "seg"):
        assert get_id(leader_b, rule) > max(ids_before[rule] + ids_after[rule])
    wait_converged(b, timeout=15)
    # A restored node restarts from its own journal after the restored snapshot.
    follower = next(m.id for m in b.spec.nodes if m.id != leader_b.id)
    b.kill_node(follower)
    b.start_node(follower)
    wait_converged(b, timeout=20)
