"""Changing the running lab's membership, the way an operator changes a cluster's (issue 27).

    add_member(lab, node_id)     a new host joins: its namespace and disk, then
                                 `haqueue cluster add-node --write`, then the node
                                 started with the rewritten cluster file
    remove_member(lab, node_id)  a member leaves: `haqueue cluster remove-node
                                 --write` (a leader removed hands off first), then
                                 the node and its keepalived stopped

After either, the keepalived configs are rendered again from the new cluster
file (`haqueue ops gen-keepalived`, as docs/operations.md's runbook says) and
every running keepalived is reloaded with SIGHUP, so its unicast peers are the
members; a joining node's keepalived starts once it is a member.

Rules:
- The cluster commands run in the client namespace: they ask the members'
  admin ports, which only the lab's namespaces reach. They are the real CLI,
  so the lab exercises what an operator runs.
- A node id is never used twice in one lab (nK always lives at .(10+K), and a
  removed node's namespace and disk stay until `lab down`): a replacement host
  gets the next free K, a new address, as a real replacement would.
- `lab.state.nodes` (the lab's members) changes only once the cluster file
  does, so the lab's views (leader, stable, VIP holders) always ask the
  members the file names.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys

from haqueue.lab import topology
from haqueue.lab.lab import Lab, LabError, wait_for

CHANGE_TIMEOUT = 30.0  # add-node/remove-node --timeout: waits for a leader, then for the commit
# A leader asked to remove itself holds new entries until a follower holds its whole
# log, then hands off (replication/membership.py): under the lab's load that works at
# the first command. It refuses only if no follower caught up within an election
# timeout: a follower whose loop stalled that long, which on the lab's two shared
# cores (five nodes, the chaos workload, other tests) can happen. An operator would
# run the command again once; so does the lab, and the report counts the runs.
HAND_OFF_REFUSED = "no follower caught up"
HAND_OFF_TRIES = 2
VIP_WATCH = 1.0  # seconds the VIP is watched after the keepalived reloads


def next_id(lab: Lab) -> str:
    """The next node id this lab has never used: members and removed nodes (their namespaces stay)."""
    pattern = re.compile(rf"^{re.escape(lab.state.prefix)}-n(\d+)$")
    used = {topology.node_number(n) for n in lab.node_ids}
    used |= {int(m.group(1)) for ns in lab.state.namespaces if (m := pattern.match(ns))}
    return f"n{max(used, default=0) + 1}"


def _cluster_command(lab: Lab, *args: str) -> tuple[str, int]:
    """`haqueue cluster ARGS --config FILE --write` from the client namespace: its stdout, and how
    many times it was run (a leader's refusal to hand off is retried once: HAND_OFF_TRIES)."""
    argv = ["ip", "netns", "exec", lab.state.client_ns, sys.executable, "-m", "haqueue", "cluster", *args,
            "--config", str(lab.config_path), "--write", "--timeout", str(CHANGE_TIMEOUT)]
    for tries in range(1, HAND_OFF_TRIES + 1):
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=CHANGE_TIMEOUT + 30)
        if proc.returncode == 0:
            return proc.stdout, tries
        said = (proc.stderr.strip().splitlines() or proc.stdout.strip().splitlines() or ["no output"])[-1]
        if HAND_OFF_REFUSED not in said:
            break
    raise LabError(f"haqueue cluster {' '.join(args)} (tried {tries} times): {said}")


def file_agrees(lab: Lab) -> bool:
    """Does the leader's Raft group equal the cluster file's nodes (`haqueue cluster members`)?"""
    argv = ["ip", "netns", "exec", lab.state.client_ns, sys.executable, "-m", "haqueue", "cluster", "members",
            "--config", str(lab.config_path)]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60).returncode == 0


def reload_keepalived(lab: Lab) -> dict:
    """Render every member's keepalived config again and reload each running keepalived (SIGHUP to
    its parent, which re-reads its file and keeps the VRRP instance's state), the VIP's holder
    last, as docs/operations.md's runbook says; then watch the VIP for VIP_WATCH seconds.
    Returns the nodes reloaded in order, and whether the VIP stayed on one node throughout."""
    lab.render_keepalived()
    # From a settled VIP (on the serving leader alone), so a move the change itself caused
    # (a removed leader's) is not counted as the reload's.
    wait_for(lambda: (leader := lab.leader()) is not None and lab.vip_holders() == [leader], CHANGE_TIMEOUT)
    holders = lab.vip_holders()
    order = sorted((n for n in lab.node_ids if lab.alive(f"keepalived-{n}")), key=lambda n: n in holders)
    for node_id in order:
        lab.signal_once(f"keepalived-{node_id}", signal.SIGHUP)
    # The watching is the measurement (did a reload move the VIP?), not synchronisation.
    moved = wait_for(lambda: lab.vip_holders() != holders, VIP_WATCH, step=0.01)
    return {"reloaded": order, "vip_before": holders, "vip_kept": not moved}


def add_member(lab: Lab, node_id: str) -> dict:
    """A new host `node_id` joins the running lab (an empty data directory: it catches up from the
    leader's snapshot). Returns what add-node said."""
    if node_id in lab.node_ids:
        raise LabError(f"{node_id} is a member already")
    address = lab.state.node_address(node_id)
    topology.add_node(lab.state, node_id)
    lab.mount_disk(node_id)
    said, _ = _cluster_command(lab, "add-node", "--id", node_id, "--address", address)
    lab.state.nodes.append(node_id)
    lab.state.save()
    lab.start_node(node_id)
    reloaded = reload_keepalived(lab)  # the others' first: the new one's starts last
    lab.start_keepalived(node_id)
    return {"added": node_id, "address": address, "said": said.strip().splitlines()[0], **reloaded}


def stop_member_processes(lab: Lab, node_id: str, sig: int = signal.SIGTERM) -> None:
    """Stop a node's haqueue and keepalived (if they run) and forget them."""
    for name in (node_id, f"keepalived-{node_id}"):
        if lab.alive(name):
            lab.signal(name, sig)
            lab.wait_exit(name, timeout=15)
        lab.untrack(name)


def remove_member(lab: Lab, node_id: str) -> dict:
    """`node_id` leaves the running lab (alive or dead); its namespace and disk stay until `lab down`.
    Returns what remove-node said."""
    if node_id not in lab.node_ids:
        raise LabError(f"{node_id} is not a member")
    said, tries = _cluster_command(lab, "remove-node", "--id", node_id)
    lab.state.nodes.remove(node_id)
    lab.state.save()
    stop_member_processes(lab, node_id)
    reloaded = reload_keepalived(lab)
    return {"removed": node_id, "said": said.strip().splitlines()[0], "remove_tries": tries, **reloaded}
