"""The report's cost picture in a real headless Chromium: a dot and an interval line per
provider · model, drawn with no console error, under its Cost section."""

from __future__ import annotations

from pathlib import Path

import pytest

from labkit.report import write_report
from tests.report.test_cost_report import priced_run
from tests.report.test_html_browser import Cdp, _drawn, browser

pytestmark = [pytest.mark.e2e, pytest.mark.browser]

__all__ = ["browser"]  # the real-browser fixture, shared with the whole report's test


def test_the_cost_picture_in_headless_chromium(tmp_path: Path, browser: Cdp) -> None:
    paths = write_report(priced_run(tmp_path / "run"))
    assert (paths.files / "cost.png").stat().st_size > 0
    drawn = _drawn(browser, paths.html.resolve().as_uri())
    marks = dict(drawn["marks"])
    assert marks["cost"] >= 2, marks  # one provider · model: its dot and its interval line
    assert "Cost" in drawn["sections"], drawn["sections"]
    assert drawn["errors"] == [], drawn["errors"]
