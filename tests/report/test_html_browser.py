"""The HTML report in a real headless Chromium at 1280 px: no console errors, no network,
not blank, every chart drawn with marks (the five questions' and every section's: server
queue, load curves, cache hits, conversation turns, goodput, distributions, client vs
server), no static image, nothing wider than the viewport; a screenshot of
every section is saved under the test's tmp dir (paths printed: run with -s to see them).
The same holds for a large run (its records copied a thousand times), and the benchmark's
run of 10⁵ records (benchmarks/bench_report.py) draws the same sections and charts as its run
of a thousand.

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
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from labkit.records import LabResults
from labkit.report import write_report
from tests.report.report_builders import (
    mixed_records,
    picture_lab,
    section_answers,
    write_run,
    write_scrapes,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import bench_report

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
        self, method: str, session: str | None = None, timeout: float = 60.0, **params: Any
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

    def wait_for(self, method: str, timeout: float = 60.0) -> dict[str, Any]:
        for ev in self.events:
            if ev.get("method") == method:
                return ev
        deadline = time.monotonic() + timeout
        while True:
            ev = self._read_message(deadline)
            self.events.append(ev)
            if ev.get("method") == method:
                return ev

    def open_page(self, url: str, width: int = 1280, height: int = 1600) -> str:
        """A new tab `width` CSS pixels wide showing `url`, loaded; its session id."""
        target = self.send("Target.createTarget", url="about:blank")["targetId"]
        session: str = self.send("Target.attachToTarget", targetId=target, flatten=True)[
            "sessionId"
        ]
        for domain in ("Page", "Runtime", "Log"):
            self.send(f"{domain}.enable", session)
        self.send(
            "Emulation.setDeviceMetricsOverride",
            session,
            width=width,
            height=height,
            deviceScaleFactor=1,
            mobile=False,
        )
        self.events = [e for e in self.events if e.get("method") != "Page.loadEventFired"]
        self.send("Page.navigate", session, url=url)
        self.wait_for("Page.loadEventFired")
        return session

    def value(self, session: str, expression: str) -> Any:
        """What `expression` evaluates to in the page (a string, number or boolean)."""
        return self.send("Runtime.evaluate", session, expression=expression)["result"]["value"]

    def until(
        self, session: str, expression: str, done: Callable[[Any], bool], as_json: bool = True
    ) -> Any:
        """`expression`'s value (JSON-decoded when `as_json`) once `done` holds for it, or
        the last one after a minute: a hang guard, generous for a busy host, never a bound."""
        deadline = time.monotonic() + 60
        while True:
            raw = self.value(session, expression)
            got = json.loads(raw) if as_json else raw
            if done(got) or time.monotonic() >= deadline:
                return got
            time.sleep(0.2)

    def chart_marks(self, session: str, *charts: str) -> dict[str, int]:
        """Each chart's drawn marks, once `charts` (default: every chart) have some."""
        marks = self.until(
            session,
            _CHART_MARKS,
            lambda got: bool(got) and all(n > 0 for c, n in got if not charts or c in charts),
        )
        return dict(marks)

    def tooltip(self, session: str, x: float, y: float, holding: str) -> str:
        """The tooltip's text after the mouse moves to (`x`, `y`), once it holds `holding`."""
        self.send("Input.dispatchMouseEvent", session, type="mouseMoved", x=x, y=y)
        text: str = self.until(session, _TOOLTIP, lambda tip: holding in tip, as_json=False)
        return text

    def page_errors(self, session: str) -> list[dict[str, Any]]:
        """The page's uncaught exceptions and error log entries so far."""
        return [
            e
            for e in self.events
            if e.get("sessionId") == session
            and (
                e["method"] == "Runtime.exceptionThrown"
                or (e["method"] == "Log.entryAdded" and e["params"]["entry"]["level"] == "error")
            )
        ]


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


# Elements wider than the viewport, unless a scrolling or clipping box that itself fits holds
# them (a wide table scrolls inside its box: allowed).
_OVERFLOWING = """
(() => {
  const width = document.documentElement.clientWidth;
  const out = [];
  for (const el of document.body.querySelectorAll('*')) {
    const r = el.getBoundingClientRect();
    if (r.width === 0 || r.right <= width + 0.5) continue;
    let held = false;
    for (let a = el.parentElement; a && a !== document.body; a = a.parentElement) {
      const ox = getComputedStyle(a).overflowX;
      if (ox !== 'visible' && a.getBoundingClientRect().right <= width + 0.5) {
        held = true;
        break;
      }
    }
    if (!held) out.push(el.tagName + '.' + el.className + ' right=' + Math.round(r.right));
  }
  return JSON.stringify({
    viewport: innerWidth, width, scrollWidth: document.documentElement.scrollWidth, out,
  });
})()
"""

