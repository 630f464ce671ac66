"""`haqueue cluster add-node`, `cluster remove-node`: change the Raft group online.

Thin commands over the leader's POST /membership (server/membership_http.py):
validate the new cluster file first (config/edit.py), find the leader among
the file's nodes (their /leader), ask it, follow a hand-off when the leader is
the node being removed, and write the new file only once the change is
committed. Anything wrong is one line and exit status 1.
"""

from __future__ import annotations

import getpass
import http.client
import json
import socket
import time
from pathlib import Path

import click

from haqueue.cli.options import config_option
from haqueue.cli.user_errors import HaqueueError, load_cluster_file

RETRY = 0.2  # seconds between looks for a leader
LISTED = 10  # node recover: the first and the last this many entries that may not have been committed


def post_membership(member, token: str | None, request: dict, timeout: float) -> tuple[int, dict]:
    """(status, JSON body) of POST /membership at `member`'s admin port; OSError if unreachable."""
    body = json.dumps(request).encode()
    headers = {"Content-Type": "application/json", "Content-Length": str(len(body)),
               "X-Haqueue-Operator": f"{getpass.getuser()}@{socket.gethostname()} (cli)"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    conn = http.client.HTTPConnection(member.address, member.admin_port, timeout=timeout)
    try:
        conn.request("POST", "/membership", body=body, headers=headers)
        response = conn.getresponse()
        data = response.read()
    except http.client.HTTPException as exc:
        raise OSError(f"bad HTTP answer: {exc}") from None
    finally:
        conn.close()
    try:
        return response.status, json.loads(data)
    except ValueError:
        return response.status, {"error": data.decode(errors="replace").strip()}


def find_leader(spec, deadline: float, exclude: str | None = None, prefer: str | None = None):
    """The node of `spec` whose /leader says 200 (`prefer`, a Raft address, asked first)."""
    from haqueue import admin_client

    members = [m for m in spec.nodes if m.id != exclude]
    members.sort(key=lambda m: m.raft_endpoint != prefer)
    while True:
        for member in members:
            if admin_client.is_leader(member.address, member.admin_port, 0.5):
                return member
        if time.monotonic() >= deadline:
            raise HaqueueError(f"no leader among {', '.join(m.id for m in members)} answered "
                               f"(is the cluster up? see `haqueue cluster status --config {spec.source}`)")
        time.sleep(RETRY)  # polling other processes' admin ports: no event to await


def change(spec, op: str, node_id: str, raft_address: str, timeout: float, extra: dict | None = None) -> list[str]:
    """Ask the leader to make the change and wait for its commit; the members' Raft addresses.
    `extra`: more of the request (an added node's host and ports, membership_http.py)."""
    deadline = time.monotonic() + timeout
    request = {"op": op, "id": node_id, "address": raft_address, **(extra or {})}
    prefer = None
    exclude = None
    sent = False  # a request may have reached a leader: a retry may find the change made
    while True:
        leader = find_leader(spec, deadline, exclude=exclude, prefer=prefer)
        try:
            status, answer = post_membership(leader, spec.admin_token, request, timeout=max(1.0, timeout))
        except OSError as exc:
            status, answer = 503, {"error": str(exc)}
        if status == 200:
            return list(answer.get("members", []))
        if status == 409 and sent:
            members = _members_of(leader, spec.admin_token)
            if members and (raft_address in members) == (op == "add"):
                return members  # an earlier try, whose answer was lost, made it
        sent = sent or "handed_off_to" not in answer
        if status == 503 and time.monotonic() < deadline:
            if answer.get("handed_off_to"):
                exclude = leader.id  # it stepped down to be removed: ask the new leader
                prefer = answer["handed_off_to"]
            elif answer.get("leader"):
                prefer = answer["leader"]
            time.sleep(RETRY)
            continue
        raise HaqueueError(f"{op} {node_id}: {leader.id} answered {status}: {answer.get('error', answer)}")


def _names(spec, members: list[str]) -> str:
    by_raft = {n.raft_endpoint: n.id for n in spec.nodes}
    return " ".join(by_raft.get(m, m) for m in members)


@click.command("add-node")
@config_option
@click.option("--id", "node_id", required=True, help="The new node's id.")
@click.option("--address", required=True, help="The new node's address (inside the VIP's subnet).")
@click.option("--priority", type=click.IntRange(1, 254), default=None,
              help="Its VRRP priority (default: below every node's).")
@click.option("--interface", default=None, help="Its VRRP interface (default: the first node's).")
@click.option("--client-port", type=click.IntRange(1, 65535), default=None, help="Its own client port.")
@click.option("--raft-port", type=click.IntRange(1, 65535), default=None, help="Its own Raft port.")
@click.option("--admin-port", type=click.IntRange(1, 65535), default=None, help="Its own admin port.")
@click.option("--write", is_flag=True, help="Replace FILE (default: write FILE's name with .new beside it).")
@click.option("--timeout", type=float, default=30.0, show_default=True, help="Seconds to wait for the commit.")
def add_node(config_path, node_id, address, priority, interface, client_port, raft_port, admin_port, write,
             timeout) -> None:
    """Add a node to the Raft group online, then write the new cluster file.

    Start the new node afterwards with `haqueue serve --config NEWFILE --node ID -b DIR`
    (an empty DIR): it catches up from the leader's snapshot."""
    from haqueue.config import edit as cluster_edit
    from haqueue.config.cluster import ClusterFileError

    spec = load_cluster_file(config_path)
    known = next((n for n in spec.nodes if n.id == node_id), None)
    try:
        text = open(config_path, encoding="utf-8").read()
        if known is not None and known.address == address:
            new_text, new_spec = text, spec  # named already (a second try): only the Raft change is left
        else:
            ports = {key: port for key, port in (("client_port", client_port), ("raft_port", raft_port),
                                                 ("admin_port", admin_port)) if port is not None}
            new_text, new_spec = cluster_edit.with_node(spec, text, node_id, address, priority=priority,
                                                        interface=interface, ports=ports)
    except ClusterFileError as exc:
        raise HaqueueError(str(exc)) from None
    member = new_spec.node(node_id)
    target = cluster_edit.target_path(config_path, write) if new_text != text else Path(config_path)
    deadline = time.monotonic() + timeout
    leader = find_leader(spec, deadline)
    if len(_members_of(leader, spec.admin_token)) == 1 and not _answers(member):
        # One member cannot commit the change alone once it counts the new one
        # (a majority of two is both): the new node must be up to acknowledge it.
        cluster_edit.write_file(target, new_text)
        raise HaqueueError(f"the cluster has one member, which needs {node_id} up to commit its addition: "
                           f"wrote {target}; start {node_id} with `haqueue serve --config {target} --node "
                           f"{node_id} -b DIR`, then run add-node again with --config {target}")
    # Its addresses ride in the entry: every view shows and reaches it before the new
    # file is deployed (roster.py).
    members = change(spec, "add", node_id, member.raft_endpoint, max(0.0, deadline - time.monotonic()),
                     {"host": member.address, "admin_port": member.admin_port, "client_port": member.client_port})
    cluster_edit.write_file(target, new_text)
    click.echo(f"added {node_id} ({member.raft_endpoint}); members: {_names(new_spec, members)}")
    click.echo(f"wrote {target}; start it with: haqueue serve --config {target} --node {node_id} -b DIR")


@click.command("remove-node")
@config_option
@click.option("--id", "node_id", required=True, help="The node to remove.")
@click.option("--write", is_flag=True, help="Replace FILE (default: write FILE's name with .new beside it).")
@click.option("--timeout", type=float, default=30.0, show_default=True, help="Seconds to wait for the commit.")
def remove_node(config_path, node_id, write, timeout) -> None:
    """Remove a node from the Raft group online (the leader hands off first), then write the new file."""
    from haqueue.config import edit as cluster_edit
    from haqueue.config.cluster import ClusterFileError

    spec = load_cluster_file(config_path)
    if [n.id for n in spec.nodes] == [node_id]:
        raise HaqueueError(f"{node_id} is the last node: a cluster cannot be empty")
    try:
        text = open(config_path, encoding="utf-8").read()
        new_text, _new_spec = cluster_edit.without_node(spec, text, node_id)
    except ClusterFileError as exc:
        raise HaqueueError(str(exc)) from None
    member = spec.node(node_id)
    members = change(spec, "remove", node_id, member.raft_endpoint, timeout)
    target = cluster_edit.target_path(config_path, write)
    cluster_edit.write_file(target, new_text)
    click.echo(f"removed {node_id} ({member.raft_endpoint}); members: {_names(spec, members)}")
    click.echo(f"wrote {target}; {node_id} stops by itself once it learns it (exit status 78); "
               f"disable its service so nothing starts it again")


@click.command("recover")
@config_option
@click.option("--node", "node_id", required=True, help="The surviving node (stopped) to recover.")
@click.option("-b", "--data-dir", required=True, type=click.Path(file_okay=False),
              help="Its data directory.")
@click.option("--force-new-cluster", is_flag=True,
              help="Required: make this node a cluster of one holding its log (the others are gone for good).")
@click.option("--yes", is_flag=True, help="Go ahead even though another member answers.")
@click.option("--write", is_flag=True, help="Replace FILE (default: write FILE's name with .new beside it).")
def recover(config_path, node_id, data_dir, force_new_cluster, yes, write) -> None:
    """Turn a stopped survivor of a lost majority into a one-node cluster holding its log.

    Prints the entries it holds that may never have been committed (they will be now),
    writes the cluster file naming it alone, and says how to start it; grow the cluster
    back with `cluster add-node` (docs/operations.md, "Recovering from a lost majority")."""
    from haqueue.config import edit as cluster_edit
    from haqueue.config.cluster import ClusterFileError

    spec, member = load_cluster_file(config_path, node_id)
    if not force_new_cluster:
        raise HaqueueError("node recover rewrites the cluster's membership: say --force-new-cluster "
                           "(read docs/operations.md, \"Recovering from a lost majority\", first)")
    from haqueue.replication.recover import RecoverError, force_new_cluster as force, survey

    if _answers(member):
        raise HaqueueError(f"{node_id} answers on {member.address}:{member.admin_port}: stop it first")
    file_members = [n.raft_endpoint for n in spec.nodes]
    try:
        found = survey(data_dir, member.raft_endpoint, file_members)
    except (RecoverError, OSError, ValueError) as exc:
        raise HaqueueError(f"{data_dir}: {exc}") from None
    by_raft = {n.raft_endpoint: n for n in spec.nodes}
    answering = [by_raft[m].id for m in found.members
                 if m != member.raft_endpoint and m in by_raft and _answers(by_raft[m])]
    if answering and not yes:
        verb = "answers" if len(answering) == 1 else "answer"
        raise HaqueueError(f"{', '.join(answering)} still {verb}: a cluster that has a majority needs no "
                           f"recovery (remove-node the dead ones instead); --yes to go ahead anyway")
    try:
        text = open(config_path, encoding="utf-8").read()
        new_text, _new_spec = cluster_edit.only_node(spec, text, node_id)
    except ClusterFileError as exc:
        raise HaqueueError(str(exc)) from None
    try:
        found, removed = force(data_dir, member.raft_endpoint, file_members)
    except (RecoverError, OSError, ValueError) as exc:
        raise HaqueueError(f"{data_dir}: {exc}") from None
    click.echo(f"{node_id}: last entry {found.last_index} (term {found.last_term}); "
               f"known committed through {found.committed}")
    if found.uncommitted:
        click.echo(f"{len(found.uncommitted)} entries may not have been committed (they will be now; the stored "
                   f"commit index lags, so many of them were):")
        shown = found.uncommitted
        if len(shown) > 2 * LISTED:
            shown = shown[:LISTED] + [None] + shown[-LISTED:]
        for item in shown:
            if item is None:
                click.echo(f"  ... {len(found.uncommitted) - 2 * LISTED} more ...")
            else:
                index, term, what = item
                click.echo(f"  {index} (term {term}): {what}")
    else:
        click.echo("every entry it holds is known to be committed")
    names = {n.raft_endpoint: n.id for n in spec.nodes}
    click.echo(f"removed from its log's members: {' '.join(names.get(a, a) for a in removed) or '-'}")
    target = cluster_edit.target_path(config_path, write)
    cluster_edit.write_file(target, new_text)
    click.echo(f"wrote {target}; start it with: haqueue serve --config {target} --node {node_id} -b {data_dir}")
    click.echo("then grow the cluster back with: haqueue cluster add-node")


def _answers(member) -> bool:
    """Does `member`'s admin port answer at all (any role)?"""
    from haqueue import admin_client

    try:
        admin_client.get(member.address, member.admin_port, "/health", 0.5)
        return True
    except OSError:
        return False


def _members_of(member, token: str | None) -> list[str]:
    """The Raft members `member` knows ([] if it cannot say)."""
    return list(_status_of(member, token).get("members", []))


def _status_of(member, token: str | None) -> dict:
    """`member`'s /status ({} if it cannot say)."""
    from haqueue import admin_client

    try:
        return admin_client.status(member.address, member.admin_port, 1.0, token=token)
    except (OSError, ValueError):
        return {}


@click.command("members")
@config_option
@click.option("--timeout", type=float, default=5.0, show_default=True, help="Seconds to look for the leader.")
def members(config_path, timeout) -> None:
    """The Raft members as the leader knows them, beside the file's nodes.

    One line per node: id (or -), Raft address, and whether the leader and FILE agree
    on it. Exit status 0 when they agree, 1 when they differ (deploy the newest file)."""
    spec = load_cluster_file(config_path)
    leader = find_leader(spec, time.monotonic() + timeout)
    status = _status_of(leader, spec.admin_token)
    known = list(status.get("members") or [])
    if not known:
        raise HaqueueError(f"{leader.id} did not say its members (an older haqueue, or a lone node)")
    from haqueue.cli.cluster import align, file_nodes
    from haqueue.roster import MEMBER, roster

    rows = []
    for line in roster(file_nodes(spec), known, status.get("member_info") or {}):
        node_id = line.node if line.node != line.raft else "-"
        if line.membership != MEMBER:
            rows.append((node_id, line.raft, "in the file, NOT a member"))
        else:
            rows.append((node_id, line.raft, "member, in the file" if line.in_file else "member, NOT in the file"))
    for line in align([["node", "raft", "state"], *[list(r) for r in rows]]):
        click.echo(line)
    if set(known) != {n.raft_endpoint for n in spec.nodes}:
        raise click.exceptions.Exit(1)
