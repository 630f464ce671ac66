"""The Vagrantfile: valid for Vagrant, true to the cluster file, and its provisioning runs.

Without VirtualBox nothing can boot here, so the Vagrantfile is checked three
ways: `vagrant validate` (when vagrant is installed), a run under Ruby with a
recording stand-in for Vagrant's configuration object (what machines, addresses
and provisioning commands it declares, compared with the cluster file), and
each provisioning command run for real into a DESTDIR.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys

import pytest

from haqueue.config.cluster import load_cluster
from tests.ops.ops_host_testlib import REPO

VAGRANTFILE = REPO / "Vagrantfile"
CLUSTER = REPO / "examples" / "vagrant-cluster.toml"

needs_ruby = pytest.mark.skipif(shutil.which("ruby") is None, reason="ruby is not installed (apt-get install ruby)")
needs_vagrant = pytest.mark.skipif(
    shutil.which("vagrant") is None,
    reason="vagrant is not installed (apt-get install vagrant; `apt-cache policy vagrant` shows if it is available)",
)

# Stands in for Vagrant: records every configuration call with the machine it belongs to.
RECORDER = r"""
require "json"
$calls = []
class Recorder
  def initialize(machine, path)
    @machine, @path = machine, path
  end

  def method_missing(name, *args, **kw, &blk)
    path = @path + [name.to_s]
    return Recorder.new(@machine, path) if args.empty? && kw.empty? && blk.nil? && !name.to_s.end_with?("=")
    $calls << { "machine" => @machine, "call" => path.join("."), "args" => args,
                "kwargs" => kw.transform_keys(&:to_s) }
    blk&.call(Recorder.new(path.join(".") == "vm.define" ? args[0] : @machine, []))
    nil
  end

  def respond_to_missing?(*)
    true
  end
end

module Vagrant
  def self.configure(version)
    raise "configuration version #{version}" unless version == "2"
    yield Recorder.new(nil, [])
  end
end

