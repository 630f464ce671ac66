"""The memory benchmark against a real beanstalkd."""

from __future__ import annotations

from haqueue.bench.load import LoadSpec
from haqueue.bench.memory import measure_memory


def test_memory_on_beanstalkd_reports_positive_bytes_per_job():
    [result] = measure_memory(LoadSpec("127.0.0.1", 1, tube="mem"), ["beanstalkd"], False, 20000)
    assert result.server == "beanstalkd"
    assert result.jobs == 20000
    # A 100-byte body plus beanstalkd's job record: more than the body, far less than 10 kB.
    assert 100 < result.bytes_per_job < 10_000


def test_bigger_bodies_cost_more_bytes_per_job():
    spec = LoadSpec("127.0.0.1", 1, tube="mem", body_size=2000)
    [big] = measure_memory(spec, ["beanstalkd"], False, 5000)
    assert big.bytes_per_job > 2000
