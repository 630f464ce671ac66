"""The cluster file after a membership change: one [[nodes]] table added or removed, as text.

`cluster add-node`, `remove-node` and `node recover` write the file an
operator deploys next. The edit is textual, so comments, key order and every
other table stay as the operator wrote them: a new member is a [[nodes]] table
appended at the end (TOML lets an array's tables sit anywhere), a removed one
is its [[nodes]] table cut out, up to the next table header. The result is
validated as a whole (cluster.parse_cluster) before anything is sent to a
node, so an address outside the VIP's subnet or a duplicate priority is one
line, and the cluster is left unchanged.

The new file is written beside the old one (cluster.toml -> cluster.new.toml)
unless the operator asks for the old one to be replaced (--write); either way
atomically (a temporary file renamed into place).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from haqueue.config.cluster import Cluster, ClusterFileError, parse_cluster

_HEADER = re.compile(r"^\s*\[")
_NODES_HEADER = re.compile(r"^\s*\[\[\s*nodes\s*\]\]\s*(#.*)?$")
_ID_LINE = re.compile(r"""^\s*id\s*=\s*["']([^"']*)["']""")


def default_priority(cluster: Cluster) -> int:
    """Below every node's (VRRP: a new member is the last choice for the VIP), unique."""
    taken = {n.priority for n in cluster.nodes}
    candidate = min(taken) - 10 if taken else 100
    while candidate in taken or candidate < 1:
        candidate = candidate - 1 if candidate > 1 else max(taken) + 1
    return candidate


def with_node(cluster: Cluster, text: str, node_id: str, address: str, *, priority: int | None = None,
              interface: str | None = None, ports: dict[str, int] | None = None) -> tuple[str, Cluster]:
    """(the file's text with one more [[nodes]] table, its validated Cluster); `ports`:
    the node's own client_port, raft_port, admin_port where they differ from the cluster's."""
    if any(n.id == node_id for n in cluster.nodes):
        raise ClusterFileError(f"{cluster.source}: node {node_id!r} is already in the file")
    priority = default_priority(cluster) if priority is None else priority
    interface = interface or cluster.nodes[0].interface
    block = ["", "[[nodes]]", f"id = {_quote(node_id)}", f"address = {_quote(address)}",
             f"interface = {_quote(interface)}", f"priority = {priority}",
             *(f"{key} = {int(port)}" for key, port in sorted((ports or {}).items())), ""]
    new_text = text.rstrip("\n") + "\n" + "\n".join(block)
    return new_text, parse_cluster(new_text, source=cluster.source)


def without_node(cluster: Cluster, text: str, node_id: str) -> tuple[str, Cluster]:
    """(the file's text without NODE_ID's [[nodes]] table, its validated Cluster)."""
    cluster.node(node_id)  # one line naming the known nodes if it is not there
    lines = text.splitlines(keepends=True)
    start = end = None
    i = 0
    while i < len(lines):
        if _NODES_HEADER.match(lines[i]):
            j = i + 1
            while j < len(lines) and not _HEADER.match(lines[j]):
                j += 1
            if any((m := _ID_LINE.match(line)) and m.group(1) == node_id for line in lines[i + 1:j]):
                start, end = i, j
                break
            i = j
        else:
            i += 1
    if start is None:
        raise ClusterFileError(f"{cluster.source}: cannot find the [[nodes]] table of {node_id!r} to cut out")
    new_text = "".join(lines[:start] + lines[end:])
    return new_text, parse_cluster(new_text, source=cluster.source)


def only_node(cluster: Cluster, text: str, node_id: str) -> tuple[str, Cluster]:
    """(the file's text with NODE_ID as its one node, its validated Cluster): node recover."""
    new = cluster
    for other in cluster.nodes:
        if other.id != node_id:
            text, new = without_node(new, text, other.id)
    return text, new


def target_path(path: str | Path, write: bool) -> Path:
    """Where the new file goes: in place with --write, else NAME.new.SUFFIX beside it."""
    path = Path(path)
    if write:
        return path
    return path.with_name(f"{path.stem}.new{path.suffix or '.toml'}")


def write_file(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".writing")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
