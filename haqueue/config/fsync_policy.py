"""When the journal reaches the disk: beanstalkd's -f/-F flags, for the Raft log.

- DURABLE (`-f0`): every entry is fsynced before it can be acknowledged: on a
  follower before it tells the leader it has the entry, on the leader before
  a committed entry is applied and its replies are sent.
- PERIODIC (`-f MS`): fsync at most every MS milliseconds; a crash can lose the
  last MS ms of acknowledged changes on that node (as with beanstalkd).
- NEVER (`-F`): leave it to the kernel.
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_FSYNC_MS = 50  # beanstalkd's default -f


@dataclass(frozen=True)
class FsyncPolicy:
    interval_ms: int | None  # 0 = before every acknowledgement; None = never

    @property
    def durable(self) -> bool:
        return self.interval_ms == 0

    @property
    def never(self) -> bool:
        return self.interval_ms is None

    def describe(self) -> str:
        if self.never:
            return "never (-F)"
        if self.durable:
            return "before every acknowledgement (-f0)"
        return f"at most every {self.interval_ms} ms (-f{self.interval_ms})"


DURABLE = FsyncPolicy(0)
NEVER = FsyncPolicy(None)
