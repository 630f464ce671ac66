"""When a follower's links need a keepalive (docs/pysyncobj.md D8, D35): pure, time as an argument.

A keepalive is a message pysyncobj ignores. A link needs one only when nothing
else went out on it lately, and how lately depends on what it is for:

- While no leader is heard (it died, or this node is cut off, or an election
  is under way), every link gets one each `busy` period (a heartbeat): a
  node campaigns only if it heard a majority within the hear window (D9),
  and a candidate's first vote request must find its links read within the
  connection timeout (D8).
- While the leader is heard, its own link needs one only when this node's
  acknowledgements wait (a slow disk, D26): each `to_leader` period, a few
  per leader fallback.
- And the links to the other followers need one only so that each follower
  hears the others within the hear window (a follower cut off from the leader
  alone must still hear a majority, D9) and their connection timeout does not
  drop them: each `quiet` period, a little under the hear window, in practice
  with every second heartbeat. They used to get one every heartbeat, each
  waking the other follower (a third of an idle follower's wake-ups,
  docs/benchmarks.md).

A leader not heard for `leader_quiet_after` (two heartbeats) is not
heard: the links get the `busy` period again from then, long before anyone's
election timeout (at least election_min) runs out.
"""

from __future__ import annotations

from dataclasses import dataclass

NEVER = float("-inf")


@dataclass(frozen=True)
class KeepalivePeriods:
    busy: float  # every link, while no leader is heard
    to_leader: float  # the leader's link, while it is heard
    quiet: float  # the other links, while the leader is heard
    leader_quiet_after: float  # a leader silent this long is no longer heard

    @classmethod
    def for_timing(cls, heartbeat: float, connection_timeout: float, hear_window: float) -> "KeepalivePeriods":
        # quiet: within the hear window by half a heartbeat, so that a follower cut off
        # from the leader alone still hears a majority all along (D9: it asks for
        # pre-votes, refused while the others hear the leader, granted as soon as they
        # stop); sent with every second heartbeat (raft_node rides them on its ticks).
        return cls(busy=heartbeat, to_leader=2 * heartbeat,
                   quiet=max(heartbeat, min(connection_timeout / 3, hear_window - heartbeat / 2)),
                   leader_quiet_after=2 * heartbeat)


@dataclass(frozen=True)
class NextKeepalive:
    """When a node's next keepalive falls due, if it sends nothing else meanwhile: at
    `latest` whatever the leader does, or at `if_quiet` if no leader is heard by then.
    The leader's heartbeats move when it falls quiet, not this: a follower keeps one
    and reads it against the newest heartbeat (`at`) instead of working it out again."""

    latest: float
    if_quiet: float

    def at(self, periods: KeepalivePeriods, leader_heard_at: float) -> float:
        return min(self.latest, max(self.if_quiet, leader_heard_at + periods.leader_quiet_after))


def link_due(periods: KeepalivePeriods, last_sent: float, to_leader: bool) -> NextKeepalive:
    """A link's next keepalive, however the leader fares, if nothing else goes out on
    it after `last_sent`: the longer period holds while the leader is heard, the busy
    one once it falls quiet. `to_leader`: the link is to the leader."""
    return NextKeepalive(last_sent + (periods.to_leader if to_leader else periods.quiet),
                         last_sent + periods.busy)


def earliest(a: NextKeepalive, b: NextKeepalive) -> NextKeepalive:
    """The next keepalive of two links (or of a node): min distributes over `at`."""
    return NextKeepalive(min(a.latest, b.latest), min(a.if_quiet, b.if_quiet))
