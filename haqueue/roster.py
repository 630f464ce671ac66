"""Which nodes a view lists: the Raft group's live members, named through the cluster file.

A node's cluster file is what was deployed to it; the Raft group is what the
log says (replication/membership.py), and the two differ between a `cluster
add-node` or `remove-node` and the new file's deployment. Every view
(`cluster status`, `cluster members`, `haqueue top`, the status page's
/cluster, the admin port's redirects to the leader) lists, in this order:

- each member of the group as the serving leader knows it once its last
  change is settled (committed), else as the asking node knows it: with the
  id and addresses the file gives it, else those its addition carried
  (`member_info`, an /status key), else its Raft address alone;
- each node of the file that is not a member, marked "not a member".

Pure: callers fetch the /status answers (asyncio in the server, threads in
the CLI) and hand them in.
"""

from __future__ import annotations

from dataclasses import dataclass

MEMBER, NOT_MEMBER = "member", "not a member"


@dataclass(frozen=True)
class Node:
    """One line of a view. `node` is the id, or the Raft address when nobody knows the id."""

    node: str
    raft: str
    host: str | None
    admin_port: int | None
    client_port: int | None
    membership: str  # MEMBER or NOT_MEMBER
    in_file: bool


@dataclass(frozen=True)
class FileNode:
    id: str
    host: str
    admin_port: int
    raft: str
    client_port: int | None = None


def leader_view(answers) -> tuple[list[str], dict] | None:
    """(members, member_info) of the serving leader among `answers` (/status bodies),
    if one answered with its members settled; else None."""
    for answer in answers:
        if (answer and answer.get("role") == "leader" and answer.get("serving") and answer.get("members")
                and answer.get("members_settled", True)):
            return list(answer["members"]), dict(answer.get("member_info") or {})
    return None


def directory(file_nodes: list[FileNode], *infos: dict) -> dict[str, FileNode]:
    """Every node anybody can name, by Raft address: the file's, then those the member
    infos carry (from the additions' entries)."""
    known = {n.raft: n for n in file_nodes}
    for info in infos:
        for raft, item in (info or {}).items():
            if raft in known:
                continue
            host = item.get("host") or raft.rpartition(":")[0]
            known[raft] = FileNode(str(item.get("id") or raft), host, item.get("admin_port") or None, raft,
                                   item.get("client_port") or None)
    return known


def roster(file_nodes: list[FileNode], members: list[str] | None, *infos: dict) -> list[Node]:
    """The view's lines: the members (all the file's nodes when `members` is None:
    nobody said), then the file's nodes that are not members."""
    known = directory(file_nodes, *infos)
    in_file = {n.raft for n in file_nodes}
    if members is None:
        members = [n.raft for n in file_nodes]
    place = {n.raft: i for i, n in enumerate(file_nodes)}  # the file's order, then the others'
    members = sorted(members, key=lambda raft: (place.get(raft, len(place)), raft))
    lines = []
    for raft in members:
        entry = known.get(raft)
        if entry is None:
            lines.append(Node(raft, raft, raft.rpartition(":")[0], None, None, MEMBER, False))
        else:
            lines.append(Node(entry.id, raft, entry.host, entry.admin_port, entry.client_port, MEMBER,
                              raft in in_file))
    lines += [Node(n.id, n.raft, n.host, n.admin_port, n.client_port, NOT_MEMBER, True)
              for n in file_nodes if n.raft not in members]
    return lines
