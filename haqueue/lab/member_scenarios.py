"""The lab's membership scenarios (issue 27): the cluster changes its members under load,
and a leader is killed while it does.

Each is a function of the lab and a seeded random source, as scenarios.py's
scenarios are, and returns its fault record with one entry per step in
`steps` (what was done, on which node, and how long until a leader served
again and the VIP was on it). The changes are made with the real
`haqueue cluster add-node/remove-node` (members.py).

  replace-node    a host dies for good and a new one with another address takes
                  its place: kill -9 its haqueue and keepalived (the leader's and
                  a follower's host in turn), remove-node it, add-node a new
                  node nK (empty: it catches up from a snapshot), and kill -9
                  the leader while the new node is still catching up; restart
                  that one once a leader serves again
  grow-3-to-5     add a fourth node, kill -9 the leader while it catches up, add
                  a fifth while the old leader is down (add-node waits for the
                  new leader), restart the old leader
  shrink-5-to-3   remove the leader (it hands leadership to an up-to-date
                  follower first), kill -9 the new leader, remove a follower
                  while it is down, restart it

grow-3-to-5 needs a lab of three members and shrink-5-to-3 one of five: run
them in turn (`--scenario grow-3-to-5,shrink-5-to-3`). `mix` and `all` leave
these out, since they change the cluster's size under the other scenarios.
"""

from __future__ import annotations

import random
import signal
import time

from haqueue.lab import members, topology
from haqueue.lab.lab import Lab, LabError, wait_for

RECOVERY_TIMEOUT = 30.0  # as scenarios.py's


def _fault(name: str, node: str | None, **extra) -> dict:
    return {"t": round(time.monotonic(), 6), "name": name, "node": node, **extra}


def _step(fault: dict, name: str, node: str | None, **extra) -> dict:
    step = {"step": name, "node": node, "t": round(time.monotonic(), 6),
            "at_s": round(time.monotonic() - fault["t"], 4), **extra}
    fault.setdefault("steps", []).append(step)
    return step


def _served_again(lab: Lab, fault: dict, step: dict, exclude: str | None = None) -> str:
    """Wait for a serving leader (not `exclude`) after a step; record how long from the step
    until it served and until the VIP was on it (a host that is gone, `exclude`, may keep
    the VIP on its dead interface: that copy reaches nobody)."""
    began = time.monotonic()
    leader = wait_for(lambda: lab.leader(exclude=exclude), RECOVERY_TIMEOUT, step=0.01)
    step["leader_after_s"] = round(time.monotonic() - began, 3)
    if leader is None:
        raise LabError(f"{fault['name']}: no serving leader {RECOVERY_TIMEOUT:g} s after {step['step']} on "
                       f"{step['node']}: {lab.describe()}")
    step["leader"] = leader
    moved = wait_for(lambda: [h for h in lab.vip_holders() if h != exclude] == [leader], RECOVERY_TIMEOUT,
                     step=0.01)
    step["vip_after_s"] = round(time.monotonic() - began, 3) if moved else None
    return leader


def _kill(lab: Lab, node: str) -> None:
    lab.signal(node, signal.SIGKILL)
    lab.wait_exit(node)


def _need_members(lab: Lab, name: str, count: int) -> None:
    if len(lab.node_ids) != count:
        raise LabError(f"{name} needs a lab of {count} members; this one has {len(lab.node_ids)} "
                       f"({', '.join(lab.node_ids)})")


def _add_then_kill_the_leader(lab: Lab, fault: dict) -> str:
    """Add the next node; kill -9 the leader while the new node catches up. Returns the killed one."""
    new = members.next_id(lab)
    step = _step(fault, f"add {new} ({lab.state.node_address(new)})", new)
    step.update(members.add_member(lab, new))
    leader = _served_again(lab, fault, step)
    # How far the new node had got when its leader died (it starts empty).
    seen_new, seen_leader = lab.node_status(new) or {}, lab.node_status(leader) or {}
    step = _step(fault, f"kill -9 the leader while {new} catches up", leader,
                 new_applied=seen_new.get("applied_index"), leader_commit=seen_leader.get("commit_index"))
    _kill(lab, leader)
    _served_again(lab, fault, step, exclude=leader)
    return leader


