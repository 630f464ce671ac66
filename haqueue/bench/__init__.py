"""`haqueue bench`: load and memory benchmarks for any beanstalkd-protocol server.

Modules, one concept each:
- replies  sans-I/O parsers for the replies the load generator checks
- load     the asyncio load generator (one process's share of a run)
- runner   one process or several (multiprocessing), figures merged
- report   latency percentiles, result records, table and JSON output
- servers  start/stop beanstalkd and haqueue on free loopback ports
- compare  the same workload against each started server in turn, or a cluster's leader
- cluster  find the leader of a running cluster from its cluster file
- memory   resident bytes per queued job, read by PID
"""
