"""Test tools for rendered keepalived configs: the real `keepalived --config-test`, and netns.

`config_test()` runs keepalived's own validator on a rendered file the way it
would run on the target host: inside a network namespace that has the
interfaces and addresses the file names, and a private mount namespace where
the rendered scripts sit at the paths the file references and the script user
exists. Nothing outside those namespaces is touched, and both disappear when
the process ends (the netns is deleted in a finally block).

Rules: any line keepalived prints is a failure (warnings included); the
namespaces need root, and tests skip with the reason when it is missing.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import subprocess
from contextlib import contextmanager
from pathlib import Path

import pytest

KEEPALIVED = shutil.which("keepalived") or "/usr/sbin/keepalived"
SCRIPT_UID = 64999  # only exists inside the test's mount namespace


def require_root_tools() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root: keepalived --config-test runs in a network and mount namespace")
    for tool in ("ip", "unshare", "mount"):
        if shutil.which(tool) is None:
            pytest.skip(f"needs {tool}")
    if not Path(KEEPALIVED).exists():
        pytest.skip("keepalived is not installed")


def keepalived_version() -> tuple[int, ...]:
    out = subprocess.run([KEEPALIVED, "--version"], capture_output=True, text=True).stderr
    m = re.search(r"Keepalived v(\d+)\.(\d+)\.(\d+)", out)
    return tuple(int(x) for x in m.groups()) if m else (0,)


@contextmanager
def netns(interfaces: dict[str, list[str]]):
    """A fresh network namespace with `name -> [address/prefix, ...]` as veth ends, up."""
    name = f"hqkt-{secrets.token_hex(4)}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        subprocess.run(["ip", "-n", name, "link", "set", "lo", "up"], check=True)
        for i, (ifname, addresses) in enumerate(sorted(interfaces.items())):
            subprocess.run(
                ["ip", "-n", name, "link", "add", ifname, "type", "veth", "peer", "name", f"hqpeer{i}"],
                check=True,
            )
            for address in addresses:
                subprocess.run(["ip", "-n", name, "addr", "add", address, "dev", ifname], check=True)
            for dev in (ifname, f"hqpeer{i}"):
                subprocess.run(["ip", "-n", name, "link", "set", dev, "up"], check=True)
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)


def _namespace_files(root: Path, installed: dict[str, str], users: tuple[str, ...]) -> list[tuple[Path, str]]:
    """Write the files to bind-mount over the host's, return (source, target) pairs.

    Whole directories are replaced (a bind mount needs an existing target), so
    each target directory gets a copy holding only the rendered files.
    """
    mounts: list[tuple[Path, str]] = []
    by_dir: dict[str, dict[str, str]] = {}
    for target, text in installed.items():
        by_dir.setdefault(os.path.dirname(target), {})[os.path.basename(target)] = text
    for i, (directory, files) in enumerate(sorted(by_dir.items())):
        if not os.path.isdir(directory):
            pytest.skip(f"{directory} does not exist on this host to stand in for the target's")
        src = root / f"dir{i}"
        src.mkdir()
        src.chmod(0o755)
        for base, text in files.items():
            path = src / base
            path.write_text(text)
            path.chmod(0o755 if text.startswith("#!") else 0o644)
        mounts.append((src, directory))
    passwd = Path("/etc/passwd").read_text()
    group = Path("/etc/group").read_text()
    for n, user in enumerate(users):
        uid = SCRIPT_UID - n
        if not re.search(rf"^{re.escape(user)}:", passwd, re.M):
            passwd += f"{user}:x:{uid}:{uid}::/nonexistent:/usr/sbin/nologin\n"
            group += f"{user}:x:{uid}:\n"
    (root / "passwd").write_text(passwd)
    (root / "group").write_text(group)
    mounts += [(root / "passwd", "/etc/passwd"), (root / "group", "/etc/group")]
    return mounts


def config_test(
    conf: str,
    tmp_path: Path,
    interfaces: dict[str, list[str]],
    installed: dict[str, str] | None = None,
    users: tuple[str, ...] = ("keepalived_script",),
) -> list[str]:
    """Run `keepalived --config-test` on conf; return the lines it printed (empty = clean).

    Fails the test on an exit status that is neither success nor the known
    2.2.7 quirk: with script security and a script user, a clean config test
    ends by SIGTERM (status 143) instead of 0 (acassen/keepalived#2587 and
    #2617, fixed in 2.2.8). That quirk is accepted only with no output at all.
    """
    require_root_tools()
    work = tmp_path / f"kt-{secrets.token_hex(3)}"
    work.mkdir()
    conf_path = work / "keepalived.conf"
    conf_path.write_text(conf)
    mounts = _namespace_files(work, installed or {}, users)
    steps = [f"mount --bind {src} {dst}" for src, dst in mounts]
    shell = " && ".join(steps + [f"exec {KEEPALIVED} --config-test -f {conf_path}"])
    with netns(interfaces) as ns:
        proc = subprocess.run(
            ["ip", "netns", "exec", ns, "unshare", "--mount", "--propagation", "private", "sh", "-c", shell],
            capture_output=True,
            text=True,
            timeout=30,
            # keepalived 2.2.7 signals its process group at the end of a config test.
            start_new_session=True,
        )
    lines = [line for line in (proc.stdout + proc.stderr).splitlines() if line.strip()]
    quirk = proc.returncode in (-15, 143) and not lines and keepalived_version() < (2, 2, 8)
    assert proc.returncode == 0 or quirk or lines, f"keepalived --config-test exited {proc.returncode}"
    return lines
