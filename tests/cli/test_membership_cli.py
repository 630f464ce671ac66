"""`cluster add-node`, `cluster remove-node`, `node recover`: bad input is one line and a
non-zero exit, and nothing is written (haqueue/cli/membership.py). Run through the real
entry point; the clusters' own behaviour is tests/cluster/test_membership.py's."""

from __future__ import annotations

import pytest

from haqueue.cli.main import main
from haqueue.local_cluster import write_cluster_file


@pytest.fixture
def config(tmp_path):
    return write_cluster_file(tmp_path / "cluster.toml", nodes=3, client_port=20000, pick_free=False)


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("args, says", [
    (("cluster", "add-node", "--id", "n4", "--address", "10.0.0.1"), "outside the VIP's subnet"),
    (("cluster", "add-node", "--id", "n2", "--address", "127.0.0.19"), "node 'n2' is already in the file"),
    (("cluster", "add-node", "--id", "bad id", "--address", "127.0.0.19"), "must be letters, digits"),
    (("cluster", "add-node", "--id", "n4", "--address", "127.0.0.14", "--priority", "150"), "duplicate priority"),
    (("cluster", "add-node", "--id", "n4", "--address", "127.0.0.14", "--timeout", "0.2"), "no leader among"),
    (("cluster", "add-node", "--id", "n4", "--address", "127.0.0.14", "--priority", "0"), "--priority"),
    (("cluster", "remove-node", "--id", "n9"), "no node 'n9'"),
    (("cluster", "remove-node", "--id", "n1", "--timeout", "0.2"), "no leader among"),
    (("node", "recover", "--node", "n1", "-b", "/nonexistent/haqueue", "--force-new-cluster"), "no such directory"),
    (("node", "recover", "--node", "n1", "-b", "/tmp"), "--force-new-cluster"),
    (("node", "recover", "--node", "n7", "-b", "/tmp", "--force-new-cluster"), "no node 'n7'"),
])
def test_bad_input_is_one_line_and_a_non_zero_exit_and_writes_nothing(config, capsys, args, says):
    before = sorted(p.name for p in config.parent.iterdir())
    text = config.read_text()
    code, out, err = run(capsys, *args, "--config", str(config))
    assert code != 0
    assert out == "" and err.count("\n") == 1, err
    assert says in err
    assert sorted(p.name for p in config.parent.iterdir()) == before and config.read_text() == text


def test_the_last_node_cannot_be_removed(tmp_path, capsys):
    config = write_cluster_file(tmp_path / "one.toml", nodes=1, client_port=20000, pick_free=False)
    code, out, err = run(capsys, "cluster", "remove-node", "--id", "n1", "--config", str(config))
    assert (code, out) == (1, "") and "last node" in err and err.count("\n") == 1


def test_recover_finds_nothing_to_recover_in_an_empty_directory(config, tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    code, out, err = run(capsys, "node", "recover", "--config", str(config), "--node", "n1", "-b", str(empty),
                         "--force-new-cluster")
    assert (code, out) == (1, "") and "nothing to recover" in err and err.count("\n") == 1
    assert list(empty.iterdir()) == []


def test_the_new_file_keeps_the_old_text_and_adds_one_table(config):
    from haqueue.config import edit as cluster_edit
    from haqueue.config.cluster import load_cluster

    spec = load_cluster(config)
    text = "# kept comment\n" + config.read_text()
    added, new = cluster_edit.with_node(spec, text, "n4", "127.0.0.14", ports={"raft_port": 29999})
    assert added.startswith(text) and "# kept comment" in added
    assert new.node("n4").raft_endpoint == "127.0.0.14:29999"
    assert new.node("n4").priority < min(n.priority for n in spec.nodes)
    removed, smaller = cluster_edit.without_node(new, added, "n2")
    assert [n.id for n in smaller.nodes] == ["n1", "n3", "n4"] and "# kept comment" in removed
    assert cluster_edit.target_path(config, write=False).name == "cluster.new.toml"
