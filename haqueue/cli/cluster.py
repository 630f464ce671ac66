"""`haqueue cluster status`: every node's view of the cluster, in one table."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import click

from haqueue import admin_client
from haqueue.cli.options import config_option
from haqueue.cli.user_errors import load_cluster_file

COLUMNS = ("node", "reachable", "role", "term", "commit", "applied", "lag", "client_port", "leader")


def collect(cluster, timeout: float = 0.5, digest: bool = False) -> list[dict]:
    def one(member):
        row = {"node": member.id, "address": member.address}
        try:
            status = admin_client.status(member.address, member.admin_port, timeout, digest,
                                         token=cluster.admin_token)
        except (OSError, ValueError):
            row.update(reachable=False)
        else:
            row.update(reachable=True, **status)
        row["client_port"] = admin_client.port_open(member.address, member.client_port, timeout)
        return row

    with ThreadPoolExecutor(max_workers=len(cluster.nodes)) as pool:
        rows = list(pool.map(one, cluster.nodes))
    by_raft = {m.raft_endpoint: m.id for m in cluster.nodes}
    leader_commit = max((r.get("commit_index") or 0) for r in rows)
    for row in rows:
        if row.get("reachable"):
            row["lag"] = leader_commit - (row.get("applied_index") or 0)
            row["leader_id"] = by_raft.get(row.get("leader"), row.get("leader") or "-")
    return rows


@click.group()
def cluster() -> None:
    """Look at a whole cluster, and change its members."""


@cluster.command("status")
@config_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.option("--digest", is_flag=True, help="Include each node's state digest.")
def status(config_path, as_json, digest) -> None:
    """A table: node, reachable, role, term, commit, applied, lag, client port, leader."""
    spec = load_cluster_file(config_path)
    rows = collect(spec, digest=digest)
    if as_json:
        click.echo(json.dumps(rows, indent=2, sort_keys=True))
    else:
        click.echo(render_table(rows, digest))
    leaders = [r for r in rows if r.get("serving")]
    if len(leaders) != 1:
        raise click.exceptions.Exit(1)


def render_table(rows: list[dict], digest: bool = False) -> str:
    header = list(COLUMNS) + (["digest"] if digest else [])
    lines = [header]
    for r in rows:
        if not r.get("reachable"):
            line = [r["node"], "no", "-", "-", "-", "-", "-", "open" if r["client_port"] else "closed", "-"]
        else:
            line = [
                r["node"], "yes", r.get("role", "?"), str(r.get("term", "?")), str(r.get("commit_index", "?")),
                str(r.get("applied_index", "?")), str(r.get("lag", "?")),
                "open" if r["client_port"] else "closed", r.get("leader_id", "-"),
            ]
        if digest:
            line.append((r.get("digest") or "-")[:16])
        lines.append(line)
    return "\n".join(align(lines))


def align(rows: list[list]) -> list[str]:
    """Rows of cells as text lines, each column left-aligned to its widest cell."""
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(rows[0]))]
    return ["  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]


def _membership_commands() -> None:
    # add-node, remove-node: their own module (cli/membership.py)
    from haqueue.cli.membership import add_node, members, remove_node

    cluster.add_command(add_node)
    cluster.add_command(remove_node)
    cluster.add_command(members)


_membership_commands()
