"""GET /metrics on a real node: parsed by prometheus-client's own parser, values checked
against what the test did through the beanstalk protocol (haqueue/server/metrics.py)."""

from __future__ import annotations

import contextlib
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

from haqueue import admin_client
from haqueue.server.metrics import TUBE_FAMILIES, TubeSeries
from tests.support.servers import RawConn, free_port, start_haqueue


def scrape(admin_port: int) -> dict[tuple[str, tuple], float]:
    """{(sample name, sorted labels): value} of one scrape, through the official parser."""
    code, body = admin_client.get("127.0.0.1", admin_port, "/metrics", 5)
    assert code == 200, body
    samples = {}
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            key = (sample.name, tuple(sorted(sample.labels.items())))
            assert key not in samples, f"duplicate series {key}"
            samples[key] = sample.value
    return samples


@contextlib.contextmanager
def node_with_admin(*args):
    admin = free_port()
    srv = start_haqueue("--admin", f"127.0.0.1:{admin}", *args)
    try:
        yield srv, admin
    finally:
        srv.stop()


def tube(name: str) -> tuple:
    return (("tube", name),)


def test_metrics_count_what_clients_did(tmp_path):
    with node_with_admin("-b", str(tmp_path / "data"), "-f0") as (srv, admin):
        with RawConn(srv.host, srv.port) as conn:
            conn.send(b"use emails\r\n" + b"put 0 0 60 1\r\nx\r\n" * 3 + b"put 2000 30 60 1\r\ny\r\n")
            replies = conn.recv_replies(5)
            assert all(r.startswith(b"INSERTED") for r in replies[1:]), replies
            conn.send(b"watch emails\r\nreserve-with-timeout 0\r\n")
            _, reserved = conn.recv_replies(2)
            job = int(reserved.split()[1])
            conn.send(b"bury %d 0\r\npause-tube emails 100\r\n" % job)
            assert conn.recv_replies(2) == [b"BURIED\r\n", b"PAUSED\r\n"]
            m = scrape(admin)

    assert m[("beanstalkd_tube_current_jobs_ready", tube("emails"))] == 2
    assert m[("beanstalkd_tube_current_jobs_urgent", tube("emails"))] == 2
    assert m[("beanstalkd_tube_current_jobs_delayed", tube("emails"))] == 1
    assert m[("beanstalkd_tube_current_jobs_buried", tube("emails"))] == 1
    assert m[("beanstalkd_tube_current_jobs_reserved", tube("emails"))] == 0
    assert m[("beanstalkd_tube_jobs_total", tube("emails"))] == 4
    assert m[("beanstalkd_tube_cmd_pause_tube_total", tube("emails"))] == 1
    assert 0 < m[("beanstalkd_tube_pause_time_left", tube("emails"))] <= 100
    assert m[("beanstalkd_tube_current_using", tube("emails"))] == 1
    assert m[("beanstalkd_tube_current_watching", tube("emails"))] == 1
    assert m[("beanstalkd_tube_current_jobs_ready", tube("default"))] == 0
    assert m[("beanstalkd_current_jobs_ready", ())] == 2
    assert m[("beanstalkd_cmd_put_total", ())] == 4
    assert m[("beanstalkd_cmd_bury_total", ())] == 1
    assert m[("beanstalkd_cmd_reserve_with_timeout_total", ())] == 1
    assert m[("beanstalkd_jobs_total", ())] == 4
    assert m[("beanstalkd_current_connections", ())] == 1
    assert m[("beanstalkd_current_tubes", ())] == 2
    # The cluster's own: a lone node leads, serves, and has fsynced (-f0) every entry.
    assert m[("haqueue_raft_role", (("role", "leader"),))] == 1
    assert m[("haqueue_raft_role", (("role", "follower"),))] == 0
    assert m[("haqueue_serving", ())] == 1
    assert m[("haqueue_raft_term", ())] >= 1
    assert m[("haqueue_raft_applied_index", ())] == m[("haqueue_raft_commit_index", ())] > 0
    assert m[("haqueue_journal_fsync_seconds_count", ())] > 0
    assert m[("haqueue_journal_fsync_seconds_bucket", (("le", "+Inf"),))] == \
        m[("haqueue_journal_fsync_seconds_count", ())]
    assert m[("haqueue_group_commit_commands_count", ())] >= 4
    assert m[("haqueue_journal_bytes", ())] > 0
    assert m[("haqueue_raft_elections_won_total", ())] >= 1
    assert m[("haqueue_internal_errors_total", ())] == 0
    assert m[("process_cpu_seconds_total", ())] > 0


