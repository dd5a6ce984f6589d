"""Runs side by side: p50/p90 deltas with sample counts."""

from __future__ import annotations

from pathlib import Path

import pytest

from labkit.errors import RunError
from labkit.report import compare_runs, write_comparison
from tests.report.report_builders import make_record, write_run

pytestmark = pytest.mark.unit


def _runs(tmp_path: Path) -> tuple[Path, Path]:
    before = write_run(
        tmp_path / "before", [make_record(run_id="b", ttft_ms=float(i)) for i in range(1, 101)]
    )
    after_recs = [make_record(run_id="a", ttft_ms=float(i) + 10) for i in range(1, 101)]
    after_recs.append(make_record(run_id="a", ttft_ms=1e6, error_kind="timeout"))
    after = write_run(tmp_path / "after", after_recs)
    return before, after


def test_compare_deltas_and_counts(tmp_path: Path) -> None:
    before, after = _runs(tmp_path)
    table = compare_runs([before, after])
    ttft = table[table["metric"] == "ttft_ms"].set_index("run")
    assert ttft.loc["before", "p50"] == pytest.approx(50.5)
    assert ttft.loc["before", "p90"] == pytest.approx(90.1)
    assert ttft.loc["before", "n"] == 100 and ttft.loc["after", "n"] == 100
    assert ttft.loc["after", "delta_p50"] == pytest.approx(10.0)
    assert ttft.loc["after", "delta_p90"] == pytest.approx(10.0)
    assert ttft.loc["after", "delta_p50_pct"] == pytest.approx(1000 / 50.5)
    assert list(table["run"].unique()) == ["before", "after"]


def test_write_comparison(tmp_path: Path) -> None:
    before, after = _runs(tmp_path)
    folder = write_comparison([before, after])
    assert folder == tmp_path / "compare-before-vs-after"
    md = (folder / "compare.md").read_text()
    assert "+10.0 (+19.8%)" in md
    assert (folder / "compare.html").is_file() and (folder / "compare.csv").is_file()
    out = write_comparison([before, after], tmp_path / "elsewhere")
    assert (out / "compare.md").is_file()


def test_compare_needs_two_runs(tmp_path: Path) -> None:
    before, _ = _runs(tmp_path)
    with pytest.raises(RunError):
        compare_runs([before])
