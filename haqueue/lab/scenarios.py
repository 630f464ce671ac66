"""The chaos lab's fault scenarios and their registry.

A scenario is a function `(lab, rng) -> fault`: it injects one fault into a whole
running lab, records when (CLOCK_MONOTONIC, as the workload does: `_fault(name,
node)` starts the dict) and what it measured, repairs the fault, and leaves the lab
to recover (runner.py waits until it is whole again). To add one: write the function
here, add it to SCENARIOS and a line to the list below; put it in STORAGE_SCENARIOS,
SEQUENCES or CAMPAIGN if it belongs there (tests/lab/test_chaos.py runs every
scenario in none of them in its process-and-network test). A figure the report
should print is one more line in report.py's format_report.

Scenarios (each a function of the lab and a seeded random source):
  kill-leader        SIGKILL the leader's haqueue; restart it once a new leader serves
  pause-leader       SIGSTOP the leader's haqueue for 2-4 s, then SIGCONT
  partition-leader   set the leader's eth1 down for 2-4 s (cut from both peers
                     and the clients), then up; measures how long until the
                     old leader's namespace no longer holds the VIP
  isolate-leader     detach the leader's port from the bridge for 2-4 s, then
                     reattach: its link stays up, so only the leader check
                     (haqueue stepping down) can take the VIP off it
  cut-follower       blackhole the leader and one follower from each other for
                     2-4 s (a partial partition: both still reach the third
                     node and the clients); records whether the leader kept
                     leading at its term (pre-vote: it should)
  kill-keepalived    SIGKILL keepalived on the leader; restart it 1 s later (as
                     the generated unit's Restart= would)
  restart-all        SIGKILL every haqueue node, start them again (durable -f0)
  rolling-restart    SIGTERM and restart each node in turn, followers first,
                     each caught up before the next
Storage faults (storage.py: each node's data directory is a small filesystem, each
node preloads a sync-fault shim, scripts/slow_fsync.c). A node hit by a disk fault
must exit non-zero on its own with one line naming the file and the error;
the fault records how long that took, its exit status and that line:
  disk-full-leader   fill the leader's disk (ENOSPC); once it has exited,
                     remove the filler and restart it
  disk-full-follower the same on a follower: clients should see nothing
  eio-leader         make the leader's fsync and fdatasync fail with EIO;
                     restart it without the fault
  kill-during-snapshot  SIGKILL a node together with its forked snapshot
                     writer (as a power cut or systemd's cgroup kill would),
                     timed into the snapshot window: while the writer writes,
                     or just after it renamed the new snapshot (before the
                     journal's prefix is dropped); the leader and a follower
                     alternately, each moment in turn; restart it. For the
                     first moment the node's syncs take 20 ms (a slow disk),
                     so the kill lands while the writer runs
  stall-fsync-leader every sync of the leader waits 2-3 s (longer than an
                     election timeout), then syncs are fast again
  cut-leader-to-follower  drop the leader's packets to one follower, one
                     way only (a blackhole route in the leader's namespace),
                     for 2-4 s; records whether the leader kept its term
  eio-follower       EIO on a follower's syncs: it exits; clients should see nothing
  slowdisk-leader    every sync of the leader takes 1 s for 5 s (a disk doing one
  slowdisk-follower  write a second), and the same on a follower; records the
                     longest time no node served as leader meanwhile
  sequence-restarts  issue 23's first sequence: kill -9 the leader and leave
                     it down, the one follower left gets a slow disk for 5 s,
                     restart the old leader, a follower's full disk (it exits,
                     is freed, restarted), kill -9 of the leader restarted at
                     once; each step records when a leader served again, and
                     the VIP
  sequence-eio       issue 23's second: EIO on the leader, the VIP's move, the
                     old leader's restart
  campaign           issue 23's storage campaign: each storage fault on the
                     leader and on a follower, snapshot kills, both sequences
                     (10 faults a round, shuffled)
Membership changes (member_scenarios.py, issue 27; by name only, not in mix or all):
  replace-node, grow-3-to-5, shrink-5-to-3  add-node/remove-node under load,
                     with the leader killed during the change
  mix                each fault drawn at random from all of them
  all                each of them in turn (a plan of runs x 14 faults)
  A,B,...            the named ones in turn (runs x their number)
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time

from haqueue.lab import member_scenarios, storage, topology
from haqueue.lab.lab import Lab, LabError, wait_for

RECOVERY_TIMEOUT = 30.0


def _fault(name: str, node: str | None, **extra) -> dict:
    return {"t": round(time.monotonic(), 6), "name": name, "node": node, **extra}


def elapsed(fault: dict) -> float:
    """Seconds since the fault was injected, as the report records them."""
    return round(time.monotonic() - fault["t"], 4)


def _watch_while_held(lab: Lab, leader: str, fault: dict, hold: float, vip: bool = False) -> None:
    """For a fault held `hold` seconds from its start: record when another node was elected
    (and, with `vip`, when the VIP reached it), then wait out the hold. The hold itself is
    the fault being injected, not synchronisation."""
    end = fault["t"] + hold
    new = wait_for(lambda: lab.leader(exclude=leader), max(0.0, end - time.monotonic()), step=0.01)
    if new:
        fault["elected_s"] = elapsed(fault)
        if vip and wait_for(lambda: lab.vip_holders() == [new], max(0.0, end - time.monotonic()), step=0.01):
            fault["vip_moved_s"] = elapsed(fault)
    time.sleep(max(0.0, end - time.monotonic()))


def kill_leader(lab: Lab, rng: random.Random) -> dict:
    leader = lab.wait_stable(RECOVERY_TIMEOUT)
    fault = _fault("kill-leader", leader)
    lab.signal(leader, signal.SIGKILL)
    lab.wait_exit(leader)
    _await_new_leader(lab, leader, fault)
    lab.start_node(leader)
    return fault


def _hold_leader(lab: Lab, rng: random.Random, name: str, key: str, longest: float, hold,
                 vip: bool = False) -> dict:
    """Hold the leader in a fault for 2 s to `longest` (recorded as `key`): hold(leader, True)
    starts it, hold(leader, False) ends it; meanwhile watch who is elected (and the VIP)."""
    leader = lab.wait_stable(RECOVERY_TIMEOUT)
    seconds = round(rng.uniform(2.0, longest), 2)
    fault = _fault(name, leader, **{key: seconds})
    hold(leader, True)
    try:
        _watch_while_held(lab, leader, fault, seconds, vip=vip)
    finally:
        hold(leader, False)
    return fault


def pause_leader(lab: Lab, rng: random.Random) -> dict:
    return _hold_leader(lab, rng, "pause-leader", "pause_s", 4.0,
                        lambda node, on: lab.signal(node, signal.SIGSTOP if on else signal.SIGCONT))


def _partition(lab: Lab, rng: random.Random, name: str, cut) -> dict:
    """Cut the leader off for 2-4 s with cut(leader, False), measure, heal with cut(leader, True)."""
    leader = lab.wait_stable(RECOVERY_TIMEOUT)
    hold = round(rng.uniform(2.0, 4.0), 2)
    ns = lab.state.node_ns(leader)
    fault = _fault(name, leader, partition_s=hold)
    cut(leader, False)
    try:
        gone = wait_for(lambda: lab.state.vip not in topology.addresses(ns), hold, step=0.01)
        fault["vip_released_s"] = elapsed(fault) if gone else None
        _watch_while_held(lab, leader, fault, hold)
    finally:
        cut(leader, True)
    return fault


def partition_leader(lab: Lab, rng: random.Random) -> dict:
    return _partition(lab, rng, "partition-leader",
                      lambda node, up: topology.set_link(lab.state.node_ns(node), up=up))


def isolate_leader(lab: Lab, rng: random.Random) -> dict:
    return _partition(lab, rng, "isolate-leader",
                      lambda node, up: topology.set_port(lab.state, node, attached=up))


def _blackholed_leader_kept(lab: Lab, leader: str, before: dict, cuts: list, until: float) -> bool:
    """Blackhole each (namespace, address) of `cuts` until `until`, then heal;
    True if `leader` led at its term throughout."""
    for ns, address in cuts:
        topology.set_blackhole(ns, address, True)
    kept = True
    try:
        while time.monotonic() < until:
            # The cut itself is the fault; this loop watches the leader through it.
            now = lab.node_status(leader) or {}
            if now.get("role") != "leader" or now.get("term") != before.get("term"):
                kept = False
            time.sleep(0.02)
    finally:
        for ns, address in cuts:
            topology.set_blackhole(ns, address, False)
    return kept


def cut_follower(lab: Lab, rng: random.Random) -> dict:
    return _cut_leader_and_a_follower(lab, rng, "cut-follower", both_ways=True)


def _cut_leader_and_a_follower(lab: Lab, rng: random.Random, name: str, both_ways: bool) -> dict:
    """Blackhole the leader's packets to a random follower (and the follower's back, if
    both_ways) for 2-4 s; record whether the leader kept leading at its term."""
    leader = lab.wait_stable(RECOVERY_TIMEOUT)
    follower = rng.choice([n for n in lab.node_ids if n != leader])
    hold = round(rng.uniform(2.0, 4.0), 2)
    before = lab.node_status(leader) or {}
    fault = _fault(name, leader, follower=follower, partition_s=hold)
    state = lab.state
    cuts = [(state.node_ns(leader), state.node_address(follower))]
    if both_ways:
        cuts.append((state.node_ns(follower), state.node_address(leader)))
    fault["leader_kept"] = _blackholed_leader_kept(lab, leader, before, cuts, fault["t"] + hold)
    return fault


def kill_keepalived(lab: Lab, rng: random.Random) -> dict:
    leader = lab.wait_stable(RECOVERY_TIMEOUT)
    name = f"keepalived-{leader}"
    fault = _fault("kill-keepalived", leader)
    lab.signal(name, signal.SIGKILL)
    lab.wait_exit(name)
    # systemd's Restart= would bring it back after RestartSec; stand in for that.
    time.sleep(1.0)
    lab.start_keepalived(leader)
    return fault


def restart_all(lab: Lab, rng: random.Random) -> dict:
    leader = lab.wait_stable(RECOVERY_TIMEOUT)
    fault = _fault("restart-all", leader)
    for node_id in lab.node_ids:
        lab.signal(node_id, signal.SIGKILL)
    for node_id in lab.node_ids:
        lab.wait_exit(node_id)
    for node_id in lab.node_ids:
        lab.start_node(node_id)
    return fault


def rolling_restart(lab: Lab, rng: random.Random) -> dict:
    leader = lab.wait_stable(RECOVERY_TIMEOUT)
    followers = [n for n in lab.node_ids if n != leader]
    rng.shuffle(followers)
    fault = _fault("rolling-restart", leader, order=followers + [leader])
    for node_id in followers + [leader]:
        lab.signal(node_id, signal.SIGTERM)
        lab.wait_exit(node_id, timeout=15)
        lab.start_node(node_id)
        lab.wait_stable(RECOVERY_TIMEOUT)
    return fault


NODE_EXIT_TIMEOUT = 10.0  # a node that cannot write must stop on its own well within this


def _await_storage_death(lab: Lab, node: str, fault: dict) -> None:
    """Wait for a node hit by a disk fault to exit on its own; record how and how soon."""
    exited = wait_for(lambda: not lab.alive(node), NODE_EXIT_TIMEOUT, step=0.005)
    if not exited:
        raise LabError(f"{fault.get('name', fault.get('step'))}: {node} still running {NODE_EXIT_TIMEOUT:g} s "
                       f"after the fault "
                       f"(log {lab.log_path(node)}): {lab.describe()}")
    fault["exited_s"] = elapsed(fault)
    lab.wait_exit(node)
    fault["exit_code"] = lab.exit_code(node)
    fault["message"] = lab.last_log_line(node)[-300:]


def _await_new_leader(lab: Lab, old: str, fault: dict) -> None:
    new = wait_for(lambda: lab.leader(exclude=old), RECOVERY_TIMEOUT, step=0.01)
    if new is None:
        raise LabError(f"{fault['name']}: no new leader within {RECOVERY_TIMEOUT:g} s: {lab.describe()}")
    fault["elected_s"] = elapsed(fault)
    moved = wait_for(lambda: lab.vip_holders() == [new], RECOVERY_TIMEOUT, step=0.01)
    fault["vip_moved_s"] = elapsed(fault) if moved else None


def _disk_full(lab: Lab, name: str, node: str, leader: str) -> dict:
    data = lab.data_dir(node)
    fault = _fault(name, node, leader=leader)
    try:
        fault["filler_bytes"] = storage.fill(data)
        _await_storage_death(lab, node, fault)
        if node == leader:
            _await_new_leader(lab, node, fault)
    finally:
        storage.unfill(data)  # the operator frees space, then restarts the node
    lab.start_node(node)
    return fault


def disk_full_leader(lab: Lab, rng: random.Random) -> dict:
    leader = lab.wait_stable(RECOVERY_TIMEOUT)
    return _disk_full(lab, "disk-full-leader", leader, leader)


def disk_full_follower(lab: Lab, rng: random.Random) -> dict:
    leader = lab.wait_stable(RECOVERY_TIMEOUT)
    follower = rng.choice([n for n in lab.node_ids if n != leader])
    return _disk_full(lab, "disk-full-follower", follower, leader)


def eio_leader(lab: Lab, rng: random.Random) -> dict:
    leader = lab.wait_stable(RECOVERY_TIMEOUT)
    fault = _fault("eio-leader", leader)
    storage.fail_syncs(lab.dir, leader)
    _await_storage_death(lab, leader, fault)
    _await_new_leader(lab, leader, fault)
    lab.start_node(leader)  # a new process: no failure point enabled
    return fault


def eio_follower(lab: Lab, rng: random.Random) -> dict:
    leader = lab.wait_stable(RECOVERY_TIMEOUT)
    node = rng.choice([n for n in lab.node_ids if n != leader])
    fault = _fault("eio-follower", node, leader=leader)
    storage.fail_syncs(lab.dir, node)
    _await_storage_death(lab, node, fault)
    lab.start_node(node)
    return fault


SLOW_DISK_S = 5.0  # issue 23: a follower's disk did one write a second for 5 s
SLOW_SYNC_US = 1_000_000


def _slow_disk(lab: Lab, name: str, node: str, leader: str) -> dict:
    """Every sync of `node` takes 1 s for SLOW_DISK_S; record who led meanwhile."""
    fault = _fault(name, node, leader=leader, slow_s=SLOW_DISK_S)
    storage.set_fsync_stall(lab.dir, node, SLOW_SYNC_US)
    try:
        fault["leaderless_s"] = _leaderless(lab, fault["t"] + SLOW_DISK_S)
    finally:
        storage.clear(lab.dir, node)
    return fault


def slow_disk_leader(lab: Lab, rng: random.Random) -> dict:
    leader = lab.wait_stable(RECOVERY_TIMEOUT)
    return _slow_disk(lab, "slowdisk-leader", leader, leader)


def slow_disk_follower(lab: Lab, rng: random.Random) -> dict:
    leader = lab.wait_stable(RECOVERY_TIMEOUT)
    return _slow_disk(lab, "slowdisk-follower", rng.choice([n for n in lab.node_ids if n != leader]), leader)


def _leaderless(lab: Lab, until: float) -> float:
    """Watch until `until`: the longest time no node served as leader (seconds). The
    watching is the measurement, not synchronisation."""
    longest, since = 0.0, None
    while True:
        now = time.monotonic()
        if lab.leader() is None:
            since = now if since is None else since
            longest = max(longest, now - since)
        else:
            since = None
        if now >= until:
            return round(longest, 3)
        time.sleep(0.02)


def _step(lab: Lab, fault: dict, name: str, node: str | None, **extra) -> dict:
    """One step of a sequence, recorded in fault["steps"] with its time from the sequence's start."""
    step = {"step": name, "node": node, "t": round(time.monotonic(), 6), "at_s": elapsed(fault), **extra}
    fault.setdefault("steps", []).append(step)
    return step


