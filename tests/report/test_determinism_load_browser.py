"""`determinism_load`'s picture in a real headless Chromium: each level's distinct replies
drawn as rows of token cells with marks, the answer naming what controlled the selection on
the page, and no console errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from labkit.figures.determinism_load import DeterminismLoadFigures, DeterminismLoadLevel
from labkit.records import LabAnswer, LabResults
from labkit.report import write_report
from labkit.wording.determinism_load import determinism_load_answer
from tests.report.report_builders import write_run
from tests.report.test_html_browser import Cdp, browser

pytestmark = [pytest.mark.e2e, pytest.mark.browser]

__all__ = ["browser"]  # the real-browser fixture, shared with the whole report's test

SAME = ["The", " keeper", " sea", " slept"]
OTHER = ["The", " keeper", " shore", " waited"]


def _lab() -> LabResults:
    alone = DeterminismLoadLevel(
        concurrency=1,
        n=4,
        identical=True,
        distinct_outputs=1,
        tokens_from="characters",
        peak_in_flight=1,
        outputs=[SAME] * 4,
    )
    together = DeterminismLoadLevel(
        concurrency=4,
        n=4,
        identical=False,
        distinct_outputs=2,
        first_different_token=3,
        tokens_from="characters",
        peak_in_flight=4,
        same_as_first_level=2,
        decode_batch=3.9,
        outputs=[SAME, OTHER, SAME, OTHER],
    )
    f = DeterminismLoadFigures(
        params={"temperature": 0},
        levels=[alone, together],
        server_slots=4,
        batch_changed_selection=True,
    )
    answer = LabAnswer(
        experiment="determinism_load",
        provider="local",
        model="m",
        question="Identical under load?",
        answer=determinism_load_answer(f),
        figures=f,
    )
    return LabResults(run_id="run-1", answers=[answer])


def test_the_determinism_load_picture_in_headless_chromium(tmp_path: Path, browser: Cdp) -> None:
    run_dir = write_run(tmp_path / "run", [], lab=_lab())
    paths = write_report(run_dir)
    session = browser.open_page(paths.html.resolve().as_uri())
    marks = browser.chart_marks(session, "determinism_load")
    # Three rows (concurrency 1's one reply, concurrency 4's two) of four token cells.
    assert marks.get("determinism_load", 0) >= 12, marks
    text = browser.value(session, "document.body.innerText")
    assert "What controlled the selection: the batch." in text
    assert "2 distinct replies of 4 at concurrency 4, first different at token 3" in text
    assert browser.page_errors(session) == []
