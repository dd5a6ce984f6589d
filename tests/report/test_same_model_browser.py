"""The same-model picture in a real headless Chromium: each provider's prompts as dots at
their total variation from the reference, the tolerance as a line, drawn with no console
error; the verdicts name their rows."""

from __future__ import annotations

from pathlib import Path

import pytest

from labkit.report import write_report
from tests.experiments.test_same_model import run
from tests.report.test_html_browser import Cdp, _drawn, browser

pytestmark = [pytest.mark.e2e, pytest.mark.browser]

__all__ = ["browser"]  # the real-browser fixture, shared with the whole report's test


def test_the_same_model_picture_in_headless_chromium(tmp_path: Path, browser: Cdp) -> None:
    run(tmp_path)
    (run_dir,) = [p for p in tmp_path.iterdir() if (p / "lab.json").exists()]
    paths = write_report(run_dir)
    md = paths.md.read_text()
    assert "same_model.png" in md
    html = paths.html.read_text()
    assert "other_model: differs: distributions" in html
    drawn = _drawn(browser, paths.html.resolve().as_uri())
    marks = dict(drawn["marks"])
    # four providers beside the reference, ten prompts each, and the tolerance's line
    assert marks["same_model"] >= 4 * 10 + 1, marks
    assert drawn["errors"] == [], drawn["errors"]