def _served_again(lab: Lab, fault: dict, step: dict) -> str:
    """Wait for a serving leader after a step; record how long it took from the step."""
    began = time.monotonic()
    leader = wait_for(lab.leader, RECOVERY_TIMEOUT, step=0.01)
    step["leader_after_s"] = round(time.monotonic() - began, 3)
    if leader is None:
        raise LabError(f"{fault['name']}: no serving leader {RECOVERY_TIMEOUT:g} s after {step['step']} on "
                       f"{step['node']}: {lab.describe()}")
    step["leader"] = leader
    moved = wait_for(lambda: lab.vip_holders() == [leader], RECOVERY_TIMEOUT, step=0.01)
    step["vip_after_s"] = round(time.monotonic() - began, 3) if moved else None
    return leader


def sequence_restarts(lab: Lab, rng: random.Random) -> dict:
    """Issue 23's first sequence: kill -9 the leader and leave it down; while it is down the
    one follower left gets a slow disk (one write a second) for 5 s (`leaderless_s`: the
    longest time nobody served meanwhile); restart the old leader; a follower's disk fills
    (it exits, is freed, restarted); kill -9 the leader and restart it at once. Each step
    records when a leader served again and when the VIP reached it; the next step waits
    until the lab is whole again (one fault at a time, apart from the first two)."""
    leader = lab.wait_stable(RECOVERY_TIMEOUT)
    fault = _fault("sequence-restarts", leader)
    old = leader
    step = _step(lab, fault, "kill -9 leader", old)
    lab.signal(old, signal.SIGKILL)
    lab.wait_exit(old)
    leader = _served_again(lab, fault, step)
    slow = next(n for n in lab.node_ids if n not in (leader, old))
    step = _step(lab, fault, "slow disk 5 s, the old leader down", slow)
    storage.set_fsync_stall(lab.dir, slow, SLOW_SYNC_US)
    try:
        step["leaderless_s"] = _leaderless(lab, time.monotonic() + SLOW_DISK_S)
    finally:
        storage.clear(lab.dir, slow)
    _served_again(lab, fault, step)
    step = _step(lab, fault, "restart the old leader", old)
    lab.start_node(old)
    _served_again(lab, fault, step)
    leader = lab.wait_stable(RECOVERY_TIMEOUT)
    full = rng.choice([n for n in lab.node_ids if n != leader])
    step = _step(lab, fault, "disk full, restart", full)
    try:
        storage.fill(lab.data_dir(full))
        _await_storage_death(lab, full, step)
    finally:
        storage.unfill(lab.data_dir(full))
    lab.start_node(full)
    _served_again(lab, fault, step)
    leader = lab.wait_stable(RECOVERY_TIMEOUT)
    step = _step(lab, fault, "kill -9 leader, restart at once", leader)
    lab.signal(leader, signal.SIGKILL)
    lab.wait_exit(leader)
    lab.start_node(leader)
    _served_again(lab, fault, step)
    return fault


