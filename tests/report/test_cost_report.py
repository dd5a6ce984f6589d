"""The report and the comparison show cost only where the run's config gave prices, with the
figures of the one cost definition."""

from __future__ import annotations

from pathlib import Path

import pytest

from labkit.records import RequestRecord, StopReason, Usage
from labkit.report import write_report
from labkit.report.compare import write_comparison
from tests.report.report_builders import write_run
from tests.support.records import T0, make_record

pytestmark = pytest.mark.unit

#: Made-up prices (labkit ships none): 1.00 in, 3.00 out per 1M tokens.
PRICES = [{"provider": "local", "model": "m", "date": T0.date().isoformat(), "input": 1.0,
           "output": 3.0}]  # fmt: skip


def priced_records(n: int = 6, output: int = 100) -> list[RequestRecord]:
    """`n` answered requests of 1,000 prompt and `output` output tokens each."""
    return [
        make_record(provider="local", model="m").model_copy(
            update={
                "usage": Usage(input_tokens=1000, output_tokens=output),
                "stop_reason": StopReason.END,
            }
        )
        for _ in range(n)
    ]


def priced_run(
    run_dir: Path, output: int = 100, prices: list[dict[str, object]] | None = None
) -> Path:
    """A run whose manifest's config holds `prices` (PRICES by default)."""
    return write_run(
        run_dir, priced_records(output=output),
        manifest={"config": {"prices": PRICES if prices is None else prices}},
    )  # fmt: skip


def test_the_report_shows_the_cost_a_hand_computation_gives(tmp_path: Path) -> None:
    # each request: 1000 × 1.00 / 1e6 + 100 × 3.00 / 1e6 = 0.0013 USD; six of them: 0.0078
    md = write_report(priced_run(tmp_path / "run")).md.read_text()
    assert "## Cost" in md
    row = next(line for line in md.splitlines() if line.replace(" ", "").startswith("|local|m|"))
    assert "0.0013 USD" in row and "0.0078 USD" in row
    assert "769 per USD" in row  # 1 / 0.0013 answers per dollar
    assert "cost.png" in md


def test_no_price_table_no_cost_section(tmp_path: Path) -> None:
    md = write_report(priced_run(tmp_path / "run", prices=[])).md.read_text()
    assert "## Cost" not in md


def test_compare_shows_each_runs_cost(tmp_path: Path) -> None:
    # the second run's answers are twice as long: 1000 × 1 + 200 × 3 = 1,600 → 0.0016 USD
    a = priced_run(tmp_path / "a")
    b = priced_run(tmp_path / "b", output=200)
    result = write_comparison([a, b], tmp_path / "cmp")
    md = (result.folder / "compare.md").read_text()
    rows = [line for line in md.splitlines() if "|local|m|" in line.replace(" ", "")]
    assert len(rows) == 2
    assert "0.0013 USD" in rows[0] and "0.0016 USD" in rows[1]
