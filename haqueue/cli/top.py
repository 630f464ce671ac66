"""`haqueue top`: a live terminal view of the cluster, refreshing in place.

Every interval it asks one node for GET /cluster (the status page's data:
every node's role, term, indexes and lag, and every tube), trying the nodes
of the cluster file (and the members the last view named that the file does
not) in turn until one answers, so it keeps going through a failover. The
nodes are the live Raft members and the file's non-members (roster.py). Puts per second come from the change in each tube's total-jobs
between two refreshes.

On a terminal it draws on the alternate screen, redrawing in place (cursor
home, each line cleared to its end), and quits on `q` or Ctrl-C, restoring
the terminal; plain ANSI, so it works over ssh in any terminal. With --once,
or when stdout is not a terminal, it prints one frame and exits.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import sys
import time

import click

from haqueue import admin_client
from haqueue.cli.cluster import align
from haqueue.cli.options import config_option
from haqueue.cli.user_errors import load_cluster_file

ALT_SCREEN_ON, ALT_SCREEN_OFF = "\x1b[?1049h\x1b[?25l", "\x1b[?25h\x1b[?1049l"
HOME, CLEAR_LINE, CLEAR_BELOW = "\x1b[H", "\x1b[K", "\x1b[J"


def fetch_view(cluster, timeout: float = 0.5, last: dict | None = None) -> dict | None:
    """/cluster from the first node that answers: the file's, then the members the
    `last` view named that the file does not (added since it was deployed); None if none does."""
    places = [(m.address, m.admin_port) for m in cluster.nodes]
    for n in (last or {}).get("nodes", ()):
        if n.get("host") and n.get("admin_port") and (n["host"], n["admin_port"]) not in places:
            places.append((n["host"], n["admin_port"]))
    for address, admin_port in places:
        try:
            code, body = admin_client.get(address, admin_port, "/cluster", timeout, cluster.admin_token)
        except OSError:
            continue
        if code == 200:
            try:
                return json.loads(body)
            except ValueError:
                continue
    return None


class Rates:
    """Puts per second per tube, from total-jobs between two views."""

    def __init__(self) -> None:
        self._last: dict[str, tuple[int, int]] = {}  # tube -> (total jobs, time ms)

    def update(self, view: dict) -> dict[str, float]:
        now, rates, seen = view["time_ms"], {}, {}
        for tube in view["tubes"]:
            total = tube["total_jobs"]
            before = self._last.get(tube["name"])
            if before is not None and now > before[1]:
                rates[tube["name"]] = max(0, total - before[0]) * 1000 / (now - before[1])
            seen[tube["name"]] = (total, now)
        self._last = seen
        return rates


def render(view: dict | None, rates: dict[str, float], width: int, height: int) -> list[str]:
    clock = time.strftime("%H:%M:%S")
    if view is None:
        return [f"haqueue top  {clock}", "", "no node of the cluster answers /cluster"]
    leader = view["leader"] or ("several: " + ", ".join(view["serving"]) if view["serving"] else "none")
    lines = [f"haqueue top  cluster {view['cluster']}  leader {leader}  (seen from {view['node']})  {clock}", ""]
    nodes = [["node", "role", "serving", "term", "commit", "applied", "lag", "lag s", "member"]]
    for n in view["nodes"]:
        member = "not a member" if n.get("membership") == "not a member" else "yes"
        if not n.get("reachable"):
            nodes.append([n["node"], "unreachable", "-", "-", "-", "-", "-", "-", member])
            continue
        seconds = n.get("lag_seconds")
        nodes.append([n["node"], n.get("role", "?"), "yes" if n.get("serving") else "no", n.get("term", "?"),
                      n.get("commit_index", "?"), n.get("applied_index", "?"), n.get("lag_entries", "?"),
                      "-" if seconds is None else f"{seconds:.3f}", member])
    lines += align(nodes) + [""]
    tubes = sorted(view["tubes"], key=lambda t: (-t["ready"], t["name"]))
    room = max(1, height - len(lines) - 2)
    table = [["tube", "ready", "reserved", "delayed", "buried", "waiting", "puts/s"]]
    for t in tubes[:room]:
        table.append([t["name"], t["ready"], t["reserved"], t["delayed"], t["buried"], t["waiting"],
                      f"{rates.get(t['name'], 0.0):.1f}"])
    lines += align(table)
    if len(tubes) > room:
        lines.append(f"... {len(tubes) - room} more tubes")
    return [line[:width] for line in lines[:height]]


@contextlib.contextmanager
def _screen(out):
    """Alternate screen and single-key input on a terminal; restored however we leave."""
    import termios
    import tty

    fd = sys.stdin.fileno() if sys.stdin.isatty() else None
    saved = termios.tcgetattr(fd) if fd is not None else None
    out.write(ALT_SCREEN_ON)
    out.flush()
    try:
        if fd is not None:
            tty.setcbreak(fd)
        yield fd
    finally:
        if saved is not None:
            termios.tcsetattr(fd, termios.TCSADRAIN, saved)
        out.write(ALT_SCREEN_OFF)
        out.flush()


def _quit_pressed(fd: int | None, timeout: float) -> bool:
    if fd is None:
        time.sleep(timeout)
        return False
    deadline = time.monotonic() + timeout
    while (left := deadline - time.monotonic()) > 0:
        ready, _, _ = select.select([fd], [], [], left)
        if ready and os.read(fd, 1) in (b"q", b"Q"):
            return True
    return False


@click.command()
@config_option
@click.option("--interval", type=click.FloatRange(min=0.1), default=1.0, show_default=True,
              metavar="SECONDS", help="Time between refreshes.")
@click.option("--once", is_flag=True, help="Print one frame and exit (also when not on a terminal).")
def top(config_path, interval, once) -> None:
    """A live view of the cluster: nodes, roles, lag, tubes with depth and rates (q quits)."""
    cluster = load_cluster_file(config_path)
    out = sys.stdout
    rates = Rates()
    if once or not out.isatty():
        view = fetch_view(cluster)
        size = shutil.get_terminal_size()
        click.echo("\n".join(render(view, rates.update(view) if view else {}, size.columns, 10_000)))
        if view is None:
            raise click.exceptions.Exit(1)
        return
    try:
        with _screen(out) as keys:
            last = None  # the last view that came: the members it named, to ask too
            while True:
                view = fetch_view(cluster, last=last)
                last = view or last
                size = shutil.get_terminal_size()
                lines = render(view, rates.update(view) if view else {}, size.columns, size.lines)
                out.write(HOME + "".join(line + CLEAR_LINE + "\r\n" for line in lines[:-1])
                          + lines[-1] + CLEAR_LINE + CLEAR_BELOW)
                out.flush()
                if _quit_pressed(keys, interval):
                    return
    except KeyboardInterrupt:
        return
