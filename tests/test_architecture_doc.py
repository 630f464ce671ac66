"""docs/architecture.md is the module map: every module under haqueue/ is named in it.

A module counts as named when the page mentions it by its path from the package root
(`replication/on_loop.py`, `haqueue/events.py`), or by its file name inside the section
whose heading names its folder (`lone.py` under "### `replication/`"). Outside such a
section a bare file name is a module of the package root, so `cluster.py` under "### `cli/`"
names cli/cluster.py and nothing else. Package markers (`__init__.py`) and `__main__.py`
are not modules of their own. And every package path the page names exists, so a module that
moves takes its line in the map with it.
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "haqueue"
DOC = REPO / "docs" / "architecture.md"

HEADING = re.compile(r"^(#{1,6})\s+(.*)$")
FOLDER_IN_HEADING = re.compile(r"^`([\w/]+/)`")  # "### `server/`: one node" -> "server/"
PY_NAME = re.compile(r"(?<![\w/.])((?:[\w]+/)*[\w]+\.py)\b")


def modules() -> set[str]:
    """Every module's path from the package root, e.g. "replication/on_loop.py"."""
    return {
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        if path.name not in ("__init__.py", "__main__.py") and "__pycache__" not in path.parts
    }


def sections(text: str) -> list[tuple[str, str]]:
    """(folder, text) per section; folder is "" for a section whose heading names none."""
    out: list[tuple[str, list[str]]] = [("", [])]
    for line in text.splitlines():
        heading = HEADING.match(line)
        if heading:
            folder = FOLDER_IN_HEADING.match(heading[2])
            out.append((folder[1] if folder else "", []))
        out[-1][1].append(line)
    return [(folder, "\n".join(lines)) for folder, lines in out]


def named_modules(text: str, known: set[str]) -> set[str]:
    named = set()
    for folder, body in sections(text):
        for name in PY_NAME.findall(body):
            name = name.removeprefix("haqueue/")
            # Inside a folder's section a bare file name is that folder's module;
            # elsewhere a name is a path from the package root.
            candidates = [folder + name] if folder and "/" not in name else [name, folder + name]
            named.update(c for c in candidates if c in known)
    return named


def test_every_module_under_haqueue_is_named_in_architecture_md():
    known = modules()
    missing = sorted(known - named_modules(DOC.read_text(), known))
    assert not missing, (
        f"docs/architecture.md does not name {len(missing)} module(s): {', '.join(missing)}. "
        "Add each to the table of its folder's section (what it owns, in one line)."
    )


def test_a_file_name_counts_only_in_its_own_folders_section():
    known = {"cluster.py", "cli/cluster.py", "replication/lone.py", "server/beanstalk/session.py"}
    text = (
        "# Map\n\n"
        "### `cli/`: the command\n\n| `cluster.py` | the cluster commands |\n\n"
        "### `server/beanstalk/`: the front end\n\n| `session.py` | one connection |\n\n"
        "## Elsewhere\n\nThe leader's `lone.py` is mentioned here, outside its folder's section.\n"
    )
    assert named_modules(text, known) == {"cli/cluster.py", "server/beanstalk/session.py"}
    assert named_modules("See haqueue/replication/lone.py and cluster.py.", known) == {
        "replication/lone.py", "cluster.py"}


def test_every_module_path_architecture_md_names_exists():
    # A module moved or renamed leaves its old path in the map; the map must follow it.
    stale = []
    for folder, body in sections(DOC.read_text()):
        for name in PY_NAME.findall(body):
            if "/" not in name or name.startswith(("tests/", "scripts/")):
                continue  # a bare name may be pysyncobj's own file; tests and scripts are not the package
            name = name.removeprefix("haqueue/")
            if not ((PACKAGE / name).exists() or (PACKAGE / folder / name).exists()):
                stale.append(f"{name} (under {folder or 'a heading naming no folder'})")
    assert not stale, f"docs/architecture.md names paths that do not exist: {', '.join(stale)}"
