"""The prompt-cache pictures in a real headless Chromium: each probed setting's hit rate with
its interval, and the gap probes with the lifetime bracket, drawn with marks and no console
error; the PNGs for report.md are written."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from labkit.analysis.prompt_cache import prompt_cache_figures
from labkit.figures.prompt_cache import CachePhase
from labkit.records import LabAnswer, LabResults, RequestRecord
from labkit.report import write_report
from labkit.wording.prompt_cache import prompt_cache_answer
from tests.report.report_builders import write_run
from tests.report.test_html_browser import Cdp, _drawn, browser
from tests.support.records import T0, make_record

pytestmark = [pytest.mark.e2e, pytest.mark.browser]

__all__ = ["browser"]  # the real-browser fixture, shared with the whole report's test


def _probe(
    phase: str, setting: float, k: int, hit: bool, gap_s: float = 0.0
) -> list[RequestRecord]:
    tags = {"phase": phase, "setting": setting, "probe": f"{phase}{setting}-{k}"}
    prime = make_record(
        experiment="prompt_cache", input_tokens=300, cached_tokens=12, ttft_ms=320.0 + k,
        tags={**tags, "role": "prime"},
    )  # fmt: skip
    repeat = make_record(
        experiment="prompt_cache", input_tokens=300, cached_tokens=299 if hit else 12,
        ttft_ms=(40.0 if hit else 320.0) + k, started_at=T0 + timedelta(seconds=gap_s),
        tags={**tags, "role": "repeat"},
    )  # fmt: skip
    return [prime, repeat]


def _lab() -> LabResults:
    records: list[RequestRecord] = []
    for k in range(3):
        records += _probe("length", 64, k, False) + _probe("length", 300, k, True)
        for gap, hit in ((0.5, True), (2.0, True), (8.0, False)):
            records += _probe("gap", gap, k, hit, gap_s=gap + 0.01 * k)
        records += _probe("evict", 0, k, True) + _probe("evict", 1, k, False)
    settings: list[tuple[CachePhase, float, str]] = [
        ("length", 64.0, "64 tokens"),
        ("length", 300.0, "300 tokens"),
        ("gap", 0.5, "0.5 s idle"),
        ("gap", 2.0, "2 s idle"),
        ("gap", 8.0, "8 s idle"),
        ("evict", 0.0, "after 0 other prompts"),
        ("evict", 1.0, "after 1 other prompt"),
    ]
    figures = prompt_cache_figures(settings, records, hit_share=0.5, min_tokens=128)
    return LabResults(
        run_id="run-1",
        answers=[
            LabAnswer(
                experiment="prompt_cache",
                provider="local",
                model="m",
                question="Does the cache keep a prefix?",
                answer=prompt_cache_answer(figures),
                figures=figures,
            )
        ],
    )


def test_the_prompt_cache_pictures_in_headless_chromium(tmp_path: Path, browser: Cdp) -> None:
    run_dir = write_run(tmp_path / "run", [], lab=_lab())
    paths = write_report(run_dir)
    md = paths.md.read_text()
    assert "prompt_cache_hits.png" in md and "prompt_cache_gaps.png" in md
    assert (paths.files / "prompt_cache_hits.png").stat().st_size > 0
    drawn = _drawn(browser, paths.html.resolve().as_uri())
    marks = dict(drawn["marks"])
    # 7 settings: a dot and an interval line each; 9 gap probes and the two bounds
    assert marks["prompt_cache_hits"] >= 14, marks
    assert marks["prompt_cache_gaps"] >= 11, marks
    assert drawn["errors"] == [], drawn["errors"]
