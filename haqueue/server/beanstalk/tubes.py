"""Which tubes exist, as a client sees them, and when the replicated record may go.

In beanstalkd a tube lives while anything refers to it: a job in it, a
connection using or watching it, or (for "default") the server itself. Jobs
are replicated state; uses and watches are not (they belong to connections,
which belong to the leader). So existence is decided here, on the leader:
a tube exists while its session references are above zero or the replicated
state holds a record for it. When both drop away the leader logs
FORGET_TUBE so that every node drops the record and its counters, as
beanstalkd frees the tube.
"""

from __future__ import annotations

from haqueue.server.beanstalk.ordered_set import SwapRemoveList

DEFAULT_TUBE = "default"


class TubeDirectory:
    def __init__(self, replicated_names=()) -> None:
        self.refs: dict[str, int] = {DEFAULT_TUBE: 1}  # the server's own reference
        self.order = SwapRemoveList([DEFAULT_TUBE])
        for name in replicated_names:
            self.order.append(name)
        self.using: dict[str, int] = {}
        self.watching: dict[str, int] = {}

    def exists(self, name: str, state) -> bool:
        return name in self.order or name in state.tubes

    def names(self) -> list[str]:
        return list(self.order)

    def ref(self, name: str) -> None:
        refs = self.refs
        count = refs.get(name, 0)
        refs[name] = count + 1
        if not count:  # a referenced name is listed already (it leaves `order` unreferenced only)
            self.order.append(name)

    def unref(self, name: str, state) -> bool:
        """Drop one reference; True if the replicated record should be forgotten."""
        count = self.refs.get(name, 0) - 1
        if count > 0:
            self.refs[name] = count
            return False
        self.refs.pop(name, None)
        return self.maybe_free(name, state)

    def maybe_free(self, name: str, state) -> bool:
        """Free the tube if nothing refers to it; True if the log should forget it."""
        if self.refs.get(name):
            return False
        tube = state.tubes.get(name)
        if tube is not None and tube.job_count:
            return False
        self.order.remove(name)
        return tube is not None

    def count_use(self, name: str, delta: int) -> None:
        self.using[name] = self.using.get(name, 0) + delta

    def count_watch(self, name: str, delta: int) -> None:
        self.watching[name] = self.watching.get(name, 0) + delta
