"""The observatory's page in a real headless Chromium: every chart drawn with the marks its
figures call for (hour-of-day points and lines, the split's stacked bars, the change rule
and its series, the cost bars with interval rules), hovering a point or a change shows its
interval, "not separable" is in the split's legend, no page error, no network request but
the page itself; with JavaScript off the page still reads (its tables and sentences)."""

from __future__ import annotations

import base64
import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from labkit.report.dashboard import write_dashboard
from tests.report.observatory_builders import observatory_figures
from tests.report.test_html_browser import Cdp, _evaluate, browser

pytestmark = [pytest.mark.e2e, pytest.mark.browser]

__all__ = ["browser"]  # the real-browser fixture, shared with the whole report's test

# Per chart, its drawn marks by kind.
_MARKS = """
JSON.stringify(Object.fromEntries([...document.querySelectorAll('div.chart')].map(el => {
  const n = sel => el.querySelectorAll('svg g.role-mark' + sel).length;
  return [el.dataset.chart, {
    symbols: n('.mark-symbol path'), lines: n('.mark-line path'), areas: n('.mark-area path'),
    rects: n('.mark-rect path'), rules: n('.mark-rule line'),
  }];
})))
"""

# Where a chart's mark is on the page: the centre of the first mark matching `sel` in it.
_CENTRE = """
JSON.stringify((() => {
  const m = document.querySelector('div.chart[data-chart="%s"] svg g.role-mark%s');
  const box = m.getBoundingClientRect();
  return [box.x + box.width / 2, box.y + box.height / 2];
})())
"""

# The change rule: the thick red one (the event rule is grey and dashed).
_CHANGE_RULE = """
JSON.stringify((() => {
  const rules = [...document.querySelectorAll(
    'div.chart[data-chart="obs_changes"] svg g.role-mark.mark-rule line')];
  const red = rules.find(l => (l.getAttribute('stroke') || '').toLowerCase() === '#cf222e');
  red.scrollIntoView({block: 'center'});
  const box = red.getBoundingClientRect();
  return [box.x + box.width / 2, box.y + box.height / 2];
})())
"""

_LEGEND_TEXT = """
JSON.stringify([...document.querySelectorAll(
  'div.chart[data-chart="obs_split"] svg g.role-legend text')].map(t => t.textContent))
"""


