"""`haqueue lab`: the chaos lab — three (or five) nodes and keepalived in network namespaces, faults, checks.

    haqueue lab up [--nodes 5]  build the namespaces, start haqueue and keepalived, wait for the VIP
    haqueue lab status   each node's Raft role, whether it serves, who holds the VIP
    haqueue lab chaos --scenario NAME --runs N --seed S [--json FILE]
    haqueue lab down     stop every lab process, remove every lab namespace

Root only (namespaces and keepalived). The lab's state lives in --dir
(default /run/haqueue-lab), so `down` can clean up after a crashed `up`.
"""

from __future__ import annotations

import json
import os

import time

import click

from haqueue.cli.user_errors import HaqueueError

dir_option = click.option("--dir", "directory", default="/run/haqueue-lab", show_default=True,
                          type=click.Path(file_okay=False),
                          help="The lab's state, cluster file, data and logs.")


def _lab(directory: str, prefix: str = "hqlab", **sizes):
    if os.geteuid() != 0:
        raise HaqueueError("haqueue lab needs root (it creates network namespaces and runs keepalived)")
    from haqueue.lab.lab import Lab

    try:
        return Lab(directory, prefix=prefix, **sizes)
    except ValueError as exc:
        raise HaqueueError(str(exc)) from None


@click.group()
def lab() -> None:
    """Chaos lab: a 3-node (or 5-node) cluster and keepalived in namespaces."""


@lab.command()
@dir_option
@click.option("--prefix", default="hqlab", show_default=True, help="Namespace name prefix.")
@click.option("--journal-size", type=click.IntRange(4096), default=65536, show_default=True,
              help="Each node's -s: journal bytes that trigger a snapshot (small: one every second or two "
                   "under the chaos workload).")
@click.option("--disk-mib", type=click.IntRange(16, 4096), default=32, show_default=True,
              help="Size of each node's data filesystem (disk-full scenarios fill it).")
@click.option("--disk", type=click.Choice(["ext4", "tmpfs"]), default="ext4", show_default=True,
              help="Each node's data filesystem: an ext4 image on a loop device, or a tmpfs.")
@click.option("--nodes", type=click.Choice(["3", "5"]), default="3", show_default=True,
              help="How many haqueue nodes (n1..nN, each with its keepalived, in its own namespace).")
def up(directory: str, prefix: str, journal_size: int, disk_mib: int, disk: str, nodes: str) -> None:
    """Build the lab, start haqueue and keepalived on each node.

    Each node's data directory is its own filesystem of --disk-mib; each node runs
    with a sync-fault shim preloaded (scripts/slow_fsync.c: EIO or a stall on
    demand), so the storage-fault scenarios can reach any node.
    """
    the_lab = _lab(directory, prefix, journal_size=journal_size, disk_mib=disk_mib, disk=disk, nodes=int(nodes))
    if the_lab.is_up:
        raise HaqueueError(f"a lab is already up in {directory}; run `haqueue lab down` first")
    try:
        the_lab.up()
    except Exception as exc:  # whatever broke, leave nothing behind, then say what it was
        the_lab.down()
        raise HaqueueError(f"lab up failed, everything it created was removed: {exc}") from None
    click.echo(f"lab up in {directory}: cluster file {the_lab.config_path}")
    _print_status(the_lab)


def _print_status(the_lab) -> None:
    click.echo(f"{'node':<5} {'namespace':<14} {'address':<12} {'haqueue':<8} {'role':<10} {'term':>5} "
               f"{'applied':>8} {'serving':<8} {'keepalived':<11} VIP")
    for v in the_lab.view():
        status = v.status or {}
        click.echo(f"{v.id:<5} {v.ns:<14} {v.address:<12} {'up' if v.haqueue_alive else 'down':<8} "
                   f"{v.role:<10} {status.get('term', '-'):>5} {status.get('applied_index', '-'):>8} "
                   f"{'yes' if v.serving else 'no':<8} "
                   f"{'up' if v.keepalived_alive else 'down':<11} {'yes' if v.holds_vip else 'no'}")
    click.echo(f"VIP {the_lab.state.vip}:{the_lab.cluster.client_port} from namespace {the_lab.state.client_ns}")


@lab.command()
@dir_option
def status(directory: str) -> None:
    """Each node's Raft role, and which namespace holds the VIP."""
    the_lab = _lab(directory)
    if not the_lab.is_up:
        raise HaqueueError(f"no lab is up (no state in {directory})")
    _print_status(the_lab)