def test_a_tube_that_is_gone_is_no_longer_listed():
    with node_with_admin() as (srv, admin):
        with RawConn(srv.host, srv.port) as conn:
            conn.send(b"use brief\r\nput 0 0 60 1\r\nx\r\n")
            assert conn.recv_replies(2)[1].startswith(b"INSERTED")
            assert ("beanstalkd_tube_jobs_total", tube("brief")) in scrape(admin)
            conn.send(b"watch brief\r\nreserve-with-timeout 0\r\n")
            job = int(conn.recv_replies(2)[1].split()[1])
            conn.send(b"delete %d\r\nuse default\r\nignore brief\r\n" % job)
            conn.recv_replies(3)
            # The leader forgets the emptied tube through the log, just after the replies.
            deadline = time.monotonic() + 10
            while ("beanstalkd_tube_jobs_total", tube("brief")) in scrape(admin):
                assert time.monotonic() < deadline, "tube still listed 10 s after it emptied"
                time.sleep(0.02)  # polling for the FORGET_TUBE entry, bounded by the deadline


def test_tube_series_escape_label_values_and_follow_the_tubes():
    series = TubeSeries()
    text = b"".join(series.render(['odd"name\\x'], [(1,)] * len(TUBE_FAMILIES))).decode()
    parsed = {(s.name, s.labels["tube"]): s.value
              for f in text_string_to_metric_families(text) for s in f.samples}
    assert parsed[("beanstalkd_tube_current_jobs_ready", 'odd"name\\x')] == 1
    for i in range(200):
        series.render([f"t{i}"], [(0,)] * len(TUBE_FAMILIES))
    assert series._names == ["t199"]


@pytest.mark.parametrize("path", ["/metrics", "/metrics?x=1"])
def test_metrics_is_served_with_the_text_format_content_type(path):
    import http.client

    with node_with_admin() as (srv, admin):
        conn = http.client.HTTPConnection("127.0.0.1", admin, timeout=5)
        conn.request("GET", path)
        response = conn.getresponse()
        assert response.status == 200
        assert response.getheader("Content-Type").startswith("text/plain; version=0.0.4")
        assert b"# TYPE beanstalkd_cmd_put_total counter" in response.read()


def test_cluster_view_of_a_lone_node_and_the_page_it_serves():
    import json

    with node_with_admin() as (srv, admin):
        with RawConn(srv.host, srv.port) as conn:
            conn.send(b"use jobs\r\nput 0 0 60 1\r\nx\r\n")
            assert conn.recv_replies(2)[1].startswith(b"INSERTED")
            code, body = admin_client.get("127.0.0.1", admin, "/cluster", 5)
            assert code == 200
            view = json.loads(body)
            code, page = admin_client.get("127.0.0.1", admin, "/", 5)
    assert view["leader"] == view["node"] and view["serving"] == [view["node"]]
    assert [n["role"] for n in view["nodes"]] == ["leader"]
    tubes = {t["name"]: t for t in view["tubes"]}
    assert tubes["jobs"]["ready"] == 1 and tubes["jobs"]["total_jobs"] == 1
    assert code == 200 and page.startswith(b"<!doctype html>")
    assert b"http://" not in page and b"https://" not in page  # no external assets


@pytest.mark.parametrize("address, held", [("127.0.0.1", True), ("198.18.255.254", False)])
def test_vip_watch_reads_the_hosts_addresses_in_the_background(address, held):
    from haqueue.server.metrics import VipWatch

    watch = VipWatch(address)
    # The first call starts the check in a thread and answers at once: with
    # nothing yet (None), or with the answer if the thread was that quick.
    assert watch.current() in (None, held)
    deadline = time.monotonic() + 10
    while watch.current() is None:
        assert time.monotonic() < deadline, "no answer from the VIP check"
        time.sleep(0.02)  # polling for the thread's answer, bounded by the deadline
    assert watch.current() is held
