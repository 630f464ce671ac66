"""A node's Raft settings are built once, from the cluster file or the flags, as one value.

The server hands NodeOptions.replication whole to the replica (config/replication.py);
these check that what `haqueue serve` builds there is the node's own endpoint, its peers,
the cluster's secret, the fsync policy and the journal limit it was given.
"""

from __future__ import annotations

from pathlib import Path

from haqueue.cli import node_start, serve
from haqueue.config.fsync_policy import DURABLE, NEVER
from haqueue.config.replication import ReplicationSettings

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "vagrant-cluster.toml"


def test_a_cluster_node_gets_its_raft_settings_from_the_file_in_one_value():
    options = serve._cluster_options(str(EXAMPLE), "n2", None, DURABLE, 65535)
    node_start.set_compaction(options, 4096, True)
    assert options.replication == ReplicationSettings(
        self_address="192.168.56.12:11400",
        partners=["192.168.56.11:11400", "192.168.56.13:11400"],
        data_dir=None,  # the example's node has no data_dir of its own: systemd's unit passes -b
        policy=DURABLE,
        secret="change-me",
        journal_limit=4096,
    )
    assert options.raft_address == "192.168.56.12:11400"


def test_a_data_dir_flag_wins_over_the_file_and_no_compaction_means_no_limit(tmp_path):
    options = serve._cluster_options(str(EXAMPLE), "n1", str(tmp_path), NEVER, 65535)
    node_start.set_compaction(options, 4096, False)
    assert options.replication.data_dir == str(tmp_path)
    assert options.replication.journal_limit is None
    assert options.replication.policy == NEVER


def test_a_lone_node_has_no_partners_and_keeps_its_flags(tmp_path):
    options = node_start.lone_options("127.0.0.1", 0, str(tmp_path), DURABLE, 1024)
    assert options.replication == ReplicationSettings("127.0.0.1:0", [], data_dir=str(tmp_path), policy=DURABLE)
    assert options.max_job_size == 1024
