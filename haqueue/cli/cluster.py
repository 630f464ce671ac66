"""`haqueue cluster status`: every node's view of the cluster, in one table.

The nodes are the Raft group's live members as the serving leader knows them,
not only the file's (roster.py): a member added since the file was deployed
shows (by its id and addresses when its addition carried them, else by its Raft
address), and a node of the file that is no longer a member shows as "not a
member"."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import click

from haqueue import admin_client
from haqueue.cli.options import config_option
from haqueue.cli.user_errors import load_cluster_file
from haqueue.roster import NOT_MEMBER, FileNode, leader_view, roster

COLUMNS = ("node", "reachable", "role", "term", "commit", "applied", "lag", "client_port", "leader", "member")


def file_nodes(cluster) -> list[FileNode]:
    return [FileNode(n.id, n.address, n.admin_port, n.raft_endpoint, n.client_port) for n in cluster.nodes]


def collect(cluster, timeout: float = 0.5, digest: bool = False) -> list[dict]:
    """A row per node as roster.py lists them: the serving leader's members (named
    through the file, or through the entries that added them), then the file's
    nodes that are not members; each with its /status when it answers."""
    answers: dict = {}
    ports: dict = {}

    def one(entry) -> None:
        try:
            answers[entry.raft] = admin_client.status(entry.host, entry.admin_port, timeout, digest,
                                                      token=cluster.admin_token)
        except (OSError, ValueError):
            answers[entry.raft] = None
        ports[entry.raft] = bool(entry.client_port) and admin_client.port_open(entry.host, entry.client_port,
                                                                                timeout)

    def ask_all(entries) -> None:
        todo = [e for e in entries if e.raft not in answers and e.admin_port]
        if todo:
            with ThreadPoolExecutor(max_workers=len(todo)) as pool:
                list(pool.map(one, todo))

    nodes = file_nodes(cluster)
    ask_all(nodes)
    infos = [a.get("member_info") or {} for a in answers.values() if a]
    leader = leader_view(answers.values())
    members, info = leader if leader is not None else (None, {})
    lines = roster(nodes, members, *infos, info)
    ask_all(lines)
    rows = []
    for line in lines:
        row = {"node": line.node, "address": line.host, "raft": line.raft, "membership": line.membership,
               "client_port": ports.get(line.raft, False)}
        answer = answers.get(line.raft)
        if answer is None:
            row.update(reachable=False)
        else:
            row.update(reachable=True, **answer)
        rows.append(row)
    by_raft = {row["raft"]: row["node"] for row in rows}
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
    """A table: node, reachable, role, term, commit, applied, lag, client port, leader, member."""
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
        member = "not a member" if r.get("membership") == NOT_MEMBER else "yes"
        if not r.get("reachable"):
            line = [r["node"], "no", "-", "-", "-", "-", "-", "open" if r["client_port"] else "closed", "-", member]
        else:
            line = [
                r["node"], "yes", r.get("role", "?"), str(r.get("term", "?")), str(r.get("commit_index", "?")),
                str(r.get("applied_index", "?")), str(r.get("lag", "?")),
                "open" if r["client_port"] else "closed", r.get("leader_id", "-"), member,
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