def sequence_eio(lab: Lab, rng: random.Random) -> dict:
    """Issue 23's second sequence: EIO on the leader's syncs; it exits; the VIP must reach the
    new leader (recorded: leader_after_s, vip_after_s); the old leader restarts without the fault."""
    leader = lab.wait_stable(RECOVERY_TIMEOUT)
    fault = _fault("sequence-eio", leader)
    step = _step(lab, fault, "EIO on the leader", leader)
    storage.fail_syncs(lab.dir, leader)
    _await_storage_death(lab, leader, step)
    _served_again(lab, fault, step)
    step = _step(lab, fault, "restart it", leader)
    lab.start_node(leader)
    _served_again(lab, fault, step)
    return fault


SNAPSHOT_WAIT = 20.0  # with the lab's small -s a snapshot starts every second or two


def _disk_view(lab: Lab, node: str, tag: str) -> dict:
    """What the killed node left on disk (diskview.py), read from a copy; the copy is kept
    (LAB_DIR/evidence/TAG) only when something is wrong with it."""
    copy = lab.dir / "evidence" / f"{time.strftime('%Y%m%dT%H%M%S')}-{tag}"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(lab.data_dir(node), copy)
    proc = subprocess.run([sys.executable, "-m", "haqueue.lab.diskview", str(copy)],
                          capture_output=True, text=True, timeout=60)
    try:
        view = json.loads(proc.stdout)
    except ValueError:
        view = {"error": (proc.stderr.strip().splitlines() or ["no output"])[-1], "entries_at_risk": 0}
    if view.get("error") or view.get("entries_at_risk"):
        view["evidence"] = str(copy)
    else:
        shutil.rmtree(copy, ignore_errors=True)
    return view


