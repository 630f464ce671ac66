"""The chaos lab: a three- (or five-) node haqueue cluster behind a keepalived VIP, in network namespaces.

topology.py  namespaces, bridge and veth links (pyroute2), and the state file
lab.py       haqueue and keepalived in each node namespace; status; waits
workload.py  producers and consumers through the VIP, writing a JSONL history
checker.py   the history checked, Jepsen total-queue style, and failover times
scenarios.py the fault scenarios and their registry
members.py   the lab's membership changed online (add-node/remove-node, keepalived reloaded)
member_scenarios.py  replace-node, grow-3-to-5, shrink-5-to-3 (issue 27)
runner.py    a chaos run: faults under a workload, then drain and check
report.py    the chaos run's summary table
"""