def _restart_and_compare(lab: Lab, fault: dict, killed: str) -> dict:
    """Every scenario's end: the leader it killed started again, then the group compared
    with the cluster file."""
    step = _step(fault, "restart the killed leader", killed)
    lab.start_node(killed)
    _served_again(lab, fault, step)
    fault["members"] = lab.node_ids
    fault["members_agree"] = members.file_agrees(lab)  # the leader's group and the file
    return fault


def replace_node(lab: Lab, rng: random.Random) -> dict:
    leader = lab.wait_stable(RECOVERY_TIMEOUT)
    n = lab.rounds.get("replace-node", 0)
    lab.rounds["replace-node"] = n + 1
    victim = leader if n % 2 == 0 else rng.choice([x for x in lab.node_ids if x != leader])
    fault = _fault("replace-node", victim, leader=leader)
    step = _step(fault, "kill -9 haqueue and keepalived, cut its link: the host is gone", victim)
    members.stop_member_processes(lab, victim, signal.SIGKILL)
    topology.set_link(lab.state.node_ns(victim), up=False)  # its namespace stays, off the network
    _served_again(lab, fault, step, exclude=victim)
    step = _step(fault, f"remove {victim}", victim)
    step.update(members.remove_member(lab, victim))
    _served_again(lab, fault, step)
    killed = _add_then_kill_the_leader(lab, fault)
    return _restart_and_compare(lab, fault, killed)


def grow_3_to_5(lab: Lab, rng: random.Random) -> dict:
    _need_members(lab, "grow-3-to-5", 3)
    leader = lab.wait_stable(RECOVERY_TIMEOUT)
    fault = _fault("grow-3-to-5", leader)
    killed = _add_then_kill_the_leader(lab, fault)
    fifth = members.next_id(lab)
    step = _step(fault, f"add {fifth} ({lab.state.node_address(fifth)}), the old leader down", fifth)
    step.update(members.add_member(lab, fifth))
    _served_again(lab, fault, step)
    return _restart_and_compare(lab, fault, killed)


def shrink_5_to_3(lab: Lab, rng: random.Random) -> dict:
    _need_members(lab, "shrink-5-to-3", 5)
    leader = lab.wait_stable(RECOVERY_TIMEOUT)
    fault = _fault("shrink-5-to-3", leader)
    step = _step(fault, "remove the leader (it hands off)", leader)
    step.update(members.remove_member(lab, leader))
    new = _served_again(lab, fault, step)
    step = _step(fault, "kill -9 the new leader", new)
    _kill(lab, new)
    _served_again(lab, fault, step, exclude=new)
    victim = rng.choice([x for x in lab.node_ids if x != new])
    step = _step(fault, f"remove {victim}, the killed leader down", victim)
    step.update(members.remove_member(lab, victim))
    _served_again(lab, fault, step, exclude=new)
    return _restart_and_compare(lab, fault, new)


def report_lines(faults: list[dict]) -> list[str]:
    """For `haqueue lab chaos`'s summary: the membership changes' keepalived reloads and hand-offs."""
    steps = [s for f in faults if f["name"] in SCENARIOS for s in f.get("steps", ()) if "vip_kept" in s]
    if not steps:
        return []
    kept = sum(1 for s in steps if s["vip_kept"])
    changes = [f for f in faults if f["name"] in SCENARIOS]
    agreed = sum(1 for f in changes if f.get("members_agree"))
    tries = [s["remove_tries"] for s in steps if "remove_tries" in s]
    return [f"  membership: the VIP stayed put through {kept} of {len(steps)} rounds of keepalived reloads "
            f"(each node's config rendered again, SIGHUP, the VIP's holder last); the leader's Raft group "
            f"equalled the cluster file after {agreed} of {len(changes)} scenarios"
            + (f"; remove-node ran {sum(tries)} times for {len(tries)} removals (a second run only when a "
               f"leader's hand-off found no follower caught up within an election timeout)" if tries else "")]


SCENARIOS = {
    "replace-node": replace_node,
    "grow-3-to-5": grow_3_to_5,
    "shrink-5-to-3": shrink_5_to_3,
}
