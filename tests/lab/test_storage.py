"""The lab's storage faults on real system calls and a real filesystem.

- the sync-fault shim (scripts/slow_fsync.c, preloaded into a real Python
  process): EN fails fsync and fdatasync with errno N, a delay stalls them
  until the control file says otherwise, SLOW_FSYNC_US still works for
  scripts/bench-fsync-sweep, and children forked from a busy multi-threaded
  process can sync;
- a size-limited tmpfs really fills (ENOSPC) and frees again;
- `lab down` unmounts the data disks a crashed `lab up` left, from the state
  file alone.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from haqueue.lab import storage
from haqueue.lab.lab import Lab, wait_for
from haqueue.lab.topology import LabState
from tests.lab.labtools import lab_dir


@pytest.fixture(scope="module")
def shim(tmp_path_factory) -> Path:
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("needs cc (scripts/setup installs gcc)")
    return storage.build_shim(tmp_path_factory.mktemp("shim"))


def preloaded(shim: Path, control: Path | None, script: str, **env) -> subprocess.Popen:
    environ = {**os.environ, "LD_PRELOAD": str(shim), **env}
    if control is not None:
        environ["SLOW_FSYNC_FILE"] = str(control)
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(script)], env=environ,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


SYNC_BOTH = """
    import os
    fd = os.open("{path}", os.O_WRONLY | os.O_CREAT)
    os.write(fd, b"x")
    for call in (os.fsync, os.fdatasync):
        try:
            call(fd)
            print(call.__name__, "ok")
        except OSError as exc:
            print(call.__name__, exc.errno)
"""


def test_control_file_fails_every_sync_with_the_errno_it_names_and_zero_clears_it(shim, tmp_path):
    control = tmp_path / "control"
    script = SYNC_BOTH.format(path=tmp_path / "data")
    control.write_text("E5\n")
    out, err = preloaded(shim, control, script).communicate(timeout=30)
    assert out.split("\n")[:2] == [f"fsync {errno.EIO}", f"fdatasync {errno.EIO}"], err
    control.write_text("E28\n")
    out, err = preloaded(shim, control, script).communicate(timeout=30)
    assert out.split("\n")[:2] == [f"fsync {errno.ENOSPC}", f"fdatasync {errno.ENOSPC}"], err
    control.write_text("0\n")
    out, err = preloaded(shim, control, script).communicate(timeout=30)
    assert out.split("\n")[:2] == ["fsync ok", "fdatasync ok"], err
    control.unlink()  # no file: no fault
    out, err = preloaded(shim, control, script).communicate(timeout=30)
    assert out.split("\n")[:2] == ["fsync ok", "fdatasync ok"], err


def test_a_stall_lasts_until_the_control_file_ends_it(shim, tmp_path):
    control = tmp_path / "control"
    control.write_text("3600000000\n")  # an hour: stalled until told otherwise
    proc = preloaded(shim, control, f"""
        import os, time
        fd = os.open("{tmp_path / 'data'}", os.O_WRONLY | os.O_CREAT)
        open("{tmp_path / 'started'}", "w").close()
        began = time.monotonic()
        os.fdatasync(fd)
        print(round(time.monotonic() - began, 3))
    """)
    assert wait_for(lambda: (tmp_path / "started").exists(), 30)
    hold = 0.5
    time.sleep(hold)  # the stall is what is tested: it must last while the file asks
    assert proc.poll() is None  # still stalled
    control.write_text("0\n")
    out, err = proc.communicate(timeout=10)
    assert proc.returncode == 0, err
    assert float(out) >= hold


def test_fixed_delay_for_the_fsync_sweep_still_applies(shim, tmp_path):
    proc = preloaded(shim, None, f"""
        import os, time
        fd = os.open("{tmp_path / 'data'}", os.O_WRONLY | os.O_CREAT)
        began = time.monotonic()
        os.fsync(fd)
        print(time.monotonic() - began)
    """, SLOW_FSYNC_US="200000")
    out, err = proc.communicate(timeout=30)
    assert float(out) >= 0.2, err


def test_a_child_forked_from_a_busy_multithreaded_process_can_sync(shim, tmp_path):
    """The node forks its snapshot writer while other threads sync and allocate: the shim must
    take no lock a thread could hold at fork (libfiu's preload does, and a node's writer hung in it)."""
    control = tmp_path / "control"
    control.write_text("0\n")
    proc = preloaded(shim, control, f"""
        import os, threading
        path = "{tmp_path / 'data'}"
        stop = threading.Event()
        def busy():
            fd = os.open(path, os.O_WRONLY | os.O_CREAT)
            while not stop.is_set():
                os.write(fd, b"x" * 100)
                os.fdatasync(fd)
                bytearray(10000)
                os.stat(path)
                r, w = os.pipe()
                os.write(w, b"y")
                os.read(r, 1)
                os.close(r)
                os.close(w)
        threads = [threading.Thread(target=busy) for _ in range(4)]
        for t in threads:
            t.start()
        for _ in range(200):
            pid = os.fork()
            if pid == 0:
                fd = os.open(path + ".child", os.O_WRONLY | os.O_CREAT)
                os.write(fd, b"snapshot" * 1000)
                os.fsync(fd)
                os._exit(0)
            assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
        stop.set()
        for t in threads:
            t.join()
        print("forks ok")
    """)
    try:
        out, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        pytest.fail("a forked child hung in its sync")
    assert out.strip() == "forks ok", err


def require_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root: mounts a tmpfs")


@pytest.mark.root
def test_a_small_tmpfs_really_fills_and_frees(tmp_path):
    require_root()
    disk = tmp_path / "disk"
    storage.mount_tmpfs(disk, 4)
    try:
        assert storage.is_mounted(disk)
        filler = storage.fill(disk)
        assert 3 << 20 < filler <= 4 << 20
        assert storage.free_bytes(disk) == 0
        with pytest.raises(OSError) as caught:
            with open(disk / "journal", "wb") as f:
                f.write(b"x" * 8192)
        assert caught.value.errno == errno.ENOSPC
        storage.unfill(disk)
        (disk / "journal").write_bytes(b"x" * 8192)
    finally:
        assert storage.unmount(disk)
    assert not storage.is_mounted(disk)


@pytest.mark.root
def test_down_unmounts_the_data_disks_a_crashed_up_left():
    require_root()
    directory, prefix = lab_dir()
    directory.mkdir()
    paths = [directory / "data" / n for n in ("n1", "n2")]
    try:
        state = LabState(dir=str(directory), prefix=prefix)
        for path in paths:  # as up() does, then "crash"
            state.mounts.append(str(path))
            state.save()
            storage.mount_tmpfs(path, 4)
        gone = Lab(directory).down()  # a new process reads only the state file
        assert sorted(gone["mounts"]) == sorted(str(p) for p in paths)
        assert not any(storage.is_mounted(p) for p in paths)
        assert not (directory / "state.json").exists()
    finally:
        for path in paths:
            storage.unmount(path)
        shutil.rmtree(directory, ignore_errors=True)
