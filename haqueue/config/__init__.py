"""The cluster file and the settings a node runs with: read, validated, as plain values.

cluster.py owns the file (load, validate, describe) and its [cluster], [[nodes]],
[[directors]], [deploy], [limits], [tls] and [[id_rules]] tables; keepalived.py
and lvs.py its [keepalived] and [lvs] blocks; fields.py the one field reader
they all use; limits.py the client limits; replication.py, fsync_policy.py the
Raft settings a replica takes whole. Nothing else parses the cluster file.

The bottom of the house with core/ and protocol/: server/, ops/, replication/
and cli/ import this package, and it imports none of them (tests/
test_import_layers.py). The package's __init__ imports nothing, so that
`haqueue node is-leader` (keepalived runs it every second) stays cheap.
"""