def kill_during_snapshot(lab: Lab, rng: random.Random) -> dict:
    leader = lab.wait_stable(RECOVERY_TIMEOUT)
    n = lab.rounds.get("kill-during-snapshot", 0)
    lab.rounds["kill-during-snapshot"] = n + 1
    node = leader if n % 2 == 0 else rng.choice([x for x in lab.node_ids if x != leader])
    # leader/writing, follower/renamed, leader/renamed, follower/writing, ...: two faults
    # already cover both roles and both moments, four every pairing.
    moment = "writing" if n % 4 in (0, 3) else "renamed"
    snap = lab.data_dir(node) / "raft.snapshot"
    writing = snap.with_name(snap.name + ".writing")

    def inode() -> int | None:
        try:
            return os.stat(snap).st_ino
        except FileNotFoundError:
            return None

    before = inode()
    if moment == "writing":
        # A 20 ms sync (a slow disk) keeps the writer on its fsync long enough
        # for the kill to land while it writes; on tmpfs it is done in microseconds.
        storage.set_fsync_stall(lab.dir, node, 20_000)
        hit = lambda: writing.exists()  # noqa: E731
    else:
        hit = lambda: inode() not in (before, None)  # noqa: E731  the rename just landed
    started = time.monotonic()
    # Watching for the window is the fault's aim, not synchronisation: poll tight.
    found = wait_for(hit, SNAPSHOT_WAIT, step=0.0005)
    if not found:
        storage.clear(lab.dir, node)
        raise LabError(f"kill-during-snapshot: {node} started no snapshot within {SNAPSHOT_WAIT:g} s "
                       f"(is the lab's --journal-size small? it is {lab.state.journal_size})")
    fault = _fault("kill-during-snapshot", node, leader=leader, moment=moment,
                   waited_s=round(time.monotonic() - started, 3))
    lab.kill_group(node)
    # Left behind only when the writer died before its rename.
    fault["writer_killed_mid_write"] = writing.exists()
    lab.wait_exit(node)
    if node == leader:
        _await_new_leader(lab, node, fault)
    fault["disk"] = _disk_view(lab, node, f"{n + 1}-{node}-{moment}")
    lab.start_node(node)
    return fault


