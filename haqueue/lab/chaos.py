"""Fault scenarios against a running lab, under a workload, then a drain and a checked history.

One chaos run (`run_chaos`):
1. Wait until the lab is whole (every process up, one serving leader, the VIP
   on it alone), empty the queue of anything an interrupted earlier run left,
   start the workload in the client namespace, wait for its first
   acknowledged put.
2. For each planned fault: let the load run undisturbed for a random 1-2 s
   (so faults land at different phases of Raft and keepalived timers), inject
   the fault, record its time (CLOCK_MONOTONIC, as the workload does) and
   what was measured, repair, and wait until the lab is whole again.
3. Stop the workload, drain the queue through the VIP, check the history
   (checker.py) and report.

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
  restart-all        SIGKILL all three haqueue nodes, start them again (durable -f0)
  rolling-restart    SIGTERM and restart each node in turn, followers first,
                     each caught up before the next
  mix                each fault drawn at random from the above
  all                each of the above in turn (a plan of runs x 8 faults)
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from haqueue.lab import checker, topology
from haqueue.lab.workload import TTR as workload_ttr
from haqueue.lab.lab import NODE_IDS, Lab, LabError, wait_for

RECOVERY_TIMEOUT = 30.0


def _fault(name: str, node: str | None, **extra) -> dict:
    return {"t": round(time.monotonic(), 6), "name": name, "node": node, **extra}


def kill_leader(lab: Lab, rng: random.Random) -> dict:
    leader = lab.wait_stable(RECOVERY_TIMEOUT)
    fault = _fault("kill-leader", leader)
    lab.signal(leader, signal.SIGKILL)
    lab.wait_exit(leader)
    new = wait_for(lambda: lab.leader(exclude=leader), RECOVERY_TIMEOUT, step=0.01)
    if new is None:
        raise LabError(f"kill-leader: no new leader within {RECOVERY_TIMEOUT:g} s: {lab.describe()}")
    fault["elected_s"] = round(time.monotonic() - fault["t"], 4)
    moved = wait_for(lambda: lab.vip_holders() == [new], RECOVERY_TIMEOUT, step=0.01)
    fault["vip_moved_s"] = round(time.monotonic() - fault["t"], 4) if moved else None
    lab.start_node(leader)
    return fault


def pause_leader(lab: Lab, rng: random.Random) -> dict:
    leader = lab.wait_stable(RECOVERY_TIMEOUT)
    pause = round(rng.uniform(2.0, 4.0), 2)
    fault = _fault("pause-leader", leader, pause_s=pause)
    lab.signal(leader, signal.SIGSTOP)
    try:
        # The pause itself is the fault being injected, not synchronisation.
        new = wait_for(lambda: lab.leader(exclude=leader), pause, step=0.01)
        if new:
            fault["elected_s"] = round(time.monotonic() - fault["t"], 4)
        time.sleep(max(0.0, fault["t"] + pause - time.monotonic()))
    finally:
        lab.signal(leader, signal.SIGCONT)
    return fault


def _partition(lab: Lab, rng: random.Random, name: str, cut) -> dict:
    """Cut the leader off for 2-4 s with cut(leader, False), measure, heal with cut(leader, True)."""
    leader = lab.wait_stable(RECOVERY_TIMEOUT)
    hold = round(rng.uniform(2.0, 4.0), 2)
    ns = lab.state.node_ns(leader)
    fault = _fault(name, leader, partition_s=hold)
    cut(leader, False)
    try:
        gone = wait_for(lambda: lab.state.vip not in topology.addresses(ns), hold, step=0.01)
        fault["vip_released_s"] = round(time.monotonic() - fault["t"], 4) if gone else None
        new = wait_for(lambda: lab.leader(exclude=leader), max(0.0, fault["t"] + hold - time.monotonic()),
                       step=0.01)
        if new:
            fault["elected_s"] = round(time.monotonic() - fault["t"], 4)
        time.sleep(max(0.0, fault["t"] + hold - time.monotonic()))
    finally:
        cut(leader, True)
    return fault


def partition_leader(lab: Lab, rng: random.Random) -> dict:
    return _partition(lab, rng, "partition-leader",
                      lambda node, up: topology.set_link(lab.state.node_ns(node), up=up))


def isolate_leader(lab: Lab, rng: random.Random) -> dict:
    return _partition(lab, rng, "isolate-leader",
                      lambda node, up: topology.set_port(lab.state, node, attached=up))


def cut_follower(lab: Lab, rng: random.Random) -> dict:
    leader = lab.wait_stable(RECOVERY_TIMEOUT)
    follower = rng.choice([n for n in NODE_IDS if n != leader])
    hold = round(rng.uniform(2.0, 4.0), 2)
    before = lab.node_status(leader) or {}
    fault = _fault("cut-follower", leader, follower=follower, partition_s=hold)
    state = lab.state
    cuts = [(state.node_ns(leader), state.node_address(NODE_IDS.index(follower))),
            (state.node_ns(follower), state.node_address(NODE_IDS.index(leader)))]
    for ns, address in cuts:
        topology.set_blackhole(ns, address, True)
    kept = True
    try:
        while time.monotonic() < fault["t"] + hold:
            # The cut itself is the fault; this loop watches the leader through it.
            now = lab.node_status(leader) or {}
            if now.get("role") != "leader" or now.get("term") != before.get("term"):
                kept = False
            time.sleep(0.02)
    finally:
        for ns, address in cuts:
            topology.set_blackhole(ns, address, False)
    fault["leader_kept"] = kept
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
    for node_id in NODE_IDS:
        lab.signal(node_id, signal.SIGKILL)
    for node_id in NODE_IDS:
        lab.wait_exit(node_id)
    for node_id in NODE_IDS:
        lab.start_node(node_id)
    return fault


def rolling_restart(lab: Lab, rng: random.Random) -> dict:
    leader = lab.wait_stable(RECOVERY_TIMEOUT)
    followers = [n for n in NODE_IDS if n != leader]
    rng.shuffle(followers)
    fault = _fault("rolling-restart", leader, order=followers + [leader])
    for node_id in followers + [leader]:
        lab.signal(node_id, signal.SIGTERM)
        lab.wait_exit(node_id, timeout=15)
        lab.start_node(node_id)
        lab.wait_stable(RECOVERY_TIMEOUT)
    return fault


SCENARIOS = {
    "kill-leader": kill_leader,
    "pause-leader": pause_leader,
    "partition-leader": partition_leader,
    "isolate-leader": isolate_leader,
    "cut-follower": cut_follower,
    "kill-keepalived": kill_keepalived,
    "restart-all": restart_all,
    "rolling-restart": rolling_restart,
}
CHOICES = (*SCENARIOS, "mix", "all")


def plan(scenario: str, runs: int, rng: random.Random) -> list[str]:
    if scenario == "mix":
        return [rng.choice(list(SCENARIOS)) for _ in range(runs)]
    if scenario == "all":
        return [name for _ in range(runs) for name in SCENARIOS]
    if scenario not in SCENARIOS:
        raise LabError(f"unknown scenario {scenario!r} (one of: {', '.join(CHOICES)})")
    return [scenario] * runs


def _workload(lab: Lab, mode: str, history: Path, *extra: str) -> list[str]:
    return ["ip", "netns", "exec", lab.state.client_ns, sys.executable, "-m", "haqueue.lab.workload", mode,
            "--host", lab.state.vip, "--port", str(lab.cluster.client_port), "--history", str(history), *extra]


def _first_put_ok(history: Path) -> bool:
    try:
        with open(history) as f:
            return any('"type":"ok","f":"put"' in line for line in f)
    except FileNotFoundError:
        return False


def run_chaos(lab: Lab, scenario: str, runs: int, seed: int, out_dir: Path | None = None,
              progress=lambda message: None) -> dict:
    """Run the plan under a workload, drain, check; return the report (see checker.check)."""
    rng = random.Random(seed)
    faults_planned = plan(scenario, runs, rng)
    out_dir = Path(out_dir or lab.dir / "runs" / time.strftime("%Y%m%dT%H%M%S"))
    out_dir.mkdir(parents=True, exist_ok=True)
    history, drain_history = out_dir / "history.jsonl", out_dir / "drain.jsonl"
    if lab.alive("workload"):
        # Left by a chaos run that was itself killed: its history is not ours.
        lab.signal("workload", signal.SIGKILL)
        lab.wait_exit("workload")
    lab.wait_stable(RECOVERY_TIMEOUT)
    # Jobs an interrupted earlier run left behind are not in this history and
    # would count as unexpected: take them out first (recorded, not checked).
    leftover = subprocess.run(_workload(lab, "drain", out_dir / "before.jsonl", "--consumers", "4"),
                              capture_output=True, text=True, timeout=300)
    if leftover.returncode != 0:
        raise LabError(f"could not empty the queue before the run: {leftover.stdout.strip()}")
    started = time.monotonic()
    log = open(out_dir / "workload.log", "ab")
    workload = subprocess.Popen(_workload(lab, "run", history), stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
    lab.track("workload", workload, group=False)
    faults: list[dict] = []
    errors: list[str] = []
    try:
        if not wait_for(lambda: _first_put_ok(history), 15):
            raise LabError(f"the workload acknowledged no put within 15 s (see {out_dir / 'workload.log'})")
        for i, name in enumerate(faults_planned):
            time.sleep(rng.uniform(1.0, 2.0))  # undisturbed load between faults: part of the scenario
            try:
                fault = SCENARIOS[name](lab, rng)
            except LabError as exc:
                # Keep what was recorded: the drain and the check still run.
                errors.append(f"{name} #{i + 1}: {exc}")
                break
            try:
                lab.wait_stable(RECOVERY_TIMEOUT)
                fault["recovered_s"] = round(time.monotonic() - fault["t"], 4)
            except LabError as exc:
                fault["recovered_s"] = None
                errors.append(f"{name} #{i + 1}: {exc}")
            faults.append(fault)
            progress(f"{i + 1}/{len(faults_planned)} {name} on {fault['node']}: recovered in "
                     f"{fault['recovered_s']} s")
            if fault["recovered_s"] is None:
                break
        time.sleep(1.0)  # a last stretch of undisturbed load after the final fault
    finally:
        if workload.poll() is None:
            workload.send_signal(signal.SIGTERM)
        try:
            workload.wait(timeout=15)
        except subprocess.TimeoutExpired:
            workload.kill()
            workload.wait()
        log.close()
        lab.untrack("workload")
    try:
        lab.wait_stable(RECOVERY_TIMEOUT)
    except LabError as exc:
        errors.append(f"before the drain: {exc}")
    drain = subprocess.run(_workload(lab, "drain", drain_history), capture_output=True, text=True, timeout=300)
    if drain.returncode != 0:
        errors.append(f"drain did not empty the queue: {drain.stdout.strip()} {drain.stderr.strip()[-300:]}")
    events = []
    for path in (history, drain_history):
        if path.exists():
            with open(path) as f:
                events += [json.loads(line) for line in f if line.strip()]
    report = checker.check(events, faults, ttr=workload_ttr)
    holders = lab.vip_holders()
    leader = lab.leader()
    report.update({
        "scenario": scenario,
        "runs": runs,
        "seed": seed,
        "plan": faults_planned,
        "seconds": round(time.monotonic() - started, 1),
        "errors": errors,
        "vip_holders": holders,
        "leader": leader,
        "history": str(history),
    })
    report["ok"] = report["ok"] and not errors and holders == [leader] and leader is not None
    by_name: dict[str, list[float]] = {}
    for f in report["faults"]:
        if f["failover_s"] is not None:
            by_name.setdefault(f["name"], []).append(f["failover_s"])
    report["failover_by_scenario"] = {name: checker.summary(v) for name, v in sorted(by_name.items())}
    (out_dir / "report.json").write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")
    return report


def format_report(report: dict) -> str:
    """The summary table printed by `haqueue lab chaos`."""
    c = report["counts"]
    lines = [
        f"scenario {report['scenario']}, {len(report['faults'])} faults, seed {report['seed']}, "
        f"{report['seconds']} s, {c['operations']} operations",
        f"  puts: {c['puts_ok']} acknowledged, {c['puts_failed']} failed, {c['puts_unknown']} unknown "
        f"({c['puts_unknown_landed']} landed); deliveries {c['deliveries']}, drained {c['drained']}, "
        f"remaining {c['remaining']}",
        f"  lost {c['lost']}   unexpected {c['unexpected']}   double reservations {c['double_reservations']}   "
        f"duplicated {c['duplicated']} (after orphan release {c['duplicated_after_orphan']}, "
        f"after timeout {c['duplicated_after_timeout']}, unexplained {c['duplicated_unexplained']})",
        "  failover (first failed op -> first acknowledged put), seconds:",
        f"    {'scenario':<18} {'n':>3} {'median':>8} {'p99':>8} {'max':>8}",
    ]

    def row(name: str, s: dict) -> str:
        def fmt(v):
            return f"{v:8.3f}" if v is not None else f"{'-':>8}"
        return f"    {name:<18} {s['n']:>3} {fmt(s['median'])} {fmt(s['p99'])} {fmt(s['max'])}"

    for name, s in report["failover_by_scenario"].items():
        lines.append(row(name, s))
    lines.append(row("all", report["failover"]))
    for name in ("partition-leader", "isolate-leader"):
        released = [f["vip_released_s"] for f in report["faults"]
                    if f["name"] == name and f.get("vip_released_s") is not None]
        if released:
            s = checker.summary(released)
            lines.append(f"  {name}: the old leader released the VIP after median {s['median']:.3f} s, "
                         f"max {s['max']:.3f} s")
    cuts = [f for f in report["faults"] if f["name"] == "cut-follower"]
    if cuts:
        kept = sum(1 for f in cuts if f.get("leader_kept"))
        lines.append(f"  cut-follower: the leader kept leading at its term through {kept} of {len(cuts)} cuts")
    lines.append(f"  VIP held by {report['vip_holders']}, Raft leader {report['leader']}")
    for error in report["errors"]:
        lines.append(f"  error: {error}")
    lines.append("  verdict: " + ("PASS" if report["ok"] else "FAIL"))
    return "\n".join(lines)
