"""The chaos lab: a three-node haqueue cluster behind a keepalived VIP, in network namespaces.

topology.py  namespaces, bridge and veth links (pyroute2), and the state file
lab.py       haqueue and keepalived in each node namespace; status; waits
workload.py  producers and consumers through the VIP, writing a JSONL history
checker.py   the history checked, Jepsen total-queue style, and failover times
chaos.py     fault scenarios run against a workload, then drain and check
"""
