"""A power loss, in process: only what was fsynced survives.

`PowerLoss(directory)` watches every fsync and fdatasync the process makes
(os.fsync and os.fdatasync, replaced while it is active) and keeps, as the
disk would, two things:
- a file's bytes as they were at its last fsync (by inode): what a file
  system promises to keep of a file's data;
- which inode each name in `directory` refers to as of that directory's last
  fsync: a created or renamed name is durable only then.
`crash()` is the instant the power goes: nothing later is recorded (the nodes
may then be stopped cleanly; whatever they sync afterwards is too late).
`restore()` rewrites `directory` as a machine would find it after the reboot:
every durable name with its inode's synced bytes (none, if its data was never
synced), and nothing else. This is the worst case the kernel allows (unsynced
bytes may all be lost, and a rename not followed by a directory fsync
undone), which is what a durability claim has to survive.

The model is coarse where the tests do not need more: fsync and fdatasync
count alike, and a forked child's syncs are not seen (the tests that use it
take no snapshots).
"""

from __future__ import annotations

import os
import stat


class PowerLoss:
    def __init__(self, directory: str) -> None:
        self.directory = os.path.abspath(directory)
        self.synced: dict[int, bytes] = {}  # inode -> bytes at its last fsync
        self.linked: dict[str, int] = {}  # path -> inode, as of the directory's last fsync
        self.crashed = False
        self._saved = None

    # ------------------------------------------------------------ watching
    def __enter__(self) -> "PowerLoss":
        self._saved = os.fsync, os.fdatasync
        real_fsync, real_fdatasync = self._saved

        def fsync(fd):
            real_fsync(fd)
            self._synced(fd)

        def fdatasync(fd):
            real_fdatasync(fd)
            self._synced(fd)

        os.fsync, os.fdatasync = fsync, fdatasync
        return self

    def __exit__(self, *exc) -> None:
        os.fsync, os.fdatasync = self._saved

    def _synced(self, fd: int) -> None:
        if self.crashed:
            return
        info = os.fstat(fd)
        path = os.readlink(f"/proc/self/fd/{fd}")
        if stat.S_ISDIR(info.st_mode):
            if path == self.directory:
                self.linked = {os.path.join(path, name): os.stat(os.path.join(path, name)).st_ino
                               for name in os.listdir(path) if os.path.isfile(os.path.join(path, name))}
            return
        if os.path.dirname(path) != self.directory:
            return
        with open(f"/proc/self/fd/{fd}", "rb") as f:  # the same inode, readable whatever fd's mode
            self.synced[info.st_ino] = f.read()

    # ------------------------------------------------------------ the loss
    def crash(self) -> None:
        """The power goes now."""
        self.crashed = True

    def restore(self) -> None:
        """The directory as the reboot finds it (call once its writers have stopped)."""
        assert self.crashed
        for name in os.listdir(self.directory):
            path = os.path.join(self.directory, name)
            if os.path.isfile(path):
                os.unlink(path)
        for path, inode in self.linked.items():
            with open(path, "wb") as f:
                f.write(self.synced.get(inode, b""))