# Per chart: how many drawn marks its SVG holds (0: empty or not drawn).
_CHART_MARKS = """
JSON.stringify([...document.querySelectorAll('div.chart')].map(el => [
  el.dataset.chart,
  el.querySelectorAll('svg .mark-rect path, svg .mark-symbol path, svg .mark-rule line, '
    + 'svg .mark-line path, svg .mark-text text').length,
]))
"""

# The chart tooltip's text ("" while none is shown).
_TOOLTIP = "(document.querySelector('#vg-tooltip-element') || {}).innerText || ''"

# Each h2 section's box in page coordinates.
_SECTIONS = """
JSON.stringify((() => {
  const hs = [...document.querySelectorAll('h2')];
  const end = document.documentElement.scrollHeight;
  return hs.map((h, i) => {
    const top = h.getBoundingClientRect().top + scrollY;
    const next = i + 1 < hs.length ? hs[i + 1].getBoundingClientRect().top + scrollY : end;
    return [h.textContent, top, next - top];
  });
})())
"""


# Pick `local` in the anatomy chart's provider menu; count its marks by opacity.
_PICK_LOCAL_IN_ANATOMY = """
(async () => {
  const menu = document.querySelector('div.chart[data-chart="q1_anatomy"] select');
  menu.value = [...menu.options].find(o => o.text === 'local').value;
  menu.dispatchEvent(new Event('change'));
  menu.dispatchEvent(new Event('input'));
  await new Promise(done => setTimeout(done, 500));
  const marks = document.querySelectorAll('div.chart[data-chart="q1_anatomy"] svg path');
  const counts = {};
  for (const m of marks) {
    const o = m.getAttribute('opacity') || '1';
    counts[o] = (counts[o] || 0) + 1;
  }
  return JSON.stringify(counts);
})()
"""


def _evaluate(browser: Cdp, session: str, expression: str) -> Any:
    reply = browser.send("Runtime.evaluate", session, expression=expression)
    return json.loads(reply["result"]["value"])


def _copied(run_dir: Path, copies: int) -> None:
    """Make the run's records `copies` times as many: each line again under new record ids
    (a large run whose pages must read as the small one's)."""
    lines = (run_dir / "records.jsonl").read_text(encoding="utf-8").splitlines()
    with (run_dir / "records.jsonl").open("w", encoding="utf-8") as fh:
        for copy in range(copies):
            for line in lines:
                fh.write(line.replace('"record_id":"', f'"record_id":"c{copy}-', 1) + "\n")


