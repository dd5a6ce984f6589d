"""A priced run's cost figures read a batch at a time (`CostTally`: the report's sidecar
parts, compare's, the sidecar's row groups) are the figures of the run read whole, to the
last bit: small row groups, blocks and a tally written out to files force many batches."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from labkit.analysis import cost
from labkit.analysis.cost import cost_figures
from labkit.figures.observatory import CostFigures
from labkit.records import RequestRecord, StopReason, Usage
from labkit.report import columnar, load_run, write_comparison
from labkit.report.build import load_report_run
from labkit.report.compare import _load_compared
from labkit.report.cost import run_prices, sidecar_costs
from tests.report.report_builders import write_run
from tests.support.records import T0, make_record

pytestmark = pytest.mark.unit

#: Made-up prices: `a`/`m1` changes price and currency an hour in; `b`/`m2` has one entry;
#: `c`/`m3` none (its requests are unpriced).
PRICES = [
    {"provider": "a", "model": "m1", "date": T0.isoformat(), "input": 1.0, "output": 3.0},
    {"provider": "a", "model": "m1", "date": (T0 + timedelta(hours=1)).isoformat(),
     "input": 2.0, "output": 5.0, "currency": "EUR"},
    {"provider": "b", "model": "m2", "date": T0.isoformat(), "input": 0.5, "output": 1.5},
]  # fmt: skip

_STOPS = [StopReason.END, StopReason.LENGTH, StopReason.END, StopReason.TOOL_CALL]
_WHERE = [("a", "m1", "single"), ("b", "m2", "single"), ("a", "m1", "token_ratio"),
          ("c", "m3", "single"), ("b", "m2", "token_ratio")]  # fmt: skip


def _records(n: int, sessions: bool) -> list[RequestRecord]:
    """`n` records over three provider × models and two experiments, interleaved: token
    counts of many distinct values (so the interval draws units one by one, in order),
    failures, warm-ups, send times on whole seconds and between them, across the price
    change; `sessions`: agent sessions' turns among them."""
    out = []
    for i in range(n):
        provider, model, experiment = _WHERE[i % len(_WHERE)]
        tags: dict[str, object] | None = None
        if sessions and i % 3 == 0:
            tags = {"session": i // 30, "agent": "0", "step": i % 30 // 3, "final": i % 30 >= 27}
        rec = make_record(
            provider=provider,
            model=model,
            experiment=experiment,
            started_at=T0 + timedelta(seconds=i * 13 // 2, milliseconds=250 * (i % 2)),
            error_kind="timeout" if i % 17 == 5 else None,
            warmup=i < 3,
            tags=tags,
        )
        usage = Usage(input_tokens=100 + (i * 37) % 901, output_tokens=10 + (i * 11) % 97)
        out.append(rec.model_copy(update={"usage": usage, "stop_reason": _STOPS[i % 4]}))
    return out


def _run(path: Path, n: int = 1500, sessions: bool = False) -> Path:
    return write_run(path, _records(n, sessions), manifest={"config": {"prices": PRICES}})


def _small_row_groups(monkeypatch: pytest.MonkeyPatch) -> None:
    """Sidecars written in row groups of about 7 rows (DuckDB's batches of 7 lines)."""
    from labkit.report import load

    monkeypatch.setattr(load, "BATCH_ROWS", 7)
    monkeypatch.setattr(columnar, "ROW_GROUP_ROWS", 7)


def _whole(run_dir: Path, monkeypatch: pytest.MonkeyPatch) -> list[CostFigures]:
    """The figures of the run's records.jsonl read whole (no sidecar), priced at once."""
    with monkeypatch.context() as patch:
        patch.setattr(columnar, "SIDECAR_MIN_BYTES", 1 << 62)
        run = load_run(run_dir)
    assert not (run_dir / columnar.SIDECAR_DIR).exists()
    return cost_figures(run.records, run_prices(run.manifest))


@pytest.mark.parametrize("sessions", [False, True], ids=["requests", "sessions"])
def test_figures_read_in_batches_are_the_figures_read_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sessions: bool
) -> None:
    run_dir = _run(tmp_path / "run", sessions=sessions)
    whole = _whole(run_dir, monkeypatch)
    monkeypatch.setattr(columnar, "SIDECAR_MIN_BYTES", 0)
    _small_row_groups(monkeypatch)
    monkeypatch.setattr(cost, "_PARSE_ROWS", 5)
    monkeypatch.setattr(cost, "_SPILL_BYTES", 0)
    run, parts = load_report_run(run_dir)
    assert parts is not None  # read through the sidecar, a part at a time
    side = columnar.sidecar(run_dir)
    assert side is not None and len(side.groups) == 5
    assert sum(len(g.row_groups) for g in side.groups) > 100  # many batches
    compared, costs = _load_compared(run_dir, costs=True)
    assert parts.costs == whole
    assert sidecar_costs(run, side) == whole
    assert costs == whole
    assert "usage.input_tokens" not in compared.records.columns  # not held by compare
    # the figures: per currency, the requests' count, a per-answer interval, sessions
    assert [(f.provider, f.model, f.currency) for f in whole] == [
        ("a", "m1", "EUR"),
        ("a", "m1", "USD"),
        ("b", "m2", "USD"),
    ]
    # every request of a and b but the three warm-ups (c's 300 have no price)
    assert sum(f.requests for f in whole) == 1500 - 300 - 3
    assert all(f.per_successful_answer and f.per_successful_answer.lo for f in whole)
    assert all((f.per_session is not None) == sessions for f in whole)


def test_a_priced_comparison_is_the_same_read_in_batches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    base = _run(tmp_path / "base", 400)
    other = _run(tmp_path / "other", 300, sessions=True)
    with monkeypatch.context() as patch:
        patch.setattr(columnar, "SIDECAR_MIN_BYTES", 1 << 62)
        write_comparison([base, other], tmp_path / "whole")
    monkeypatch.setattr(columnar, "SIDECAR_MIN_BYTES", 0)
    _small_row_groups(monkeypatch)
    monkeypatch.setattr(cost, "_SPILL_BYTES", 0)
    write_comparison([base, other], tmp_path / "parts")
    assert (base / columnar.SIDECAR_INDEX).is_file()
    md = (tmp_path / "parts" / "compare.md").read_text()
    assert "## Cost" in md and "| other | a" in md  # the sessions run's too
    for name in ("compare.md", "compare.csv", "compare.html"):
        assert (tmp_path / "parts" / name).read_bytes() == (tmp_path / "whole" / name).read_bytes()


def test_the_tally_leaves_no_files_behind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cost, "_SPILL_BYTES", 0)
    monkeypatch.setattr(cost.tempfile, "tempdir", str(tmp_path))
    run = load_run(_run(tmp_path / "run", 200))
    tally = cost.CostTally(run_prices(run.manifest))
    tally.add(run.records, run.records["file_offset"].to_numpy())
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("labkit-costs-")]
    assert tally.figures() == cost_figures(run.records, run_prices(run.manifest))
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("labkit-costs-")]
