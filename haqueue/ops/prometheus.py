"""Prometheus for a haqueue cluster: the scrape config and the alert rules.

Owns `gen-prometheus`'s output:
- `prometheus-haqueue.yml`: a complete prometheus.yml scraping every node's
  admin port (/metrics; followers serve their own) with `cluster` and `node`
  labels, and loading the rules below. To add the job to an existing
  Prometheus, copy its `scrape_configs` entry and `rule_files` line.
- `haqueue-alerts.yml`: alerts an operator of a Raft queue wants paged for:
  no node serving, two nodes serving, a node down, a follower behind (in
  seconds and entries), fsync p99 slow, the data directory's disk filling,
  and any internal error.

Every expression names only series a node exports (haqueue/server/metrics.py)
or Prometheus' own `up`; tests check both files with the real promtool and
the names against a real node's /metrics. The rules' thresholds are constants
here, each with why.

Rules: deterministic text (YAML written out, no clocks); the cluster name and
node ids come from the validated cluster file (no quoting needed).
"""

from __future__ import annotations

from haqueue.config.cluster import Cluster
from haqueue.ops.render import RenderedFile, header

CONFIG_FILE = "prometheus-haqueue.yml"
RULES_FILE = "haqueue-alerts.yml"
SCRAPE_INTERVAL = "5s"  # failover takes about a second: coarser scrapes would miss who led
# A follower further behind than this, for a minute, is not keeping up
# (healthy ones trail by milliseconds; a restart catches up in seconds).
LAG_SECONDS = 5
LAG_ENTRIES = 10000
FSYNC_P99_SECONDS = 0.05  # -f0 waits for it on every commit: 50 ms caps a client at ~20 commits/s
DISK_FREE_RATIO = 0.10


def alert_rules(cluster: Cluster) -> list[dict]:
    """The alerts, as (name, expr, for, severity, summary, description)."""
    sel = f'cluster="{cluster.name}"'
    return [
        dict(alert="HaqueueNoLeader", expr=f"(sum(haqueue_serving{{{sel}}}) or vector(0)) < 1",
             duration="10s", severity="critical",
             summary=f"No haqueue node of {cluster.name} serves clients",
             description="No node has been leader and serving for 10 s: producers and workers are refused. "
                         "Look at `haqueue cluster status` and the nodes' logs."),
        dict(alert="HaqueueTwoLeaders", expr=f"sum(haqueue_serving{{{sel}}}) > 1",
             duration="5s", severity="critical",
             summary=f"Two haqueue nodes of {cluster.name} serve clients",
             description="More than one node says it serves (docs/design.md I3 forbids it for longer than a "
                         "lease): check the VIP with `haqueue ops check` on each node."),
        dict(alert="HaqueueNodeDown", expr=f"up{{{sel}}} == 0",
             duration="1m", severity="warning",
             summary="haqueue node {{ $labels.node }} does not answer /metrics",
             description="The cluster survives one node down; a second would stop it."),
        dict(alert="HaqueueFollowerLagging",
             expr=f"max by (node, peer) (haqueue_raft_follower_lag_seconds{{{sel}}}) > {LAG_SECONDS}"
                  f" or max by (node, peer) (haqueue_raft_follower_lag_entries{{{sel}}}) > {LAG_ENTRIES}",
             duration="1m", severity="warning",
             summary="Follower {{ $labels.peer }} is behind the leader",
             description=f"More than {LAG_SECONDS} s or {LAG_ENTRIES} entries behind for a minute: "
                         "a failover now would wait for it or lose a node's redundancy."),
        dict(alert="HaqueueFsyncSlow",
             expr=f"histogram_quantile(0.99, sum by (node, le) "
                  f"(rate(haqueue_journal_fsync_seconds_bucket{{{sel}}}[5m]))) > {FSYNC_P99_SECONDS}",
             duration="5m", severity="warning",
             summary="fsync p99 on {{ $labels.node }} above " f"{FSYNC_P99_SECONDS * 1000:.0f} ms",
             description="Every durable commit waits for an fsync: the disk is slowing the queue."),
        dict(alert="HaqueueDiskFilling",
             expr=f"haqueue_data_dir_free_bytes{{{sel}}} / haqueue_data_dir_size_bytes{{{sel}}} "
                  f"< {DISK_FREE_RATIO}",
             duration="5m", severity="warning",
             summary="Data directory of {{ $labels.node }} under " f"{DISK_FREE_RATIO:.0%} free",
             description="A full disk stops the node (storage errors are fatal): free space or grow it."),
        dict(alert="HaqueueBelowDiskReserve", expr=f"max by (node) (haqueue_disk_below_reserve{{{sel}}}) > 0",
             duration="1m", severity="critical",
             summary="{{ $labels.node }} is below its disk reserve: puts answer OUT_OF_MEMORY",
             description="The backlog has filled the disk to the room the next snapshot needs "
                         "(docs/operations.md, \"Disk reserve\"): drain the queue or grow the file system "
                         "on every node; new work is taken again by itself."),
        dict(alert="HaqueueInternalError", expr=f"increase(haqueue_internal_errors_total{{{sel}}}[10m]) > 0",
             duration="0s", severity="critical",
             summary="haqueue node {{ $labels.node }} answered INTERNAL_ERROR",
             description="A bug in the queue core: keep the node's log and report it."),
    ]


def _quoted(text: str) -> str:
    # YAML double-quoted scalar: escape backslashes and quotes.
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def render_rules(cluster: Cluster, command: str) -> str:
    lines = ["groups:", f"  - name: haqueue-{cluster.name}", "    rules:"]
    for rule in alert_rules(cluster):
        lines += [
            f"      - alert: {rule['alert']}",
            f"        expr: {_quoted(rule['expr'])}",
            f"        for: {rule['duration']}",
            "        labels:",
            f"          severity: {rule['severity']}",
            "        annotations:",
            f"          summary: {_quoted(rule['summary'])}",
            f"          description: {_quoted(rule['description'])}",
        ]
    return header(command, "next to prometheus.yml (listed in its rule_files)") + "\n".join(lines) + "\n"


def render_config(cluster: Cluster, command: str) -> str:
    lines = [
        "global:",
        f"  scrape_interval: {SCRAPE_INTERVAL}",
        f"  evaluation_interval: {SCRAPE_INTERVAL}",
        "rule_files:",
        f"  - {RULES_FILE}",
        "scrape_configs:",
        f"  - job_name: haqueue-{cluster.name}",
        "    metrics_path: /metrics",
    ]
    if cluster.admin_token:
        # /metrics answers 401 without the cluster's admin token (server/admin.py).
        lines += ["    authorization:", "      type: Bearer", f"      credentials: {_quoted(cluster.admin_token)}"]
    lines += ["    static_configs:"]
    for node in cluster.nodes:
        lines += [
            f'      - targets: ["{node.address}:{node.admin_port}"]',
            "        labels:",
            f"          cluster: {cluster.name}",
            f"          node: {node.id}",
        ]
    return header(command, "/etc/prometheus/prometheus.yml (or merge its job)") + "\n".join(lines) + "\n"


def render(cluster: Cluster, command: str) -> list[RenderedFile]:
    # The scrape job carries the admin token when there is one: readable by its owner only.
    return [RenderedFile(CONFIG_FILE, render_config(cluster, command), 0o600 if cluster.admin_token else 0o644),
            RenderedFile(RULES_FILE, render_rules(cluster, command))]
