"""The chaos run: a plan of faults against a running lab, under a workload, then a drain and a checked history.

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

The scenarios themselves are in scenarios.py, the summary table in report.py.
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from haqueue.lab import checker, idchecker
from haqueue.lab.lab import Lab, LabError, wait_for
from haqueue.lab.report import by_scenario, failover_by_scenario
from haqueue.lab.scenarios import CAMPAIGN, CHOICES, MEMBERSHIP, RECOVERY_TIMEOUT, SCENARIOS, elapsed
from haqueue.lab.workload import TTR as workload_ttr


def _counted(item: str) -> tuple[str, int]:
    """"kill-leader*50" -> ("kill-leader", 50); a bare name counts once."""
    name, star, count = item.partition("*")
    if star and not (count.isdigit() and int(count) > 0):
        raise LabError(f"--scenario: {item!r}: the count after * must be a whole number above 0")
    return name, int(count) if star else 1


def unknown(scenario: str) -> list[str]:
    """The names in a scenario argument (one name, or several joined by commas, each
    optionally NAME*COUNT) that are not scenarios."""
    if scenario in CHOICES:
        return []
    if scenario == "campaign":
        return []
    return [name for name in (_counted(item)[0] for item in scenario.split(","))
            if name not in SCENARIOS and name not in MEMBERSHIP]


def plan(scenario: str, runs: int, rng: random.Random) -> list[str]:
    """The faults to inject: `mix` draws each at random, `all` runs every scenario in turn
    `runs` times over, and a comma-separated list (a,b*3,c) does the same for those named,
    each as many times per round as its count; the order within a round is shuffled
    when a count is given, so 50 kills and 10 pauses interleave."""
    if scenario == "mix":
        return [rng.choice(list(SCENARIOS)) for _ in range(runs)]
    if scenario == "all":
        return [name for _ in range(runs) for name in SCENARIOS]
    if scenario == "campaign":
        return plan(CAMPAIGN, runs, rng)
    bad = unknown(scenario)
    if bad:
        raise LabError(f"unknown scenario {bad[0]!r} (one of: {', '.join(CHOICES)})")
    counted = [_counted(item) for item in scenario.split(",")]
    if len(counted) == 1 and counted[0][1] == 1:
        return [scenario] * runs
    faults = []
    for _ in range(runs):
        round_ = [name for name, count in counted for _ in range(count)]
        if any(count > 1 for _, count in counted):
            rng.shuffle(round_)
        faults += round_
    return faults


def _in_client(lab: Lab, module: str, port: int, history: Path, *args: str) -> list[str]:
    """`python -m haqueue.lab.MODULE ARGS` in the client namespace, against the VIP's `port`."""
    return ["ip", "netns", "exec", lab.state.client_ns, sys.executable, "-m", f"haqueue.lab.{module}", *args,
            "--host", lab.state.vip, "--port", str(port), "--history", str(history)]


def _workload(lab: Lab, mode: str, history: Path, *extra: str) -> list[str]:
    return _in_client(lab, "workload", lab.cluster.client_port, history, mode) + list(extra)


def _gearman(lab: Lab, mode: str, history: Path) -> list[str]:
    return _in_client(lab, "gearmanworkload", lab.cluster.gearman_port, history, mode)


def _side_workloads(lab: Lab, out_dir: Path) -> dict[str, tuple[list[str], Path]]:
    """The workloads that run beside the queue's, for the other protocols on the same log:
    name -> (its run command, its history). Only those whose port the lab's cluster opens."""
    side = {}
    if lab.cluster.id_port:
        history = out_dir / "ids.jsonl"
        side["id-workload"] = (_in_client(lab, "idworkload", lab.cluster.id_port, history), history)
    if lab.cluster.gearman_port:
        history = out_dir / "gearman.jsonl"
        side["gearman-workload"] = (_gearman(lab, "run", history), history)
    return side


def _events(history: Path) -> list[dict]:
    if not history.exists():
        return []
    with open(history) as f:
        return [json.loads(line) for line in f if line.strip()]


def _first_put_ok(history: Path) -> bool:
    try:
        with open(history) as f:
            return any('"type":"ok","f":"put"' in line for line in f)
    except FileNotFoundError:
        return False


