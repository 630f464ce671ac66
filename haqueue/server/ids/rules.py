"""The id rules a leader commits: the cluster file's [[id_rules]] with the built-in ones.

A new leader commits its rules before it serves, when they differ from the
replicated ones, so the first ids use them (`commit`); SIGHUP re-reads the
cluster file's rules on every node, and the leader commits them at once
(`reread`, then `commit`). A change that could repeat ids is not proposed (one
error line; the replicated rules stay), and a file that does not validate
changes nothing.
"""

from __future__ import annotations

import logging

from haqueue.core import commands as C
from haqueue.core.ids import rule_from_record, wanted_rule_records
from haqueue.core.results import Tag

log = logging.getLogger(__name__)


async def commit(server, rules: tuple, term: int) -> bool:
    """Commit `rules` (with the built-in ones) if the replicated rules differ; false if
    leadership was lost meanwhile. `server`: the leader (state, batcher, replica)."""
    wanted = wanted_rule_records(rules)
    ids = server.state.ids
    if ids.rule_records() == wanted:
        return True
    problem = ids.rule_change_problem([rule_from_record(r) for r in wanted])
    if problem is not None:
        log.error("id rules of the cluster file not proposed: %s", problem)
        return True
    result = await server.batcher.committed((C.ID_SET_RULES, wanted))
    if result is None or not server.replica.leads_in(term):
        log.warning("lost leadership while committing id rules (term %d)", term)
        return False
    if result[0] == Tag.OK:
        log.info("id rules committed: %s", ", ".join(r[0] for r in wanted))
    else:
        log.error("id rules refused: %s", result[1:])
    return True


def reread(path: str | None) -> tuple | None:
    """SIGHUP: the cluster file's [[id_rules]] read again, or None (logged) if there is
    no file or it does not validate: the node keeps the rules it had."""
    from haqueue.config.cluster import ClusterFileError, load_cluster

    if path is None:
        log.info("SIGHUP: no cluster file to re-read")
        return None
    try:
        rules = load_cluster(path).id_rules
    except ClusterFileError as exc:
        log.error("SIGHUP: id rules not reloaded: %s", exc)
        return None
    log.info("SIGHUP: id rules re-read from %s (%d in the file)", path, len(rules))
    return rules
