"""The error a user can fix, and reading the cluster file into it.

Every command raises HaqueueError for what a user can cause (a bad option, a bad
cluster file, a port in use); haqueue/cli/main.py turns it into one line on
stderr and exit status 1. Its own module, so the command modules that raise it
do not import the root command that loads them.
"""

from __future__ import annotations

import click


class HaqueueError(click.ClickException):
    """A problem the user can fix; shown as one line, exit status 1."""


def load_cluster_file(path: str, node_id: str | None = None):
    """The validated cluster file (and NODE in it), or one line naming the problem.

    Returns the Cluster, or (Cluster, Node) when node_id is given.
    """
    from haqueue.config.cluster import ClusterFileError, load_cluster

    try:
        cluster = load_cluster(path)
        return cluster if node_id is None else (cluster, cluster.node(node_id))
    except ClusterFileError as exc:
        raise HaqueueError(str(exc)) from None
