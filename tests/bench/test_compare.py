"""Running one workload against servers bench starts itself."""

from __future__ import annotations

from haqueue.bench.compare import bench_servers
from haqueue.bench.load import LoadSpec


def test_each_server_runs_the_same_workload_on_a_fresh_server_per_round():
    spec = LoadSpec("127.0.0.1", 1, jobs=500, duration=None, warmup=0.0, connections=2)
    first, second = bench_servers(spec, ["beanstalkd", "beanstalkd"], durable=False, repeat=2)
    for result in (first, second):
        assert result.server == "beanstalkd"
        assert result.measured_puts == 1000
        assert len(result.runs) == 2
        assert result.totals["put"] == 1000
        # Each round started its own server on its own port.
        assert result.address == "(fresh each run)"
