"""`haqueue ops gen-prometheus` and ops/grafana-haqueue.json, checked by the real tools:
promtool checks the config and rules and unit-tests the leader alerts, and every series
they name is one a real node exports (haqueue/ops/prometheus.py)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

from haqueue import admin_client
from haqueue.cli.main import main
from tests.support.servers import free_port, start_haqueue
from tests.support.tools import require

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "examples/vagrant-cluster.toml"
DASHBOARD = REPO / "ops/grafana-haqueue.json"
SERIES = re.compile(r"\b((?:haqueue|beanstalkd|process)_[a-z0-9_]+)")


def promtool() -> str:
    return require("promtool")


def generate(tmp_path: Path, config: Path = CONFIG) -> Path:
    out = tmp_path / "prometheus"
    assert main(["ops", "gen-prometheus", "--config", str(config), "-o", str(out)]) == 0
    return out


def test_promtool_accepts_the_config_and_the_rules(tmp_path):
    tool = promtool()
    out = generate(tmp_path)
    for args in (["check", "config", "prometheus-haqueue.yml"], ["check", "rules", "haqueue-alerts.yml"]):
        done = subprocess.run([tool, *args], cwd=out, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stdout + done.stderr
    config = (out / "prometheus-haqueue.yml").read_text()
    for node in ("n1", "n2", "n3"):
        assert f"node: {node}" in config
    assert '"192.168.56.11:11500"' in config


def test_with_an_admin_token_the_scrape_job_sends_it_and_the_file_is_private(tmp_path):
    tool = promtool()
    with_token = tmp_path / "cluster.toml"
    with_token.write_text(CONFIG.read_text().replace("[cluster]\n", '[cluster]\nadmin_token = "t0k"\n', 1))
    out = generate(tmp_path, with_token)
    done = subprocess.run([tool, "check", "config", "prometheus-haqueue.yml"], cwd=out, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    config = (out / "prometheus-haqueue.yml").read_text()
    assert 'type: Bearer\n      credentials: "t0k"' in config
    assert (out / "prometheus-haqueue.yml").stat().st_mode & 0o077 == 0
    assert "credentials" not in (generate(tmp_path / "plain") / "prometheus-haqueue.yml").read_text()


LEADER_TESTS = """
rule_files: [haqueue-alerts.yml]
evaluation_interval: 5s
tests:
  - interval: 5s
    input_series:
      - series: 'haqueue_serving{cluster="orders", node="n1"}'
        values: '1x10 1x10 0x10'
      - series: 'haqueue_serving{cluster="orders", node="n2"}'
        values: '0x10 1x10 0x10'
    alert_rule_test:
      - eval_time: 40s
        alertname: HaqueueTwoLeaders
        exp_alerts: []
      - eval_time: 40s
        alertname: HaqueueNoLeader
        exp_alerts: []
      - eval_time: 100s
        alertname: HaqueueTwoLeaders
        exp_alerts:
          - exp_labels: {severity: critical}
            exp_annotations:
              summary: "Two haqueue nodes of orders serve clients"
              description: "More than one node says it serves (docs/design.md I3 forbids it for longer than a lease): check the VIP with `haqueue ops check` on each node."
      - eval_time: 155s
        alertname: HaqueueNoLeader
        exp_alerts:
          - exp_labels: {severity: critical}
            exp_annotations:
              summary: "No haqueue node of orders serves clients"
              description: "No node has been leader and serving for 10 s: producers and workers are refused. Look at `haqueue cluster status` and the nodes' logs."
"""


def test_leader_alerts_fire_on_two_leaders_and_on_none(tmp_path):
    tool = promtool()
    out = generate(tmp_path)
    (out / "leader-tests.yml").write_text(LEADER_TESTS)
    done = subprocess.run([tool, "test", "rules", "leader-tests.yml"], cwd=out, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def exported_series(tmp_path) -> set[str]:
    """Every sample name a real node's /metrics declares (empty families included)."""
    admin = free_port()
    srv = start_haqueue("--admin", f"127.0.0.1:{admin}", "-b", str(tmp_path / "data"), "-f0")
    try:
        code, body = admin_client.get("127.0.0.1", admin, "/metrics", 10)
    finally:
        srv.stop()
    assert code == 200
    names = set()
    for line in body.decode().splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split()
            names.add(name)
            if kind == "histogram":
                names |= {f"{name}_bucket", f"{name}_sum", f"{name}_count"}
    return names


def test_rules_and_dashboard_name_only_series_a_node_exports(tmp_path):
    exported = exported_series(tmp_path)
    out = generate(tmp_path)
    rules = (out / "haqueue-alerts.yml").read_text()
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    named = set(SERIES.findall(rules)) | {n for e in exprs for n in SERIES.findall(e)}
    assert {"haqueue_serving", "haqueue_raft_follower_lag_seconds", "haqueue_journal_fsync_seconds_bucket",
            "beanstalkd_tube_current_jobs_ready"} <= named
    assert named - exported == set()


def test_dashboard_is_importable_grafana_json():
    dashboard = json.loads(DASHBOARD.read_text())
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    assert {v["name"] for v in dashboard["templating"]["list"]} == {"datasource", "cluster"}
    for panel in dashboard["panels"]:
        assert panel["targets"], panel["title"]
        assert all('cluster="$cluster"' in t["expr"] for t in panel["targets"]), panel["title"]
