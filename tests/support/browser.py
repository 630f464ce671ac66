"""Debian's chromium, headless, driven over the DevTools protocol: for testing web pages.

`running_chromium(url, workdir)` starts chromium with the flags that work
without a display or a sandbox, an empty profile in `workdir`, and DevTools on
an ephemeral loopback port (read from the profile's DevToolsActivePort file);
it yields a `Page` connected to the tab showing `url`, and stops chromium by
PID however the block ends. `Page.evaluate` runs JavaScript and returns its
value; `Page.wait_for` polls an expression until a condition holds;
`Page.screenshot` returns PNG bytes. Tests call `require_chromium()` first: it
skips, naming the package, only when chromium is truly absent.
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Iterator

from tests.support.tools import require, stop

START_TIMEOUT = 30.0
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--hide-scrollbars",
         "--disable-dev-shm-usage",  # containers often have a tiny /dev/shm
         "--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0")


def require_chromium() -> str:
    return require("chromium")


class Page:
    def __init__(self, ws_url: str) -> None:
        import websocket  # websocket-client, a test dependency

        # Chromium refuses DevTools connections that carry an Origin header it does not know.
        self._ws = websocket.create_connection(ws_url, timeout=30, suppress_origin=True)
        self._ids = itertools.count(1)

    def call(self, method: str, **params) -> dict:
        call_id = next(self._ids)
        self._ws.send(json.dumps({"id": call_id, "method": method, "params": params}))
        while True:
            message = json.loads(self._ws.recv())
            if message.get("id") == call_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message["result"]

    def evaluate(self, expression: str):
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, expression: str, condition, timeout: float = 20.0, what: str = ""):
        deadline = time.monotonic() + timeout
        value = None
        while time.monotonic() < deadline:
            try:
                value = self.evaluate(expression)
            except RuntimeError as exc:  # the page is still loading: the element is not there yet
                value = exc
            else:
                if condition(value):
                    return value
            time.sleep(0.1)  # polling the page, bounded by the deadline
        raise AssertionError(f"{what or expression}: not met within {timeout:g} s; last value {value!r}")

    def screenshot(self) -> bytes:
        return base64.b64decode(self.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)["data"])

    def close(self) -> None:
        self._ws.close()


def _devtools_port(profile: Path, proc: subprocess.Popen, log_path: Path) -> int:
    deadline = time.monotonic() + START_TIMEOUT
    active = profile / "DevToolsActivePort"
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"chromium exited with {proc.returncode}: {log_path.read_text(errors='replace')[-2000:]}")
        if active.exists():
            first = active.read_text().split("\n", 1)[0].strip()
            if first.isdigit():
                return int(first)
        time.sleep(0.05)  # polling for the file chromium writes once DevTools listens
    raise RuntimeError(f"chromium did not open DevTools within {START_TIMEOUT:g} s")


def _page_target(port: int, url: str) -> str:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=5) as answer:
            targets = json.load(answer)
        for target in targets:
            if target.get("type") == "page" and target.get("url", "").startswith(url):
                return target["webSocketDebuggerUrl"]
        time.sleep(0.05)  # polling for the tab, bounded by the deadline
    raise RuntimeError(f"no chromium tab shows {url}")


@contextlib.contextmanager
def running_chromium(url: str, workdir: Path, size: tuple[int, int] = (1200, 800)) -> Iterator[Page]:
    executable = require_chromium()
    profile = workdir / "profile"
    profile.mkdir(parents=True)
    log_path = workdir / "chromium.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([executable, *FLAGS, f"--user-data-dir={profile}",
                                 f"--window-size={size[0]},{size[1]}", url],
                                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
    page = None
    try:
        port = _devtools_port(profile, proc, log_path)
        page = Page(_page_target(port, url))
        yield page
    finally:
        if page is not None:
            page.close()
        stop(proc)