# The large run: 1,000 copies of the small one's records (about 50,000, 100 MB).
@pytest.mark.parametrize("copies", [1, 1000], ids=["small-run", "large-run"])
def test_html_report_in_headless_chromium(tmp_path: Path, browser: Cdp, copies: int) -> None:
    lab = picture_lab()
    lab = LabResults(run_id=lab.run_id, answers=[*lab.answers, *section_answers()])
    run_dir = write_run(tmp_path / "run", mixed_records(), lab=lab)
    _copied(run_dir, copies)
    write_scrapes(run_dir)
    paths = write_report(run_dir)
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
    # vega-embed draws asynchronously: wait until every chart has its marks (or time out).
    deadline = time.monotonic() + 60  # a hang guard: generous for a busy host
    marks = _evaluate(browser, session, _CHART_MARKS)
    while not all(n > 0 for _, n in marks) and time.monotonic() < deadline:
        time.sleep(0.2)
        marks = _evaluate(browser, session, _CHART_MARKS)
    assert [name for name, _ in marks] == [
        "q1_anatomy",
        "q2_chars_per_token",
        "q3_determinism",
        "q4_prefill_decode",
        "q5_whose_time",
        "server_queue",
        "load_curves",
        "cache_hits",
        "conversation_turns",
        "goodput",
        "distributions",
        "client_vs_server",
    ]
    assert all(n >= 5 for _, n in marks), f"an empty chart: {marks}"
    shot = browser.send("Page.captureScreenshot", session, format="png")

    # Toggle providers: picking one in a chart's menu fades the other's marks.
    menus = _evaluate(
        browser,
        session,
        "JSON.stringify([...document.querySelectorAll('div.chart select')]"
        ".map(s => [...s.options].map(o => o.text)))",
    )
    assert menus == [["every provider", "hosted", "local"]] * 3
    faded = browser.send(
        "Runtime.evaluate",
        session,
        expression=_PICK_LOCAL_IN_ANATOMY,
        awaitPromise=True,
    )
    counts = json.loads(faded["result"]["value"])
    assert counts.get("0.12", 0) > 0 and counts.get("1", 0) > 0, counts

    overflow = _evaluate(browser, session, _OVERFLOWING)
    assert overflow["viewport"] == 1280
    assert overflow["out"] == [], f"wider than the 1280 px viewport: {overflow['out'][:10]}"
    assert overflow["scrollWidth"] <= overflow["width"]

    shots = tmp_path / "screenshots"
    shots.mkdir()
    sections = _evaluate(browser, session, _SECTIONS)
    assert [s[0] for s in sections][:2] == ["Lab answers", "What is missing"]
    for i, (heading, top, height) in enumerate(sections):
        clip = {"x": 0, "y": top, "width": 1280, "height": min(height, 6000), "scale": 1}
        section = browser.send(
            "Page.captureScreenshot", session, format="png", clip=clip, captureBeyondViewport=True
        )
        slug = "".join(c if c.isalnum() else "-" for c in heading.lower())[:40]
        path = shots / f"{i:02d}-{slug}.png"
        path.write_bytes(base64.b64decode(section["data"]))
        print(f"screenshot: {path}")
    assert len(list(shots.glob("*.png"))) == len(sections) >= 6

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
        expression="document.images.length",
    )
    assert images["result"]["value"] == 0  # every figure is a chart, none a static image
    spans = browser.send(
        "Runtime.evaluate", session, expression="document.querySelectorAll('.spans').length"
    )
    assert spans["result"]["value"] == 3

    png = base64.b64decode(shot["data"])
    artifact = tmp_path / "report_screenshot.png"
    artifact.write_bytes(png)
    img = Image.open(io.BytesIO(png)).convert("RGB")
    colours = img.getcolors(maxcolors=1 << 20)
    assert colours is not None and len(colours) > 50, "screenshot looks blank"
    white = max(count for count, colour in colours if colour == (255, 255, 255))
    assert white < 0.98 * img.width * img.height


def _drawn(browser: Cdp, url: str) -> dict[str, Any]:
    """A report page in a new tab: its charts (name, marks), h2 sections and console errors."""
    target = browser.send("Target.createTarget", url="about:blank")["targetId"]
    session = browser.send("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
    for domain in ("Page", "Runtime", "Log"):
        browser.send(f"{domain}.enable", session)
    browser.events = [e for e in browser.events if e.get("method") != "Page.loadEventFired"]
    browser.send("Page.navigate", session, url=url)
    browser.wait_for("Page.loadEventFired")
    deadline = time.monotonic() + 60
    marks = _evaluate(browser, session, _CHART_MARKS)
    while not (marks and all(n > 0 for _, n in marks)) and time.monotonic() < deadline:
        time.sleep(0.2)
        marks = _evaluate(browser, session, _CHART_MARKS)
    events = [e for e in browser.events if e.get("sessionId") == session]
    errors = [
        e
        for e in events
        if (e["method"] == "Runtime.consoleAPICalled" and e["params"]["type"] == "error")
        or e["method"] == "Runtime.exceptionThrown"
        or (e["method"] == "Log.entryAdded" and e["params"]["entry"]["level"] == "error")
    ]
    sections = [heading for heading, _, _ in _evaluate(browser, session, _SECTIONS)]
    browser.send("Target.closeTarget", targetId=target)
    return {"marks": marks, "sections": sections, "errors": errors}


def test_the_benchmarks_large_run_draws_the_pages_of_its_small_one(
    tmp_path: Path, browser: Cdp
) -> None:
    pages = {}
    for name, records in (("small", 1_000), ("large", 100_000)):
        run_dir = tmp_path / name
        bench_report.build(run_dir, records)
        pages[name] = _drawn(browser, write_report(run_dir).html.resolve().as_uri())
    small, large = pages["small"], pages["large"]
    assert small["errors"] == [] and large["errors"] == []
    assert large["sections"] == small["sections"] and len(small["sections"]) >= 4
    assert [n for n, _ in large["marks"]] == [n for n, _ in small["marks"]]
    assert len(small["marks"]) >= 2 and all(n > 0 for _, n in small["marks"] + large["marks"])
