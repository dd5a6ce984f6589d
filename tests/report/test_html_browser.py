"""The HTML report in a real headless Chromium: no console errors, no network, not blank.

Chromium is driven with the Chrome DevTools Protocol over ``--remote-debugging-pipe``
(NUL-terminated JSON on file descriptors 3 and 4), so no websocket client is needed. The
browser comes from Debian (``make browser`` runs ``scripts/install-browser.sh``); without it
the test fails, saying how to install it: a real-component test is never skipped.
"""

from __future__ import annotations

import base64
import fcntl
import io
import json
import os
import select
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from labkit.report import write_report
from tests.report.report_builders import full_lab, mixed_records, write_run

CHROMIUM = Path("/usr/bin/chromium")

pytestmark = [pytest.mark.e2e, pytest.mark.browser]


@pytest.fixture(autouse=True)
def _chromium_installed() -> None:
    if not CHROMIUM.exists():
        pytest.fail("/usr/bin/chromium is missing: run `make browser` (scripts/install-browser.sh)")


class Cdp:
    """A minimal CDP client over the two pipes of --remote-debugging-pipe."""

    def __init__(self, to_browser: int, from_browser: int) -> None:
        self._w = to_browser
        self._r = from_browser
        self._buf = b""
        self._next = 0
        self.events: list[dict[str, Any]] = []

    def _read_message(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no answer from chromium")
            ready, _, _ = select.select([self._r], [], [], left)
            if ready:
                chunk = os.read(self._r, 1 << 20)
                if not chunk:
                    raise ConnectionError("chromium closed the pipe")
                self._buf += chunk
        raw, self._buf = self._buf.split(b"\0", 1)
        msg: dict[str, Any] = json.loads(raw)
        return msg

    def send(
        self, method: str, session: str | None = None, timeout: float = 20.0, **params: Any
    ) -> dict[str, Any]:
        self._next += 1
        msg: dict[str, Any] = {"id": self._next, "method": method, "params": params}
        if session:
            msg["sessionId"] = session
        os.write(self._w, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            reply = self._read_message(deadline)
            if reply.get("id") == self._next:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                result: dict[str, Any] = reply.get("result", {})
                return result
            self.events.append(reply)

    def wait_for(self, method: str, timeout: float = 20.0) -> dict[str, Any]:
        for ev in self.events:
            if ev.get("method") == method:
                return ev
        deadline = time.monotonic() + timeout
        while True:
            ev = self._read_message(deadline)
            self.events.append(ev)
            if ev.get("method") == method:
                return ev


def _high_fd(fd: int) -> int:
    new = fcntl.fcntl(fd, fcntl.F_DUPFD, 10)
    os.close(fd)
    return new


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Cdp]:
    cmd_r, cmd_w = os.pipe()  # we write commands; chromium reads them on fd 3
    ev_r, ev_w = os.pipe()  # chromium writes on fd 4; we read
    cmd_r, ev_w = _high_fd(cmd_r), _high_fd(ev_w)
    args = [
        str(CHROMIUM),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        "--remote-debugging-pipe",
        f"--user-data-dir={tmp_path / 'profile'}",
        "about:blank",
    ]
    # bash (not dash: it takes fds above 9) puts our pipe ends on fds 3 and 4, where
    # --remote-debugging-pipe looks for them.
    proc = subprocess.Popen(
        ["/bin/bash", "-c", f'exec "$@" 3<&{cmd_r} 4>&{ev_w} {cmd_r}<&- {ev_w}>&-', "bash", *args],
        pass_fds=(cmd_r, ev_w),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    os.close(cmd_r)
    os.close(ev_w)
    try:
        yield Cdp(cmd_w, ev_r)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        os.close(cmd_w)
        os.close(ev_r)


def test_html_report_in_headless_chromium(tmp_path: Path, browser: Cdp) -> None:
    paths = write_report(write_run(tmp_path / "run", mixed_records(), lab=full_lab()))
    url = paths.html.resolve().as_uri()

    target = browser.send("Target.createTarget", url="about:blank")["targetId"]
    session = browser.send("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
    for domain in ("Page", "Runtime", "Log", "Network"):
        browser.send(f"{domain}.enable", session)
    browser.send(
        "Emulation.setDeviceMetricsOverride",
        session,
        width=1280,
        height=1600,
        deviceScaleFactor=1,
        mobile=False,
    )
    browser.send("Page.navigate", session, url=url)
    browser.wait_for("Page.loadEventFired")
    # Let late events (a lazily fetched resource, a console message) arrive.
    browser.send("Runtime.evaluate", session, expression="document.readyState")
    shot = browser.send("Page.captureScreenshot", session, format="png")
    browser.send("Runtime.evaluate", session, expression="1")

    events = [e for e in browser.events if e.get("sessionId") == session]
    console_errors = [
        e
        for e in events
        if (e["method"] == "Runtime.consoleAPICalled" and e["params"]["type"] == "error")
        or e["method"] == "Runtime.exceptionThrown"
        or (e["method"] == "Log.entryAdded" and e["params"]["entry"]["level"] == "error")
    ]
    assert console_errors == []
    requested = [
        e["params"]["request"]["url"] for e in events if e["method"] == "Network.requestWillBeSent"
    ]
    assert url in requested
    assert [u for u in requested if u != url and not u.startswith("data:")] == []

    title = browser.send("Runtime.evaluate", session, expression="document.title")
    assert title["result"]["value"].startswith("labkit report")
    images = browser.send(
        "Runtime.evaluate",
        session,
        expression="[...document.images].filter(i => i.complete && i.naturalWidth > 0).length",
    )
    assert images["result"]["value"] == 6

    png = base64.b64decode(shot["data"])
    artifact = tmp_path / "report_screenshot.png"
    artifact.write_bytes(png)
    img = Image.open(io.BytesIO(png)).convert("RGB")
    colours = img.getcolors(maxcolors=1 << 20)
    assert colours is not None and len(colours) > 50, "screenshot looks blank"
    white = max(count for count, colour in colours if colour == (255, 255, 255))
    assert white < 0.98 * img.width * img.height