def _open(browser: Cdp, url: str, *, javascript: bool = True) -> str:
    target = browser.send("Target.createTarget", url="about:blank")["targetId"]
    session: str = browser.send("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
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
    if not javascript:
        browser.send("Emulation.setScriptExecutionDisabled", session, value=True)
    browser.events = [e for e in browser.events if e.get("method") != "Page.loadEventFired"]
    browser.send("Page.navigate", session, url=url)
    browser.wait_for("Page.loadEventFired")
    return session


def _hover(browser: Cdp, session: str, where: list[float], holding: str) -> str:
    browser.send("Runtime.evaluate", session, expression="window.scrollTo(0, 0)")
    return browser.tooltip(session, where[0], where[1], holding)


def test_the_dashboard_in_headless_chromium(tmp_path: Path, browser: Cdp) -> None:
    page = write_dashboard(observatory_figures(), tmp_path / "dashboard.html")
    url = page.resolve().as_uri()
    session = _open(browser, url)
    drawn = browser.chart_marks(session)
    assert list(drawn) == ["obs_hour_of_day", "obs_split", "obs_changes", "obs_costs"]

    marks: dict[str, dict[str, int]] = _evaluate(browser, session, _MARKS)
    # 3 providers × 2 metrics × 24 hours × (median, p90) points; a line per provider ×
    # statistic in each of the two metric panels; a band each too
    assert marks["obs_hour_of_day"]["symbols"] == 288
    assert marks["obs_hour_of_day"]["lines"] == 12
    assert marks["obs_hour_of_day"]["areas"] == 12
    # alpha: 3 parts, beta: queue + not separable, gamma: not separable; 24 hours each
    assert marks["obs_split"]["rects"] == 24 * (3 + 2 + 1)
    # seven daily medians with their interval rules, the change rule and the event rule,
    # and the change time's interval shaded
    assert marks["obs_changes"]["symbols"] == 7
    assert marks["obs_changes"]["rules"] == 7 + 1 + 1
    assert marks["obs_changes"]["rects"] == 1
    # alpha 4 measures, beta 3: a bar and an interval rule each
    assert marks["obs_costs"]["rects"] == 7 and marks["obs_costs"]["rules"] == 7

    legend = _evaluate(browser, session, _LEGEND_TEXT)
    assert "not separable" in legend, legend

    tip = _hover(
        browser,
        session,
        _evaluate(browser, session, _CENTRE % ("obs_hour_of_day", ".mark-symbol path")),
        "95% CI low",
    )
    assert "95% CI high" in tip and "probes" in tip, tip
    tip = browser.tooltip(session, *_evaluate(browser, session, _CHANGE_RULE), "95% CI of")
    assert "the provider's queue" in tip and "2026-11-05 12:00 UTC" in tip, tip
    assert "queue" in tip and "158.0" in tip, tip

    shot = browser.send("Page.captureScreenshot", session, format="png", captureBeyondViewport=True)
    (tmp_path / "dashboard.png").write_bytes(base64.b64decode(shot["data"]))
    print(f"screenshot: {tmp_path / 'dashboard.png'}")

    assert browser.page_errors(session) == []
    events = [e for e in browser.events if e.get("sessionId") == session]
    requested = [
        e["params"]["request"]["url"] for e in events if e["method"] == "Network.requestWillBeSent"
    ]
    assert url in requested
    assert [u for u in requested if u != url and not u.startswith("data:")] == []


_READ_WITHOUT_SCRIPT = """
JSON.stringify({
  tables: document.querySelectorAll('table').length,
  svgs: document.querySelectorAll('svg').length,
  text: document.body.innerText,
})
"""


def test_the_dashboard_reads_without_javascript(tmp_path: Path, browser: Cdp) -> None:
    figs = observatory_figures()
    page = write_dashboard(figs, tmp_path / "dashboard.html")
    session = _open(browser, page.resolve().as_uri(), javascript=False)
    got: dict[str, Any] = json.loads(browser.value(session, _READ_WITHOUT_SCRIPT))
    assert got["svgs"] == 0  # no chart drawn ...
    # ... but every picture's data is in a table: hours (one per metric), windows, split,
    # changes, cost, verdicts
    assert got["tables"] == 7
    text = got["text"]
    for change in figs.changes:
        assert change.sentence in text
    assert "not separable" in text and "differs: distributions" in text
    assert "350.0 [345.0–355.0]" in text  # beta's peak-hour median with its interval


def test_the_analysis_of_a_simulated_week_draws_in_headless_chromium(
    tmp_path: Path, browser: Cdp
) -> None:
    # The observatory's own analysis of its test week (three providers, a prefill that
    # doubles, a network that grows, a new fingerprint), drawn as the command draws it.
    from labkit.analysis.change_series import change_series
    from labkit.analysis.observatory import compute
    from tests.analysis.test_observatory import DAY0, week

    probes = week()
    figs = compute(probes, store="week.duckdb", computed_at=DAY0 + timedelta(days=7))
    figs = figs.model_copy(update={"series": change_series(probes, figs.changes)})
    shifts = [c for c in figs.changes if c.kind == "shift"]
    events = [c for c in figs.changes if c.kind != "shift"]
    assert shifts and events

    page = write_dashboard(figs, tmp_path / "dashboard.html")
    session = _open(browser, page.resolve().as_uri())
    drawn = browser.chart_marks(session)
    assert list(drawn) == ["obs_hour_of_day", "obs_split", "obs_changes"]  # no prices: no cost
    marks: dict[str, dict[str, int]] = _evaluate(browser, session, _MARKS)
    points = [p for p in figs.series if p.median.lo is not None]
    # a day's median per changed series with its interval rule, a red rule per shift, a
    # grey one per event in each panel of its provider
    panels = {(c.provider, c.metric) for c in shifts}
    per_provider = {
        p: sum(1 for q, _ in panels if q == p) or 1 for p in {c.provider for c in events}
    }
    assert marks["obs_changes"]["symbols"] == len(figs.series) == 7 * len(panels)
    assert marks["obs_changes"]["rules"] == (
        len(points) + len(shifts) + sum(per_provider[c.provider] for c in events)
    )
    assert marks["obs_changes"]["rects"] == len(shifts)
    tip = browser.tooltip(session, *_evaluate(browser, session, _CHANGE_RULE), "95% CI of")
    assert any(c.sentence in tip for c in shifts), tip
    assert browser.page_errors(session) == []