def stall_fsync_leader(lab: Lab, rng: random.Random) -> dict:
    # Stalled until told otherwise (the shim re-reads the file while it waits); the VIP is
    # followed too: does it move while the old leader is still stalled?
    return _hold_leader(lab, rng, "stall-fsync-leader", "stall_s", 3.0,
                        lambda node, on: storage.set_fsync_stall(lab.dir, node, 3_600_000_000 if on else 0),
                        vip=True)


def cut_leader_to_follower(lab: Lab, rng: random.Random) -> dict:
    # The leader's packets to the follower only; the follower's still arrive.
    return _cut_leader_and_a_follower(lab, rng, "cut-leader-to-follower", both_ways=False)


# The registry: `--scenario` names -> scenarios. `mix`, `all` and `campaign` draw from it.
SCENARIOS = {
    "kill-leader": kill_leader,
    "pause-leader": pause_leader,
    "partition-leader": partition_leader,
    "isolate-leader": isolate_leader,
    "cut-follower": cut_follower,
    "kill-keepalived": kill_keepalived,
    "restart-all": restart_all,
    "rolling-restart": rolling_restart,
    "disk-full-leader": disk_full_leader,
    "disk-full-follower": disk_full_follower,
    "eio-leader": eio_leader,
    "kill-during-snapshot": kill_during_snapshot,
    "stall-fsync-leader": stall_fsync_leader,
    "cut-leader-to-follower": cut_leader_to_follower,
    "eio-follower": eio_follower,
    "slowdisk-leader": slow_disk_leader,
    "slowdisk-follower": slow_disk_follower,
    "sequence-restarts": sequence_restarts,
    "sequence-eio": sequence_eio,
}
FOLLOWER_FAULTS = ("disk-full-follower", "eio-follower")  # clients must see nothing
# Membership changes (issue 27, member_scenarios.py): by name only, never in mix or all,
# which would change the cluster's size under the other scenarios.
MEMBERSHIP = member_scenarios.SCENARIOS
CHOICES = (*SCENARIOS, *MEMBERSHIP, "mix", "all", "campaign")


STORAGE_SCENARIOS = ("disk-full-leader", "disk-full-follower", "eio-leader", "eio-follower", "slowdisk-leader",
                     "slowdisk-follower", "kill-during-snapshot", "stall-fsync-leader", "cut-leader-to-follower")
SEQUENCES = ("sequence-restarts", "sequence-eio")
# Issue 23's storage campaign: every storage fault on the leader and on a follower
# (kill-during-snapshot alternates the two), and the two sequences it reported.
CAMPAIGN = ("disk-full-leader,disk-full-follower,eio-leader,eio-follower,slowdisk-leader,slowdisk-follower,"
            "kill-during-snapshot*2,sequence-restarts,sequence-eio")
