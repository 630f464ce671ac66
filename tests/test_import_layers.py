"""Imports in haqueue/ point one way: down the layers below, with no cycle between folders.

The scan reads every module's syntax tree (ast, not text: an import inside a
function, under TYPE_CHECKING or written `from haqueue import x` counts the
same), maps each imported haqueue module to its unit (a folder such as
server/, or a module at the package root such as events.py) and checks two
claims of issue 26: no unit imports from a layer above its own, and the units'
import graph has no cycle, within a layer included. A new folder or root
module fails test_every_unit_has_a_layer until it is given a place here.

Imports made by name at run time (cli/main.py's lazy command table) are not
seen; they stay inside cli/.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from functools import cache
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "haqueue"

# Bottom first. A unit may import from its own layer and the layers below it.
# The order is the one the code had when issue 26 fixed its two back-arrows
# (cluster.py <-> ops/ and cluster.py <-> server/, now config/):
LAYERS: list[tuple[str, ...]] = [
    # Leaves on the standard library alone, usable from anywhere: the queue's pure state
    # machine, the event record and logging set-up, a terminal progress line, the safe body
    # preview, the admin-port HTTP client, and the package's own __init__ (__version__).
    ("__init__", "core", "events", "logs", "progress", "preview", "admin_client", "roster"),
    # Over core only: the sans-I/O codecs, and the cluster file with every setting a node
    # runs with (config/ must stay cheap to import and free of the parts it configures).
    ("protocol", "config"),
    # What server/ builds on: Raft (replication/), and ops/, whose renderers and host checks
    # read only the cluster file; server/metrics.py asks ops/check.py whether this host
    # holds the VIP, so ops/ sits below server/, not beside the tools.
    ("replication", "ops"),
    # Backup files and restored data directories: the snapshot's records made portable
    # (the leader's endpoint that takes one is server/backup.py).
    ("backup",),
    ("server",),
    # Tools that drive nodes from outside: a local cluster, the operator console, the lab,
    # the benchmarks (bench/ starts a local_cluster).
    ("local_cluster", "console", "lab", "bench"),
    # The command line reaches everything; nothing imports it but the entry point.
    ("cli", "__main__"),
]
LAYER_OF = {unit: depth for depth, units in enumerate(LAYERS) for unit in units}


def module_name(path: Path) -> str:
    parts = ("haqueue",) + path.relative_to(PACKAGE).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def unit_of(module: str) -> str:
    """haqueue.server.app -> "server"; haqueue.events -> "events"; haqueue -> "__init__"."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def imported_modules(path: Path, module: str) -> set[str]:
    """The haqueue modules `path` imports, anywhere in its body."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolve against this module's package
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            # `from haqueue import events` imports the module haqueue.events;
            # `from haqueue import __version__` imports from the package itself.
            for alias in node.names:
                candidate = f"{base}.{alias.name}"
                is_module = (PACKAGE.parent / Path(*candidate.split("."))).with_suffix(".py").exists() \
                    or (PACKAGE.parent / Path(*candidate.split("."))).is_dir()
                found.add(candidate if is_module else base)
    return {name for name in found if name == "haqueue" or name.startswith("haqueue.")}


@cache  # every test reads the same tree; parse it once
def import_edges() -> dict[str, set[tuple[str, str]]]:
    """unit -> {(imported unit, importing module)} for imports that cross units."""
    edges: dict[str, set[tuple[str, str]]] = defaultdict(set)
    for path in sorted(PACKAGE.rglob("*.py")):
        module = module_name(path)
        source = unit_of(module) if module != "haqueue" else "__init__"
        for imported in imported_modules(path, module):
            target = unit_of(imported)
            if target != source:
                edges[source].add((target, module))
    return edges


def units() -> set[str]:
    found = {"__init__"}
    for entry in PACKAGE.iterdir():
        if entry.is_dir() and (entry / "__init__.py").exists():
            found.add(entry.name)
        elif entry.suffix == ".py" and entry.name != "__init__.py":
            found.add(entry.stem)
    return found


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one unit (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_scan_sees_the_imports_it_judges():
    # A scan that found nothing would pass the tests below: hold it to edges known to exist,
    # a plain import (server -> replication), a lazy one inside a function (server/app.py's
    # SIGHUP handler loads the cluster file) and `from haqueue import x` (logs -> events).
    edges = import_edges()
    assert ("replication", "haqueue.server.app") in edges["server"]
    assert ("config", "haqueue.server.app") in edges["server"]
    assert ("events", "haqueue.logs") in edges["logs"]


def test_every_unit_has_a_layer():
    assert units() - set(LAYER_OF) == set(), "give each new folder or root module a layer in LAYERS"
    assert set(LAYER_OF) - units() == set(), "LAYERS names a unit that no longer exists"


def test_no_module_imports_from_a_layer_above_its_own():
    upward = sorted(
        f"{module} ({source}, layer {LAYER_OF[source]}) imports {target} (layer {LAYER_OF[target]})"
        for source, targets in import_edges().items()
        for target, module in targets
        if LAYER_OF[target] > LAYER_OF[source]
    )
    assert upward == []


def test_no_cycle_between_folders():
    graph = {source: {target for target, _ in targets} for source, targets in import_edges().items()}
    assert cycles(graph) == []


def test_cycle_finder_finds_a_cycle_between_folders():
    # The finder itself, on the shape issue 26 removed: cluster.py <-> ops/.
    assert cycles({"cluster": {"ops", "core"}, "ops": {"cluster"}, "core": set()}) == [["cluster", "ops"]]


def test_config_imports_nothing_it_configures():
    # config/ is read by server/, ops/, replication/ and cli/; it may lean on core/ (the id
    # rules' validation) and nothing else of haqueue.
    used = {target for target, _ in import_edges()["config"]}
    assert used <= {"core"}


def test_only_config_parses_the_cluster_file():
    # The cluster file is TOML; no module outside config/ may read TOML itself.
    readers = sorted(
        module_name(path)
        for path in PACKAGE.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, (ast.Import, ast.ImportFrom))
        and any(name.split(".")[0] in ("tomllib", "tomli", "toml")
                for name in ([a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]))
    )
    assert readers == ["haqueue.config.cluster"]
