"""A real terminal for tests: a private tmux server, driven with send-keys and read with capture-pane.

`running_tmux(workdir, argv)` starts `argv` in a detached tmux session of a
fixed size on a server whose socket lives in `workdir` (so it never touches
anyone's tmux), and kills that server however the block ends.
`Terminal.screen()` is the visible text; `wait_for(text)` polls it.
Tests call `require_tmux()` first: it skips, naming the package, only when
tmux is truly absent.
"""

from __future__ import annotations

import contextlib
import shlex
import subprocess
import time
from pathlib import Path
from typing import Iterator

from tests.support.tools import require


def require_tmux() -> str:
    return require("tmux")


class Terminal:
    def __init__(self, tmux: str, socket: Path, session: str) -> None:
        self.tmux, self.socket, self.session = tmux, socket, session

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run([self.tmux, "-S", str(self.socket), *args], capture_output=True, text=True,
                              timeout=10, check=check)

    def screen(self) -> str:
        """The visible text, or "(session ended)" once the program has exited."""
        captured = self.run("capture-pane", "-p", "-t", self.session, check=False)
        if captured.returncode != 0:
            # The program may exit between a liveness check and the capture.
            if not self.alive():
                return "(session ended)"
            captured.check_returncode()
        return captured.stdout

    def send_keys(self, *keys: str) -> None:
        self.run("send-keys", "-t", self.session, *keys)

    def alive(self) -> bool:
        return self.run("has-session", "-t", self.session, check=False).returncode == 0

    def wait_for(self, condition, timeout: float = 20.0, what: str = "") -> str:
        deadline = time.monotonic() + timeout
        screen = ""
        while time.monotonic() < deadline:
            screen = self.screen()
            if condition(screen):
                return screen
            time.sleep(0.1)  # polling the screen, bounded by the deadline
        raise AssertionError(f"{what}: not on screen within {timeout:g} s; screen:\n{screen}")


@contextlib.contextmanager
def running_tmux(workdir: Path, argv: list[str], size: tuple[int, int] = (120, 40)) -> Iterator[Terminal]:
    tmux = require_tmux()
    workdir.mkdir(parents=True, exist_ok=True)
    socket = workdir / "tmux.sock"
    terminal = Terminal(tmux, socket, "t")
    # remain-on-exit off: the session ends when the program does (alive() tells).
    terminal.run("-f", "/dev/null", "new-session", "-d", "-s", "t", "-x", str(size[0]), "-y", str(size[1]),
                 shlex.join(argv))
    try:
        yield terminal
    finally:
        terminal.run("kill-server", check=False)