load ARGV[0]
puts JSON.generate($calls)
"""


def vagrant_env(tmp_path, lvs: bool) -> dict[str, str]:
    env = {**os.environ, "VAGRANT_DOTFILE_PATH": str(tmp_path / "dot"), "VAGRANT_HOME": str(tmp_path / "home"),
           "VAGRANT_CHECKPOINT_DISABLE": "1"}
    env.pop("HAQUEUE_LVS", None)
    if lvs:
        env["HAQUEUE_LVS"] = "1"
    return env


def recorded_calls(tmp_path, lvs: bool) -> list[dict]:
    stub = tmp_path / "recorder.rb"
    stub.write_text(RECORDER)
    out = subprocess.run(["ruby", str(stub), str(VAGRANTFILE)], capture_output=True, text=True, check=True,
                         env=vagrant_env(tmp_path, lvs), timeout=30)
    return json.loads(out.stdout)


def machines(calls: list[dict]) -> dict[str, dict]:
    """machine id -> its private network address and provisioning commands."""
    out: dict[str, dict] = {}
    for call in calls:
        if call["call"] == "vm.define":
            out[call["args"][0]] = {"ip": None, "provision": []}
        elif call["machine"] and call["call"] == "vm.network":
            assert call["args"] == ["private_network"]
            out[call["machine"]]["ip"] = call["kwargs"]["ip"]
        elif call["machine"] and call["call"] == "vm.provision":
            out[call["machine"]]["provision"].append(call["kwargs"]["inline"])
    return out


@needs_ruby
def test_vagrantfile_is_valid_ruby():
    result = subprocess.run(["ruby", "-c", str(VAGRANTFILE)], capture_output=True, text=True, timeout=30)
    assert result.returncode == 0 and "Syntax OK" in result.stdout, result.stderr


@needs_vagrant
@pytest.mark.parametrize("lvs", [False, True], ids=["collocated", "lvs"])
def test_vagrant_validate_passes(tmp_path, lvs):
    # --ignore-provider: VirtualBox is not installed where the tests run.
    result = subprocess.run(["vagrant", "validate", "--ignore-provider"], cwd=REPO, capture_output=True,
                            text=True, env=vagrant_env(tmp_path, lvs), timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Vagrantfile validated successfully." in result.stdout


@needs_ruby
@pytest.mark.parametrize("lvs", [False, True], ids=["collocated", "lvs"])
def test_vagrantfile_declares_the_cluster_files_machines_at_their_addresses(tmp_path, lvs):
    cluster = load_cluster(CLUSTER)
    declared = machines(recorded_calls(tmp_path, lvs))
    expected = {n.id: n.address for n in cluster.nodes}
    if lvs:
        expected.update({d.id: d.address for d in cluster.directors})
    assert {mid: m["ip"] for mid, m in declared.items()} == expected
    assert all(m.interface == "eth1" for m in cluster.nodes + cluster.directors)


def provision_args(command: str) -> tuple[list[str], dict[str, str]]:
    words = shlex.split(command)
    assert words[0] == "/vagrant/ops/install.sh", command
    flags = dict(zip(words[1::2], words[2::2]))
    return words, flags


@needs_ruby
@pytest.mark.parametrize("lvs", [False, True], ids=["collocated", "lvs"])
def test_every_machine_is_provisioned_by_install_sh_with_its_role(tmp_path, lvs):
    cluster = load_cluster(CLUSTER)
    declared = machines(recorded_calls(tmp_path, lvs))
    directors = {d.id for d in cluster.directors}
    for mid, machine in declared.items():
        (command,) = machine["provision"]
        _, flags = provision_args(command)
        role = "director" if mid in directors else ("realserver" if lvs else "node")
        assert flags == {
            "--config": "/vagrant/examples/vagrant-cluster.toml",
            "--id": mid,
            "--role": role,
            "--rendered": "/vagrant/keepalived",
            "--source": "/vagrant",
        }


@needs_ruby
def test_a_cluster_file_whose_interface_is_not_the_private_network_is_refused(tmp_path):
    # The Vagrantfile reads the cluster file next to it: run a copy in a scratch tree.
    (tmp_path / "examples").mkdir()
    (tmp_path / "examples" / "vagrant-cluster.toml").write_text(
        CLUSTER.read_text().replace('interface = "eth1"', 'interface = "enp0s8"', 1))
    shutil.copy(VAGRANTFILE, tmp_path / "Vagrantfile")
    stub = tmp_path / "recorder.rb"
    stub.write_text(RECORDER)
    result = subprocess.run(["ruby", str(stub), str(tmp_path / "Vagrantfile")], capture_output=True, text=True,
                            env=vagrant_env(tmp_path, False), timeout=30)
    assert result.returncode != 0
    assert "n1 uses interface enp0s8; the Vagrant private network is eth1" in result.stderr


@needs_ruby
@pytest.mark.parametrize("lvs, member", [(False, "n1"), (True, "n2"), (True, "d1")])
def test_provisioning_command_installs_the_committed_configs_into_a_destdir(tmp_path, lvs, member):
    """The exact command Vagrant would run, from this checkout, into a DESTDIR."""
    declared = machines(recorded_calls(tmp_path, lvs))
    (command,) = declared[member]["provision"]
    words, _ = provision_args(command)
    local = [w.replace("/vagrant", str(REPO), 1) if w.startswith("/vagrant") else w for w in words]
    root = tmp_path / "root"
    result = subprocess.run([*local, "--destdir", str(root), "--python", sys.executable], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    conf = root / "etc/keepalived/keepalived.conf"
    if member.startswith("d"):
        assert f"on director {member} (" in conf.read_text()
    elif lvs:
        # The rendered real-server side from keepalived/, and the unit that runs it.
        assert not conf.exists() and (root / "etc/systemd/system/haqueue-lvs-realserver.service").exists()
        assert f"on queue node {member}\n" in (root / "usr/local/sbin/lvs-realserver.sh").read_text()
    else:
        assert f"on {member} (" in conf.read_text()
