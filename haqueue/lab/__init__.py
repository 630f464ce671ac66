"""The chaos lab: a three-node haqueue cluster behind a keepalived VIP, in network namespaces.

topology.py  namespaces, bridge and veth links (pyroute2), and the state file
lab.py       haqueue and keepalived in each node namespace; status; waits
workload.py  producers and consumers through the VIP, writing a JSONL history
checker.py   the history checked, Jepsen total-queue style, and failover times
scenarios.py the fault scenarios and their registry
runner.py    a chaos run: faults under a workload, then drain and check
report.py    the chaos run's summary table
"""