@lab.command()
@dir_option
def down(directory: str) -> None:
    """Stop every lab process, unmount every data tmpfs, remove every lab namespace.

    Works from the state file alone, also after a crashed or failed up.
    """
    the_lab = _lab(directory)
    gone = the_lab.down()
    shared = str(the_lab.dir / "data")  # the mount the disks sit under (storage.make_shared_mount)
    disks = [path for path in gone["mounts"] if path != shared]
    click.echo(f"stopped {len(gone['processes'])} processes, removed {len(gone['namespaces'])} namespaces, "
               f"unmounted {len(disks)} data disks" + (" and their shared mount" if shared in gone["mounts"] else ""))


@lab.command()
@dir_option
@click.option("--scenario", required=True, help="kill-leader, pause-leader, partition-leader, isolate-leader, "
              "cut-follower, kill-keepalived, restart-all, rolling-restart; storage faults: disk-full-leader, "
              "disk-full-follower, eio-leader, eio-follower, slowdisk-leader, slowdisk-follower, kill-during-snapshot, "
              "stall-fsync-leader; issue 23's sequence-restarts and sequence-eio; and the one-way "
              "cut-leader-to-follower; membership changes (issue 27): replace-node, grow-3-to-5, shrink-5-to-3 "
              "(by name only); campaign (issue 23's storage campaign), mix (random), all (each in turn), "
              "or several joined by commas "
              "(those in turn; NAME*N: N of it per round, the round shuffled, e.g. "
              "kill-leader*50,restart-all*5,pause-leader*10,partition-leader*10). See haqueue/lab/scenarios.py.")
@click.option("--runs", type=click.IntRange(1, 10000), default=5, show_default=True,
              help="Faults to inject (with `all` or a list: rounds of every scenario in it).")
@click.option("--seed", type=int, default=1, show_default=True, help="Seeds fault choice and timing.")
@click.option("--max-gap", type=click.FloatRange(0), default=None,
              help="Fail the run when clients got no acknowledged answer through the VIP for longer "
                   "than this many seconds (issue 23's storage campaign: 5).")
@click.option("--ballast", type=click.IntRange(0), default=0, show_default=True,
              help="First top up a tube no worker watches to this many 100-byte jobs, so the state "
                   "(snapshots, restarts, catch-ups) is as big as a long campaign's.")
@click.option("--client-timeout", type=click.FloatRange(0.1, 60), default=None,
              help="Seconds the queue workload's clients wait for an answer (default 1): a later answer "
                   "counts as none, in failover and in the client-visible gap.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None,
              help="Also write the full report here.")
def chaos(directory: str, scenario: str, runs: int, seed: int, max_gap: float | None, ballast: int,
          client_timeout: float | None, json_path: str | None) -> None:
    """Inject faults under load, drain, check the history.

    The workload runs in the client namespace through the VIP; every
    operation is recorded and the history checked (haqueue/lab/checker.py);
    so are the id service's requests (idworkload.py, idchecker.py).
    Exits 1 when anything was lost, unexpected or doubly reserved, or an id
    was handed out twice or out of order.
    """
    from haqueue.lab.report import format_report
    from haqueue.lab.runner import run_chaos, unknown
    from haqueue.lab.scenarios import CHOICES
    from haqueue.lab.lab import LabError
    from haqueue.progress import Progress, elapsed

    try:
        bad = unknown(scenario)
    except LabError as exc:
        raise HaqueueError(str(exc)) from None
    if bad:
        raise HaqueueError(f"--scenario: unknown {bad[0]!r} (one of: {', '.join(CHOICES)})")
    the_lab = _lab(directory)
    if not the_lab.is_up:
        raise HaqueueError(f"no lab is up in {directory}; run `haqueue lab up` first")
    try:
        # Per-fault lines on a terminal; quiet in pipes and CI (the report says it all).
        progress = Progress()
        started = time.monotonic()
        with progress.ticking(lambda: f"chaos {scenario}: {elapsed(started)} elapsed"):
            report = run_chaos(the_lab, scenario, runs, seed, progress=progress.line, max_gap=max_gap,
                               ballast=ballast, client_timeout=client_timeout)
    except LabError as exc:
        raise HaqueueError(f"chaos: {exc}") from None
    click.echo(format_report(report))
    if json_path:
        with open(json_path, "w") as f:
            json.dump(report, f, indent=2, sort_keys=True)
            f.write("\n")
    if not report["ok"]:
        raise click.exceptions.Exit(1)
