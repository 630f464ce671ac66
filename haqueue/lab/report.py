"""The chaos run's summary: figures per scenario and the table `haqueue lab chaos` prints.

runner.py builds the report dict (checker.check's, plus the run's own keys); this
module only sums it up and formats it, so a new scenario's figure is one more line
in format_report.
"""

from __future__ import annotations

from haqueue.lab import checker, member_scenarios
from haqueue.lab.scenarios import FOLLOWER_FAULTS


def failover_by_scenario(faults: list[dict]) -> dict[str, dict]:
    return by_scenario(faults, "failover_s")


def by_scenario(faults: list[dict], key: str) -> dict[str, dict]:
    by_name: dict[str, list[float]] = {}
    for f in faults:
        if f.get(key) is not None:
            by_name.setdefault(f["name"], []).append(f[key])
    return {name: checker.summary(v) for name, v in sorted(by_name.items())}



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
    gap = report.get("client_gap")
    if gap:
        lines.append(f"  client-visible gap (longest time with no acknowledged answer through the VIP): "
                     f"{gap['gap_s']:.3f} s, under {gap.get('fault') or 'no fault'}"
                     + (f" (limit {report['max_gap']:g} s)" if report.get("max_gap") is not None else ""))
        lines.append(f"    {'scenario':<18} {'n':>3} {'median':>8} {'p99':>8} {'max':>8}")
        for name, s in report.get("client_gap_by_scenario", {}).items():
            lines.append(row(name, s))
    for f in report["faults"]:
        for step in f.get("steps", ()):
            lines.append(f"  {f['name']} +{step['at_s']:.1f} s {step['step']} on {step['node']}: a leader served "
                         f"after {step.get('leader_after_s')} s, the VIP on it after {step.get('vip_after_s')} s"
                         + (f", no leader for {step['leaderless_s']} s during it" if "leaderless_s" in step else ""))
    for name in ("slowdisk-leader", "slowdisk-follower"):
        hit = [f for f in report["faults"] if f["name"] == name]
        if hit:
            lines.append(f"  {name}: longest time without a serving leader during the slow disk: "
                         f"max {max(f.get('leaderless_s', 0) for f in hit):.3f} s over {len(hit)} faults")
    for name in ("partition-leader", "isolate-leader"):
        released = [f["vip_released_s"] for f in report["faults"]
                    if f["name"] == name and f.get("vip_released_s") is not None]
        if released:
            s = checker.summary(released)
            lines.append(f"  {name}: the old leader released the VIP after median {s['median']:.3f} s, "
                         f"max {s['max']:.3f} s")
    for name in ("cut-follower", "cut-leader-to-follower"):
        cuts = [f for f in report["faults"] if f["name"] == name]
        if cuts:
            kept = sum(1 for f in cuts if f.get("leader_kept"))
            lines.append(f"  {name}: the leader kept leading at its term through {kept} of {len(cuts)} cuts")
    for name in ("disk-full-leader", "disk-full-follower", "eio-leader", "eio-follower"):
        hit = [f for f in report["faults"] if f["name"] == name and f.get("exited_s") is not None]
        if hit:
            s = checker.summary([f["exited_s"] for f in hit])
            codes = sorted({f.get("exit_code") for f in hit}, key=str)
            lines.append(f"  {name}: the node exited on its own after median {s['median']:.3f} s, "
                         f"max {s['max']:.3f} s, status {codes}; e.g. {hit[-1].get('message', '')!r}")
    for name in FOLLOWER_FAULTS:
        hit = [f for f in report["faults"] if f["name"] == name]
        if hit:
            quiet = sum(1 for f in hit if f.get("failed_ops") == 0)
            lines.append(f"  {name}: clients saw no failed operation through {quiet} of {len(hit)} faults")
    stalls = [f for f in report["faults"] if f["name"] == "stall-fsync-leader"]
    if stalls:
        elected = [f for f in stalls if f.get("elected_s") is not None]
        moved = [f for f in stalls if f.get("vip_moved_s") is not None]
        lines.append(f"  stall-fsync-leader: another node was elected during {len(elected)} of {len(stalls)} stalls"
                     f"{' (median %.3f s)' % checker.summary([f['elected_s'] for f in elected])['median'] if elected else ''}"
                     f"; the VIP moved to it during {len(moved)}")
    snaps = [f for f in report["faults"] if f["name"] == "kill-during-snapshot"]
    if snaps:
        running = sum(1 for f in snaps if f.get("writer_killed_mid_write"))
        lines.append(f"  kill-during-snapshot: {len(snaps)} kills ("
                     f"{sum(1 for f in snaps if f.get('moment') == 'writing')} while writing, "
                     f"{sum(1 for f in snaps if f.get('moment') == 'renamed')} just after the rename; "
                     f"{sum(1 for f in snaps if f['node'] == f.get('leader'))} of the leader), "
                     f"the writer killed before its rename at {running}")
    if snaps:
        viewed = [f.get("disk") or {} for f in snaps]
        lines.append(f"  kill-during-snapshot: disk left by the kill read back {sum(1 for v in viewed if v and not v.get('error'))}"
                     f" of {len(snaps)} times; journal entries a restart would drop: "
                     f"{sum(v.get('entries_at_risk', 0) for v in viewed)}")
    gearman = report.get("gearman")
    if gearman:
        g = gearman["counts"]
        lines.append(f"  gearman: {g['puts_ok']} background jobs acknowledged, {g['deliveries']} assigned, "
                     f"drained {g['drained']}; lost {g['lost']}, unexpected {g['unexpected']}, "
                     f"assigned to two live workers {g['double_reservations']}, "
                     f"worked again after a completion {g['duplicated_unexplained']}")
    ids = report.get("ids")
    if ids:
        lines.append(f"  ids: {ids['acknowledged']} acknowledged, {ids['failed']} refused, {ids['unknown']} unanswered;"
                     f" duplicates {ids['duplicates']}, monotonicity violations {ids['monotonicity_violations']}")
        if ids.get("failover", {}).get("n"):
            lines.append("  ids failover (first failed request -> first id acknowledged), seconds:")
            for name, s in ids["failover_by_scenario"].items():
                lines.append(row(name, s))
            lines.append(row("all", ids["failover"]))
    for node, found in sorted(report.get("log_warnings", {}).items()):
        lines.append(f"  {node} log: " + ", ".join(f"{w!r} x{n}" for w, n in sorted(found.items())))
    lines += member_scenarios.report_lines(report["faults"])
    lines.append(f"  VIP held by {report['vip_holders']}, Raft leader {report['leader']}")
    for error in report["errors"]:
        lines.append(f"  error: {error}")
    lines.append("  verdict: " + ("PASS" if report["ok"] else "FAIL"))
    return "\n".join(lines)
