#!/bin/bash
#
# render-examples.sh [DIR]: regenerate the rendered examples for the Vagrant
# topology from examples/vagrant-cluster.toml into DIR (default: keepalived/).
# tests/cli/test_ops_render.py runs this into a temporary directory and fails
# when keepalived/ differs: after changing a generator, run it and commit.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
out=${1:-keepalived}
config=examples/vagrant-cluster.toml
haqueue=("${PYTHON:-python3}" -m haqueue)

rm -rf "$out/collocated" "$out/lvs-dr" "$out/systemd"
"${haqueue[@]}" ops gen-keepalived --config "$config" -o "$out/collocated"
"${haqueue[@]}" ops gen-lvs --config "$config" -o "$out/lvs-dr"
"${haqueue[@]}" ops gen-systemd --config "$config" -o "$out/systemd"
