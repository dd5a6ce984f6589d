"""The next-token pictures in a real headless Chromium: the replies as tokens shaded by their
probability and the candidates at the divergence point are drawn with marks, hovering a token
shows its candidates, and the PNGs for report.md are written; no console errors."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from labkit.analysis.next_token import next_token_figures, variant_figures
from labkit.figures import DeterminismFigures
from labkit.records import (
    LabAnswer,
    LabResults,
    LogprobStep,
    OutputLogprobs,
    RequestRecord,
    TokenCandidate,
)
from labkit.report import write_report
from labkit.wording.next_token import divergence_sentence
from tests.report.report_builders import write_run
from tests.report.test_html_browser import Cdp, _evaluate, browser
from tests.support.records import make_record

pytestmark = [pytest.mark.e2e, pytest.mark.browser]

__all__ = ["browser"]  # the real-browser fixture, shared with the whole report's test


def _reply(variant: str, second: str, p: float) -> RequestRecord:
    r = make_record(experiment="determinism", tags={"variant": variant})
    tops = [("Once", 0.6), (" a", 0.41), (" the", 0.38)]
    r.logprobs = OutputLogprobs(
        top_k=3,
        steps=[
            LogprobStep(
                token="Once",
                logprob=math.log(0.6),
                top=[TokenCandidate(token="Once", logprob=math.log(0.6))],
            ),
            LogprobStep(
                token=second,
                logprob=math.log(p),
                top=[TokenCandidate(token=t, logprob=math.log(q)) for t, q in tops[1:]],
            ),
        ],
    )
    return r


def _lab() -> LabResults:
    hot = variant_figures(
        "t1", {"temperature": 1.0}, [_reply("t1", " a", 0.41), _reply("t1", " the", 0.38)]
    )
    cold = variant_figures("t0", {"temperature": 0}, [_reply("t0", " a", 0.41)] * 2)
    seen = next_token_figures(3, [cold, hot], can_return=True)
    return LabResults(
        run_id="run-1",
        answers=[
            LabAnswer(
                experiment="determinism",
                provider="local",
                model="m",
                question="Identical?",
                answer=divergence_sentence(seen),
                figures=DeterminismFigures(next_token=seen),
            )
        ],
    )


_HOVER_TARGET = """
JSON.stringify((() => {
  const cell = document.querySelector('div.chart[data-chart="q3_next_token"] svg .mark-rect path');
  const box = cell.getBoundingClientRect();
  return [box.x + box.width / 2, box.y + box.height / 2];
})())
"""


def test_the_next_token_pictures_in_headless_chromium(tmp_path: Path, browser: Cdp) -> None:
    run_dir = write_run(tmp_path / "run", [], lab=_lab())
    paths = write_report(run_dir)
    assert "report_files/q3_next_token.png" in paths.md.read_text()
    assert (paths.files / "q3_divergence.png").stat().st_size > 0

    session = browser.open_page(paths.html.resolve().as_uri())
    marks = browser.chart_marks(session)
    assert marks["q3_next_token"] >= 6 and marks["q3_divergence"] >= 3, marks

    tip = browser.tooltip(session, *_evaluate(browser, session, _HOVER_TARGET), "candidates")
    assert "candidates" in tip and "'Once' 0.60" in tip, tip
    assert browser.page_errors(session) == []
