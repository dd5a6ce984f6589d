"""The vantage picture in a real headless Chromium: each vantage's provider and network
shares drawn as bars with their intervals as rules, hovering a bar shows its interval, the
PNG for report.md is written; no console errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from labkit.figures.stats import Mean
from labkit.figures.vantage import VantageFigures, VantageRow, VantageShift
from labkit.records import LabAnswer, LabResults
from labkit.report import write_report
from labkit.wording.vantage import vantage_answer
from tests.report.report_builders import write_run
from tests.report.test_html_browser import Cdp, _evaluate, browser

pytestmark = [pytest.mark.e2e, pytest.mark.browser]

__all__ = ["browser"]  # the real-browser fixture, shared with the whole report's test


def _m(value: float, half: float) -> Mean:
    return Mean(value=value, lo=value - half, hi=value + half, n=12)


def _lab() -> LabResults:
    f = VantageFigures(
        vantages=[
            VantageRow(name="near", route="relay", delay_ms=0, n=12,
                       ttft_ms=_m(16, 1), provider_ms=_m(12, 0.5), network_ms=_m(3, 0.8)),
            VantageRow(name="far", route="relay", delay_ms=40, jitter_ms=4, n=12,
                       ttft_ms=_m(56, 1.5), provider_ms=_m(12.1, 0.6), network_ms=_m(43.2, 1.2)),
        ],
        shifts=[
            VantageShift(name="far", reference="near", pairs=12, configured_ms=40,
                         provider_ms=_m(0.1, 0.4), network_ms=_m(40.2, 1.1),
                         provider_unchanged=True, network_matches=True),
        ],
        proven=True,
    )  # fmt: skip
    answer = LabAnswer(
        experiment="vantage",
        provider="local",
        model="m",
        question="Proven?",
        answer=vantage_answer(f),
        figures=f,
    )
    return LabResults(run_id="run-1", answers=[answer])


_DATA_MARKS = """
JSON.stringify((() => {
  const svg = 'div.chart[data-chart="vantage"] svg ';
  return {
    bars: document.querySelectorAll(svg + 'g.mark-rect.role-mark path').length,
    rules: document.querySelectorAll(svg + 'g.mark-rule.role-mark line').length,
  };
})())
"""

_HOVER_TARGET = """
JSON.stringify((() => {
  const svg = 'div.chart[data-chart="vantage"] svg ';
  const bar = document.querySelector(svg + 'g.mark-rect.role-mark path');
  const box = bar.getBoundingClientRect();
  return [box.x + box.width / 2, box.y + box.height / 2];
})())
"""


def test_the_vantage_picture_in_headless_chromium(tmp_path: Path, browser: Cdp) -> None:
    run_dir = write_run(tmp_path / "run", [], lab=_lab())
    paths = write_report(run_dir)
    assert "report_files/vantage.png" in paths.md.read_text()
    assert (paths.files / "vantage.png").stat().st_size > 0
    assert "The split is proven by a vantage run" in paths.html.read_text()

    session = browser.open_page(paths.html.resolve().as_uri())
    browser.chart_marks(session, "vantage")
    data_marks = _evaluate(browser, session, _DATA_MARKS)
    # two vantages × two shares: four bars and four interval rules
    assert data_marks == {"bars": 4, "rules": 4}, data_marks

    tip = browser.tooltip(session, *_evaluate(browser, session, _HOVER_TARGET), "95% CI low")
    assert "95% CI low" in tip and "local · " in tip, tip
    assert browser.page_errors(session) == []
