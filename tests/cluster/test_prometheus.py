"""A real Prometheus scrapes a real 3-node cluster; PromQL finds exactly one leader, before and
after the leader is killed (haqueue/server/metrics.py, tests/support/prometheus.py)."""

from __future__ import annotations

import json

from haqueue import admin_client
from tests.support.prometheus import require_prometheus, running_prometheus

LEADERS = "haqueue_raft_leader == 1 and haqueue_serving == 1"


def scrape_jobs(cluster) -> dict:
    return {"haqueue": [(f"{m.address}:{m.admin_port}", {"node": m.id}) for m in cluster.spec.nodes]}


def one_leader(result) -> bool:
    return len(result) == 1


def test_prometheus_finds_exactly_one_leader_before_and_after_the_leader_is_killed(make_cluster, tmp_path):
    require_prometheus()
    cluster = make_cluster()
    with running_prometheus(tmp_path / "prometheus", scrape_jobs(cluster)) as prometheus:
        prometheus.wait_for("up == 1", lambda r: len(r) == 3, what="all three nodes scraped")
        first = cluster.leader()
        found = prometheus.wait_for(LEADERS, one_leader, what="one leader")
        assert found[0]["metric"]["node"] == first.id
        # Followers serve their own metrics too, and know they follow.
        followers = prometheus.query('haqueue_raft_role{role="follower"} == 1')
        assert sorted(r["metric"]["node"] for r in followers) == sorted(
            m.id for m in cluster.spec.nodes if m.id != first.id)
        # The leader reports both followers' lag (in entries and seconds).
        lag = prometheus.wait_for(f'haqueue_raft_follower_lag_entries{{node="{first.id}"}}',
                                  lambda r: len(r) == 2, what="leader reports two followers")
        assert all(float(r["value"][1]) >= 0 for r in lag)
        # Peers are named by their ids in the cluster file.
        assert sorted(r["metric"]["peer"] for r in lag) == sorted(
            m.id for m in cluster.spec.nodes if m.id != first.id)
        # The loopback cluster's VIP (127.0.0.100) is on no interface: no node holds it.
        prometheus.wait_for("haqueue_vip_held == 0", lambda r: len(r) == 3, what="VIP held by none")

        cluster.kill_node(first.id)  # SIGKILL by the PID this test started
        prometheus.wait_for(f'up{{node="{first.id}"}} == 0', lambda r: len(r) == 1, what="dead node down")
        second = prometheus.wait_for(LEADERS, lambda r: one_leader(r) and r[0]["metric"]["node"] != first.id,
                                     what="a new, single leader")
        assert second[0]["metric"]["node"] == cluster.leader(exclude=first.id).id
        assert len(prometheus.query(LEADERS)) == 1
        won = prometheus.query(f'haqueue_raft_elections_won_total{{node="{second[0]["metric"]["node"]}"}}')
        assert float(won[0]["value"][1]) >= 1


def test_with_an_admin_token_prometheus_and_the_cluster_view_send_it(make_cluster, tmp_path):
    """/metrics and /cluster need the token (server/admin.py): Prometheus scrapes with it, as
    gen-prometheus renders it, and a node's /cluster view asks its peers' /status with it (it
    showed every peer unreachable before the nodes sent the token to each other)."""
    require_prometheus()
    cluster = make_cluster(("-f0", "--admin-token", "s3cret"))
    leader = cluster.leader()
    viewer = next(m for m in cluster.spec.nodes if m.id != leader.id)
    assert admin_client.get(viewer.address, viewer.admin_port, "/cluster", 5)[0] == 401
    code, body = admin_client.get(viewer.address, viewer.admin_port, "/cluster", 5, "s3cret")
    assert code == 200
    view = json.loads(body)
    assert {n["node"]: n["reachable"] for n in view["nodes"]} == {m.id: True for m in cluster.spec.nodes}
    assert [n["node"] for n in view["nodes"] if n.get("serving")] == [leader.id]
    with running_prometheus(tmp_path / "prometheus", scrape_jobs(cluster), token="s3cret") as prometheus:
        prometheus.wait_for("up == 1", lambda r: len(r) == 3, what="all three nodes scraped with the token")
        found = prometheus.wait_for(LEADERS, one_leader, what="one leader")
        assert found[0]["metric"]["node"] == leader.id