def run_chaos(lab: Lab, scenario: str, runs: int, seed: int, out_dir: Path | None = None,
              progress=lambda message: None, max_gap: float | None = None, ballast: int = 0,
              client_timeout: float | None = None) -> dict:
    """Run the plan under a workload, drain, check; return the report (see checker.check)."""
    rng = random.Random(seed)
    faults_planned = plan(scenario, runs, rng)
    out_dir = Path(out_dir or lab.dir / "runs" / time.strftime("%Y%m%dT%H%M%S"))
    out_dir.mkdir(parents=True, exist_ok=True)
    history, drain_history = out_dir / "history.jsonl", out_dir / "drain.jsonl"
    side = _side_workloads(lab, out_dir)
    for name in ("workload", "id-workload", "gearman-workload"):
        if lab.alive(name):
            # Left by a chaos run that was itself killed: its history is not ours.
            lab.signal(name, signal.SIGKILL)
            lab.wait_exit(name)
    lab.wait_stable(RECOVERY_TIMEOUT)
    # Jobs an interrupted earlier run left behind are not in this history and
    # would count as unexpected: take them out first (recorded, not checked).
    leftover = subprocess.run(_workload(lab, "drain", out_dir / "before.jsonl", "--consumers", "4"),
                              capture_output=True, text=True, timeout=300)
    if leftover.returncode != 0:
        raise LabError(f"could not empty the queue before the run: {leftover.stdout.strip()}")
    if ballast:
        # A state as big as a long campaign's (workload.py's ballast tube, in no history).
        made = subprocess.run(_workload(lab, "ballast", out_dir / "ballast.jsonl", "--jobs", str(ballast)),
                              capture_output=True, text=True, timeout=600)
        if made.returncode != 0:
            raise LabError(f"could not put the ballast: {made.stdout.strip()} {made.stderr.strip()[-300:]}")
    started = time.monotonic()
    log_start = {n: _size(lab.log_path(n)) for n in lab.node_ids}
    log = open(out_dir / "workload.log", "ab")
    timeout_args = ["--op-timeout", str(client_timeout)] if client_timeout else []
    workload = subprocess.Popen(_workload(lab, "run", history, *timeout_args), stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
    lab.track("workload", workload, group=False)
    # The id service and Gearman ride the same log: their clients use the VIP throughout,
    # each history checked apart.
    processes = {"workload": workload}
    if "gearman-workload" in side:
        leftover = subprocess.run(_gearman(lab, "drain", out_dir / "gearman-before.jsonl"),
                                  capture_output=True, text=True, timeout=300)
        if leftover.returncode != 0:
            raise LabError(f"could not empty the Gearman queue before the run: {leftover.stdout.strip()}")
    for name, (command, _) in side.items():
        processes[name] = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        lab.track(name, processes[name], group=False)
    faults: list[dict] = []
    errors: list[str] = []
    try:
        if not wait_for(lambda: _first_put_ok(history), 15):
            raise LabError(f"the workload acknowledged no put within 15 s (see {out_dir / 'workload.log'})")
        for i, name in enumerate(faults_planned):
            time.sleep(rng.uniform(1.0, 2.0))  # undisturbed load between faults: part of the scenario
            try:
                fault = (SCENARIOS.get(name) or MEMBERSHIP[name])(lab, rng)
            except LabError as exc:
                # Keep what was recorded: the drain and the check still run.
                errors.append(f"{name} #{i + 1}: {exc}")
                break
            try:
                lab.wait_stable(RECOVERY_TIMEOUT)
                fault["recovered_s"] = elapsed(fault)
            except LabError as exc:
                fault["recovered_s"] = None
                errors.append(f"{name} #{i + 1}: {exc}")
            faults.append(fault)
            progress(f"{i + 1}/{len(faults_planned)} {name} on {fault['node']}: recovered in "
                     f"{fault['recovered_s']} s; longest client gap so far {_gap_so_far(history)} s")
            if fault["recovered_s"] is None:
                break
        time.sleep(1.0)  # a last stretch of undisturbed load after the final fault
    finally:
        for name, process in processes.items():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            lab.untrack(name)
        log.close()
    try:
        lab.wait_stable(RECOVERY_TIMEOUT)
    except LabError as exc:
        errors.append(f"before the drain: {exc}")
    drain = subprocess.run(_workload(lab, "drain", drain_history), capture_output=True, text=True, timeout=300)
    if drain.returncode != 0:
        errors.append(f"drain did not empty the queue: {drain.stdout.strip()} {drain.stderr.strip()[-300:]}")
    report = checker.check(_events(history) + _events(drain_history), faults, ttr=workload_ttr)
    if "id-workload" in side:
        report["ids"] = idchecker.check(_events(side["id-workload"][1]), faults)
        if not report["ids"]["ok"]:
            errors.append("the id service's history failed its check (see ids in report.json)")
    if "gearman-workload" in side:
        gearman_history = side["gearman-workload"][1]
        drained = out_dir / "gearman-drain.jsonl"
        done = subprocess.run(_gearman(lab, "drain", drained), capture_output=True, text=True, timeout=300)
        if done.returncode != 0:
            errors.append(f"the Gearman drain did not empty the queue: {done.stdout.strip()}")
        # The queue's checker judges it: submit = put, grab = reserve, complete = delete (gearmanworkload.py).
        report["gearman"] = checker.check(_events(gearman_history) + _events(drained), faults)
        if not report["gearman"]["ok"]:
            errors.append("the Gearman history failed its check (see gearman in report.json)")
    report["log_warnings"] = _log_warnings(lab, log_start)
    for i, fault in enumerate(faults):
        disk = fault.get("disk") or {}
        if disk.get("entries_at_risk"):
            errors.append(f"{fault['name']} on {fault['node']} ({fault.get('moment')}): the journal holds "
                          f"{disk['entries_at_risk']} entries after the snapshot that a restart drops "
                          f"(snapshot {disk['snapshot']}, journal {disk['journal']}; copy in {disk['evidence']})")
        elif disk.get("error"):
            errors.append(f"{fault['name']} on {fault['node']}: its disk could not be read: {disk['error']} "
                          f"(copy in {disk.get('evidence')})")
    for node, found in report["log_warnings"].items():
        if found.get("truncating already-applied"):
            errors.append(f"{node} logged 'truncating already-applied log entries' {found['truncating already-applied']}"
                          f" times: its state may have diverged (see {lab.log_path(node)})")
    holders = lab.vip_holders()
    leader = lab.leader()
    report.update({
        "scenario": scenario,
        "runs": runs,
        "seed": seed,
        "ballast": ballast,
        "client_timeout": client_timeout,
        "plan": faults_planned,
        "seconds": round(time.monotonic() - started, 1),
        "errors": errors,
        "vip_holders": holders,
        "leader": leader,
        "history": str(history),
    })
    gap = report.get("client_gap", {}).get("gap_s", 0.0)
    report["max_gap"] = max_gap
    if max_gap is not None and gap > max_gap:
        errors.append(f"clients got no acknowledged answer for {gap:.3f} s (over {max_gap:g} s), "
                      f"from {report['client_gap']['from']} under {report['client_gap']['fault']}")
    report["ok"] = report["ok"] and not errors and holders == [leader] and leader is not None
    report["client_gap_by_scenario"] = by_scenario(report["faults"], "client_gap_s")
    report["failover_by_scenario"] = failover_by_scenario(report["faults"])
    if "faults" in report.get("ids", {}):
        report["ids"]["failover_by_scenario"] = failover_by_scenario(report["ids"]["faults"])
    (out_dir / "report.json").write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")
    return report




def _gap_so_far(history: Path) -> float:
    """The run's longest client-visible gap up to now (for the progress line)."""
    return checker.answer_gap(checker.pair_ops(_events(history)))["gap_s"]


# Node log lines worth counting per run: the first is a violation (pysyncobj cut entries
# the node had applied); the second means a restarted node found its snapshot's commit
# index beyond its journal (kill-during-snapshot's disk view says whether entries were lost).
LOG_WARNINGS = ("truncating already-applied", "exceeds journal end")


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def _log_warnings(lab: Lab, start: dict[str, int]) -> dict[str, dict[str, int]]:
    found: dict[str, dict[str, int]] = {}
    # Every node that logged: also one a membership change added and removed during the run.
    logged = {p.stem for p in (lab.dir / "logs").glob("n*.log")}
    for node in sorted(set(start) | set(lab.node_ids) | logged):
        try:
            with open(lab.log_path(node), "rb") as f:
                f.seek(start.get(node, 0))
                text = f.read().decode(errors="replace")
        except FileNotFoundError:
            continue
        counts = {w: text.count(w) for w in LOG_WARNINGS if w in text}
        if counts:
            found[node] = counts
    return found
