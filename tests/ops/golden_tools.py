"""Golden files for the gen-* renderers: compare, or rewrite with HAQUEUE_UPDATE_GOLDEN=1.

Layout: tests/ops/golden/<generator>/<case>/<file>, one directory per rendered
set, the cluster files they come from in tests/ops/golden/clusters/<case>.toml.
The Vagrant topology's sets are the examples shipped at the repository root
(keepalived/collocated, keepalived/lvs-dr, keepalived/systemd, rendered from
examples/vagrant-cluster.toml): they are compared where they are, so each
generated example exists once (tests/cli/test_ops_render.py renders the same
trees through `haqueue ops gen-*` and compares them too).
A behaviour change is reviewed as a diff of these files: run the tests with
HAQUEUE_UPDATE_GOLDEN=1, read `git diff tests/ops/golden keepalived`, commit.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from haqueue.config.cluster import Cluster, load_cluster
from haqueue.ops.render import RenderedFile

GOLDEN = Path(__file__).parent / "golden"
CLUSTERS = GOLDEN / "clusters"
REPO = Path(__file__).resolve().parents[2]
VAGRANT = REPO / "examples" / "vagrant-cluster.toml"
UPDATE = os.environ.get("HAQUEUE_UPDATE_GOLDEN") == "1"
# (generator, case) -> the shipped example that is its golden set (ops/render-examples.sh writes them).
EXAMPLES = {
    ("keepalived", "vagrant"): REPO / "keepalived" / "collocated",
    ("lvs", "vagrant-dr"): REPO / "keepalived" / "lvs-dr",
    ("systemd", "vagrant"): REPO / "keepalived" / "systemd",
}


def golden_dir(generator: str, case: str) -> Path:
    return EXAMPLES.get((generator, case), GOLDEN / generator / case)


def case_cluster(case: str) -> Cluster:
    return load_cluster(VAGRANT if case == "vagrant" else CLUSTERS / f"{case}.toml")


def case_config_arg(case: str) -> str:
    """How the header names the cluster file: as typed from the repository root."""
    path = VAGRANT if case == "vagrant" else CLUSTERS / f"{case}.toml"
    return str(path.relative_to(REPO))


def check_golden(generator: str, case: str, files: list[RenderedFile]) -> None:
    where = golden_dir(generator, case)
    if UPDATE:
        shutil.rmtree(where, ignore_errors=True)
        for f in files:
            path = where / f.name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(f.text)
            path.chmod(f.mode)  # the shipped examples' scripts stay executable
        return
    assert where.is_dir(), f"no golden files in {where}; run with HAQUEUE_UPDATE_GOLDEN=1"
    expected = sorted(str(p.relative_to(where)) for p in where.rglob("*") if p.is_file())
    assert sorted(f.name for f in files) == expected
    for f in files:
        golden = (where / f.name).read_text()
        assert f.text == golden, f"{generator}/{case}/{f.name} differs from its golden file"
        mode = (where / f.name).stat().st_mode & 0o777
        assert mode == f.mode, f"{generator}/{case}/{f.name}: mode {mode:o}, rendered {f.mode:o}"
