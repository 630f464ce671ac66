"""The lab's disks: a small filesystem per node, and the storage faults injected into them.

What real disks do to a node, made to happen on demand:
- full: each node's data directory is its own small filesystem (mounted by
  `lab up`, recorded in the lab state before it exists, unmounted by `lab
  down`): an ext4 image on a loop device (the default, as in issue 23: a real
  journalling filesystem, whose fsync goes through jbd2 and the block layer)
  or a size-limited tmpfs (`--disk tmpfs`: fsync costs nothing). The image is
  mounted with `-o loop`, which detaches the loop device by itself on
  unmount, so unmounting is the whole teardown. `fill` writes a filler file
  until the filesystem says ENOSPC, so the node's next journal write fails
  exactly as on a full disk; `unfill` removes it.
- EIO and stalls: every node preloads scripts/slow_fsync.c (built with cc at
  `lab up` into the lab directory), which reads a per-node control file at
  each fsync/fdatasync: `fail_syncs` makes every sync fail with EIO,
  `set_fsync_stall` makes every sync wait (re-reading the file while it waits,
  so setting 0 ends a stall at once).

Why not libfiu (`fiu-run -x`, Debian's fiu-utils), which the issue suggested:
its POSIX preload wraps malloc and takes an rwlock in every wrapped call; the
node forks its snapshot writer from a multi-threaded parent, and in the lab
the child hung in that lock within a minute (gdb: PyOS_AfterFork_Child ->
malloc -> fiu_fail -> pthread_rwlock_rdlock), so every node under it sooner or
later stopped snapshotting. The shim does only open/read/close/nanosleep.

The node's command line is built here (`node_argv`), so every start — the
first and each restart after a fault — runs under the same shim; a start
clears the node's control file (a restarted node runs without the fault).
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import time
from pathlib import Path

SHIM_SOURCE = Path(__file__).resolve().parents[2] / "scripts" / "slow_fsync.c"
FILLER = "lab-filler"


class StorageError(RuntimeError):
    """A storage fault could not be set up or injected; the message is one line."""


def check_tools() -> None:
    missing = [tool for tool in ("cc", "mount", "umount", "mkfs.ext4") if shutil.which(tool) is None]
    if missing:
        raise StorageError(f"the lab's storage faults need {', '.join(missing)} (scripts/setup installs them)")


# ---------------------------------------------------------------- tmpfs
def mount_tmpfs(path: Path, size_mib: int) -> None:
    path.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mib}m,mode=0755", "hqlab-data", str(path)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise StorageError(f"mount tmpfs on {path}: {proc.stderr.strip()}")


def mount_ext4(path: Path, image: Path, size_mib: int) -> None:
    """A fresh ext4 filesystem of size_mib in `image`, mounted on `path` through a loop device."""
    path.mkdir(parents=True, exist_ok=True)
    image.parent.mkdir(parents=True, exist_ok=True)
    with open(image, "wb") as f:
        f.truncate(size_mib << 20)
    # No reserved blocks (root's 5 % would let the node, running as root, write past the filler),
    # and no lazy init threads writing behind the node's back.
    made = subprocess.run(["mkfs.ext4", "-q", "-F", "-m", "0", "-E", "lazy_itable_init=0,lazy_journal_init=0",
                           str(image)], capture_output=True, text=True)
    if made.returncode != 0:
        raise StorageError(f"mkfs.ext4 {image}: {made.stderr.strip()}")
    proc = subprocess.run(["mount", "-t", "ext4", "-o", "loop", str(image), str(path)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise StorageError(f"mount {image} on {path}: {proc.stderr.strip()}")
    path.chmod(0o755)


def make_shared_mount(path: Path) -> None:
    """Bind-mount `path` onto itself with shared propagation, for the node disks mounted under it.

    `ip netns exec` gives each process it starts a mount namespace of its own, a
    copy of the host's taken at that moment, slaved to it. Where the host's
    mounts are private (a container without systemd), a copy never learns of an
    unmount: a disk of this lab stayed mounted, its loop device attached, inside
    every process any lab on the host had started while it was up, until those
    exited. Under a shared mount the copies are slaves of the original, and an
    unmount here reaches them all."""
    path.mkdir(parents=True, exist_ok=True)
    for argv in (["mount", "--bind", str(path), str(path)], ["mount", "--make-shared", str(path)]):
        proc = subprocess.run(argv, capture_output=True, text=True)
        if proc.returncode != 0:
            raise StorageError(f"{' '.join(argv)}: {proc.stderr.strip()}")


def is_mounted(path: str | Path) -> bool:
    target = os.path.realpath(path)
    with open("/proc/self/mounts") as f:
        return any(line.split()[1] == target for line in f)


def unmount(path: str | Path, timeout: float = 10.0) -> bool:
    """Unmount if mounted; a snapshot writer still finishing may hold it a moment, so retry,
    and detach lazily as the last resort (the tmpfs goes when its last user does)."""
    if not is_mounted(path):
        return False
    deadline = time.monotonic() + timeout
    while True:
        if subprocess.run(["umount", str(path)], capture_output=True).returncode == 0:
            return True
        if time.monotonic() >= deadline:
            subprocess.run(["umount", "-l", str(path)], capture_output=True)
            return True
        time.sleep(0.1)


def fill(data_dir: Path) -> int:
    """Write a filler file until the filesystem is full (ENOSPC); return its size in bytes."""
    path = data_dir / FILLER
    written = 0
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        for chunk in (1 << 20, 1 << 12, 1):  # big, then page, then byte: no slack left
            block = b"\0" * chunk
            while True:
                try:
                    n = os.write(fd, block)
                except OSError as exc:
                    if exc.errno == errno.ENOSPC:
                        break
                    raise
                written += n
                if n < chunk:
                    break
    finally:
        os.close(fd)
    return written


def unfill(data_dir: Path) -> None:
    (data_dir / FILLER).unlink(missing_ok=True)


def free_bytes(data_dir: Path) -> int:
    st = os.statvfs(data_dir)
    return st.f_bavail * st.f_frsize


# ------------------------------------------------------------ the shim
def build_shim(lab_dir: Path) -> Path:
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise StorageError("needs cc to build scripts/slow_fsync.c")
    shim = lab_dir / "slow_fsync.so"
    proc = subprocess.run([compiler, "-shared", "-fPIC", "-O2", "-o", str(shim), str(SHIM_SOURCE), "-ldl"],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise StorageError(f"building {SHIM_SOURCE.name}: {proc.stderr.strip().splitlines()[-1:]}")
    return shim


def control_file(lab_dir: Path, node_id: str) -> Path:
    return lab_dir / "sync-control" / node_id


def _control(lab_dir: Path, node_id: str, text: str) -> None:
    path = control_file(lab_dir, node_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text + "\n")
    os.replace(tmp, path)  # the shim never reads half a value


def set_fsync_stall(lab_dir: Path, node_id: str, microseconds: int) -> None:
    """Every sync of the node waits this long after the real call (0: none); takes effect at once,
    also for a sync already waiting."""
    _control(lab_dir, node_id, str(int(microseconds)))


def fail_syncs(lab_dir: Path, node_id: str, errno_value: int = errno.EIO) -> None:
    """From now on every fsync/fdatasync of the node (and of its snapshot writer) fails with errno_value."""
    _control(lab_dir, node_id, f"E{int(errno_value)}")


def clear(lab_dir: Path, node_id: str) -> None:
    _control(lab_dir, node_id, "0")


def node_argv(lab_dir: Path, node_id: str, shim: Path, serve_argv: list[str]) -> list[str]:
    """`serve_argv` with the shim preloaded and the node's control file cleared.

    `env` execs the node: one process from `ip netns exec` on, so the PID the
    lab records is the node's.
    """
    clear(lab_dir, node_id)
    return ["env", f"LD_PRELOAD={shim}", f"SLOW_FSYNC_FILE={control_file(lab_dir, node_id)}", *serve_argv]
