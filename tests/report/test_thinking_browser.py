"""The hidden-thinking picture in a real headless Chromium: each request's time to the last
token drawn as waiting, thinking (estimated) and answering, the legend naming the thinking
estimated, the PNG for report.md written; no console errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from labkit.analysis.thinking import thinking_figures
from labkit.records import LabAnswer, LabResults, RequestRecord
from labkit.report import write_report
from labkit.wording.thinking import thinking_answer
from tests.report.report_builders import write_run
from tests.report.test_html_browser import Cdp, _evaluate, browser
from tests.support.records import make_record

pytestmark = [pytest.mark.e2e, pytest.mark.browser]

__all__ = ["browser"]  # the real-browser fixture, shared with the whole report's test


def _hidden(ttft: float, pace: float) -> RequestRecord:
    r = make_record(experiment="thinking", ttft_ms=ttft, decode_ms_per_token=pace)
    r.usage.reasoning_tokens = 96
    return r


def _lab() -> LabResults:
    f = thinking_figures([_hidden(420.0, 4.0), _hidden(440.0, 4.1), _hidden(410.0, 3.9)], {})
    return LabResults(
        run_id="run-1",
        answers=[
            LabAnswer(
                experiment="thinking",
                provider="hosted",
                model="m",
                question="How long did it think?",
                answer=thinking_answer(f, "hosted"),
                figures=f,
            )
        ],
    )


_BARS = """
document.querySelectorAll('div.chart[data-chart="thinking"] svg .mark-rect path').length
"""

_LEGEND = """
JSON.stringify([...document.querySelectorAll('div.chart[data-chart="thinking"] svg text')]
  .map(t => t.textContent))
"""


def test_the_thinking_picture_in_headless_chromium(tmp_path: Path, browser: Cdp) -> None:
    run_dir = write_run(tmp_path / "run", [], lab=_lab())
    paths = write_report(run_dir)
    assert "report_files/thinking.png" in paths.md.read_text()
    assert (paths.files / "thinking.png").stat().st_size > 0

    session = browser.open_page(paths.html.resolve().as_uri())
    browser.chart_marks(session, "thinking")
    bars = browser.value(session, _BARS)
    assert bars == 12, bars  # the mean and 3 requests, 3 parts each
    texts = _evaluate(browser, session, _LEGEND)
    assert {"waiting", "thinking (estimated)", "answering"} <= set(texts), texts
    assert "hosted · mean of 3" in texts and "hosted · request 3" in texts, texts
    assert browser.page_errors(session) == []
