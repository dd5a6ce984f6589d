"""The compare gate: changes with bootstrap intervals, verdicts, thresholds, outputs."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from labkit.errors import ConfigError, RunError
from labkit.records import RequestRecord
from labkit.report import compare_runs, write_comparison
from labkit.report.compare import (
    GATE_METRICS,
    Comparison,
    Threshold,
    check_thresholds,
    parse_threshold,
)
from tests.report.report_builders import write_run
from tests.support.records import make_record

pytestmark = pytest.mark.unit


def _records(
    run_id: str,
    ttfts: list[float],
    *,
    keyed: bool = True,
    decode: float = 10.0,
    errors: int = 0,
) -> list[RequestRecord]:
    out = []
    for i, ttft in enumerate(ttfts):
        rec = make_record(run_id=run_id, ttft_ms=ttft, decode_ms_per_token=decode)
        rec.plan_key = f"single/p{i}/0" if keyed else None
        out.append(rec)
    for j in range(errors):
        rec = make_record(run_id=run_id, error_kind="timeout")
        rec.plan_key = f"single/e{j}/0" if keyed else None
        out.append(rec)
    out.append(make_record(run_id=run_id, ttft_ms=5000.0, warmup=True))  # never counted
    return out


def _noisy(n: int, centre: float, spread: float, seed: int) -> list[float]:
    return list(np.random.default_rng(seed).normal(centre, spread, n))


def _row(table: pd.DataFrame, metric: str) -> pd.Series:
    rows = table[table["metric"] == metric]
    assert len(rows) == 1
    return rows.iloc[0]


def _pair(tmp_path: Path, before: list[RequestRecord], after: list[RequestRecord]) -> list[Path]:
    return [write_run(tmp_path / "before", before), write_run(tmp_path / "after", after)]


def test_a_slowdown_is_reported_with_an_interval_around_it(tmp_path: Path) -> None:
    base = _noisy(40, 50.0, 3.0, 1)
    runs = _pair(tmp_path, _records("b", base), _records("a", [t + 30.0 for t in base]))
    table = compare_runs(runs)
    ttft = _row(table, "ttft_p50")
    assert ttft["paired"] and ttft["n_base"] == 40 and ttft["n"] == 40
    assert ttft["change"] == pytest.approx(30.0)
    # Paired on the same requests shifted by exactly 30 ms: the interval collapses on it.
    assert ttft["change_low"] == pytest.approx(30.0) and ttft["change_high"] == pytest.approx(30.0)
    assert ttft["change_pct"] == pytest.approx(100 * 30.0 / ttft["base"])
    assert ttft["verdict"] == "slower"
    assert _row(table, "decode_p50")["verdict"] == "no change detected"
    assert _row(table, "error_rate")["verdict"] == "no change detected"


def test_unpaired_when_plan_keys_differ_and_the_interval_covers_the_true_shift(
    tmp_path: Path,
) -> None:
    before = _records("b", _noisy(60, 50.0, 5.0, 2), keyed=False)
    after = _records("a", _noisy(60, 65.0, 5.0, 3), keyed=False)
    ttft = _row(compare_runs(_pair(tmp_path, before, after)), "ttft_p50")
    assert not ttft["paired"]
    assert ttft["change_low"] < 15.0 < ttft["change_high"]
    assert ttft["change_low"] > 0 and ttft["verdict"] == "slower"


def test_same_seed_same_intervals_other_seed_other_draws(tmp_path: Path) -> None:
    before = _records("b", _noisy(30, 50.0, 5.0, 4), keyed=False)
    after = _records("a", _noisy(30, 52.0, 5.0, 5), keyed=False)
    runs = _pair(tmp_path, before, after)
    one = compare_runs(runs)
    pd.testing.assert_frame_equal(one, compare_runs(runs))
    other = compare_runs(runs, how=Comparison(seed=7))
    assert _row(one, "ttft_p50")["change_low"] != _row(other, "ttft_p50")["change_low"]
    assert _row(one, "ttft_p50")["change"] == _row(other, "ttft_p50")["change"]


def test_same_distribution_is_no_change_detected(tmp_path: Path) -> None:
    before = _records("b", _noisy(80, 50.0, 2.0, 6), keyed=False)
    after = _records("a", _noisy(80, 50.0, 2.0, 7), keyed=False)
    ttft = _row(compare_runs(_pair(tmp_path, before, after)), "ttft_p50")
    assert ttft["change_low"] < 0 < ttft["change_high"]
    assert ttft["verdict"] == "no change detected"


def test_few_requests_are_not_enough_data_never_no_change(tmp_path: Path) -> None:
    runs = _pair(tmp_path, _records("b", [50.0, 51, 52]), _records("a", [50.0, 51, 52]))
    table = compare_runs(runs)
    assert set(table["verdict"]) == {"not enough data"}
    assert table["change_low"].isna().all()


def test_a_wide_interval_is_not_enough_data(tmp_path: Path) -> None:
    before = _records("b", _noisy(12, 50.0, 40.0, 8), keyed=False)
    after = _records("a", _noisy(12, 50.0, 40.0, 9), keyed=False)
    ttft = _row(compare_runs(_pair(tmp_path, before, after)), "ttft_p50")
    assert ttft["change_low"] < 0 < ttft["change_high"]
    assert ttft["change_pct_high"] - ttft["change_pct_low"] > 40
    assert ttft["verdict"] == "not enough data"


def test_more_errors_in_percentage_points(tmp_path: Path) -> None:
    before = _records("b", [50.0] * 40)
    after = _records("a", [50.0] * 30, errors=10)
    err = _row(compare_runs(_pair(tmp_path, before, after)), "error_rate")
    assert err["base"] == 0 and err["value"] == pytest.approx(0.25)
    assert err["change"] == pytest.approx(25.0)  # percentage points
    assert np.isnan(err["change_pct"])  # no percent of a zero baseline
    assert err["verdict"] == "more errors"


def test_more_tokens_per_second_is_faster(tmp_path: Path) -> None:
    before = _records("b", [50.0] * 20, decode=10.0)
    after = _records("a", [50.0] * 20, decode=8.0)
    table = compare_runs(_pair(tmp_path, before, after))
    assert _row(table, "tokens_per_s_p50")["verdict"] == "faster"
    assert _row(table, "tokens_per_s_p50")["change_pct"] == pytest.approx(25.0)
    assert _row(table, "decode_p50")["verdict"] == "faster"


def test_a_group_missing_from_the_later_run(tmp_path: Path) -> None:
    before = _records("b", [50.0] * 20)
    after = [make_record(run_id="a", provider="other") for _ in range(20)]
    table = compare_runs(_pair(tmp_path, before, after))
    assert set(table["provider"]) == {"local"}
    assert (table["n"] == 0).all() and set(table["verdict"]) == {"not enough data"}


@pytest.mark.parametrize(
    ("text", "metric", "op", "limit", "relative"),
    [
        ("ttft_p50>+10%", "ttft_p50", ">", 10.0, True),
        (" e2e_p90 > 50ms ", "e2e_p90", ">", 50.0, False),
        ("tokens_per_s_p50<-5%", "tokens_per_s_p50", "<", -5.0, True),
        ("tokens_per_s_p50<-3.5tok/s", "tokens_per_s_p50", "<", -3.5, False),
        ("error_rate>+1pp", "error_rate", ">", 1.0, False),
        ("TTFT_P90>+0.5%", "ttft_p90", ">", 0.5, True),
    ],
)
def test_parse_threshold(text: str, metric: str, op: str, limit: float, relative: bool) -> None:
    t = parse_threshold(text)
    assert (t.metric, t.op, t.limit, t.relative) == (metric, op, limit, relative)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("ttft_p50", "is not METRIC>CHANGE"),
        ("ttft_p50>=10%", "is not METRIC>CHANGE"),
        ("ttft_p50>ten%", "is not METRIC>CHANGE"),
        ("ttft_p99>+10%", "unknown metric 'ttft_p99'"),
        ("ttft_p50>+10", "give the change a unit"),
        ("ttft_p50>+10pp", "changes in '%' or 'ms'"),
        ("error_rate>+1%", "percentage points"),
    ],
)
def test_malformed_thresholds_say_what_is_wrong(text: str, says: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(says)):
        parse_threshold(text)


def test_every_gate_metric_has_a_threshold_form() -> None:
    for name, metric in GATE_METRICS.items():
        assert parse_threshold(f"{name}>+1{metric.unit}").metric == name


def test_thresholds_fail_only_on_detected_crossings(tmp_path: Path) -> None:
    base = _noisy(40, 50.0, 3.0, 10)
    runs = _pair(tmp_path, _records("b", base), _records("a", [t + 10.0 for t in base]))
    table = compare_runs(runs)  # ttft +20%, e2e about +4%, decode unchanged
    gate = check_thresholds(
        table, [parse_threshold("ttft_p50>+10%"), parse_threshold("decode_p50>+0%")]
    )
    assert not gate.passed
    assert len(gate.failures) == 1 and gate.failures[0].startswith("ttft_p50>+10%: local")
    assert "+10.0 ms" in gate.failures[0]
    assert check_thresholds(table, [parse_threshold("ttft_p50>+25%")]).passed
    assert check_thresholds(table, [parse_threshold("e2e_p50>+5ms")]).failures
    assert check_thresholds(table, [parse_threshold("e2e_p50>+20ms")]).passed


def test_a_threshold_nothing_could_check_fails(tmp_path: Path) -> None:
    runs = _pair(tmp_path, _records("b", [50.0, 60.0]), _records("a", [90.0, 99.0]))
    gate = check_thresholds(
        compare_runs(runs), [Threshold("ttft_p50>+10%", "ttft_p50", ">", 10, True)]
    )
    assert gate.failures == ["ttft_p50>+10%: no comparison had enough data to check it"]
    assert gate.unchecked and "not enough data" in gate.unchecked[0]


def test_write_comparison_outputs(tmp_path: Path) -> None:
    base = _noisy(30, 50.0, 3.0, 11)
    runs = _pair(tmp_path, _records("b", base), _records("a", [t + 30.0 for t in base]))
    result = write_comparison(runs, thresholds=[parse_threshold("ttft_p50>+10%")])
    assert result.folder == tmp_path / "compare-before-vs-after"
    assert result.gate is not None and not result.gate.passed
    md = (result.folder / "compare.md").read_text()
    assert "❌ Gate failed" in md and "| TTFT p50" in md and "slower" in md
    assert "compare_files/distribution-local-single.png" in md
    assert (result.folder / "compare_files" / "distribution-local-single.png").is_file()
    html = (result.folder / "compare.html").read_text()
    # The same engine as the report: one interactive chart, its Vega inlined once.
    assert html.count('<div class="chart"') == 1 and html.count("vegaEmbed(el, spec") == 1
    assert "<!--labkit:vega-bundle-->" not in html
    assert "<img" not in re.sub(r"<script>.*?</script>", "", html, flags=re.S)
    assert not re.search(r"(src|href)=\"(https?:)?//", html)  # offline: nothing fetched
    csv = pd.read_csv(result.folder / "compare.csv")
    assert list(csv["metric"]) == list(GATE_METRICS)
    # The summary for a CI job: no image, the gate first.
    assert "![" not in result.markdown and result.markdown.startswith("## labkit compare")
    assert result.markdown.index("Gate failed") < result.markdown.index("| provider")


def test_compare_needs_two_runs(tmp_path: Path) -> None:
    before = write_run(tmp_path / "before", _records("b", [50.0]))
    with pytest.raises(RunError):
        compare_runs([before])


def test_repeated_records_are_counted_once_and_said(tmp_path: Path) -> None:
    """A records file with lines repeated (two copies concatenated, no plan keys to pair
    them) counts each record once, and the comparison says so in one line per run."""
    from typer.testing import CliRunner

    from labkit.cli import app
    from labkit.report.load import load_run

    base = _records("b", _noisy(40, 50.0, 3.0, 1), keyed=False)
    after = _records("a", _noisy(40, 50.0, 3.0, 2), keyed=False)
    runs = _pair(tmp_path, base + base[:25], after)
    loaded = load_run(runs[0])
    assert loaded.repeated_records == 25 and len(loaded.records) == len(base)
    assert any("repeat 25 record(s) already read" in p for p in loaded.problems)
    ttft = _row(compare_runs(runs), "ttft_p50")
    assert ttft["n_base"] == 40 and ttft["n"] == 40
    result = write_comparison(runs, tmp_path / "cmp")
    (note,) = result.notes
    assert note.startswith("before: 25 line(s) of records.jsonl repeat a record already read")
    assert "counted once" in (tmp_path / "cmp" / "compare.md").read_text()
    cli = CliRunner().invoke(app, ["compare", *map(str, runs), "--out", str(tmp_path / "c2")])
    assert cli.exit_code == 0, cli.output
    notes = [line for line in cli.stderr.splitlines() if line.startswith("note: ")]
    assert notes == [f"note: {note}"], cli.stderr


def test_paired_noisy_shift_is_found_and_record_order_does_not_matter(tmp_path: Path) -> None:
    """Two runs of one config (the same plan_keys), the second 5 ms slower per request with
    its own noise: the paired interval covers 5 ms and excludes 0; the same records in
    another order give the same intervals (the pairs, not their order, are resampled)."""
    data = np.random.default_rng(11)
    base = list(data.lognormal(np.log(80.0), 0.3, 300))
    after = [t + 5.0 + float(data.normal(0.0, 1.0)) for t in base]
    before_records, after_records = _records("b", base), _records("a", after)
    runs = _pair(tmp_path, before_records, after_records)
    ttft = _row(compare_runs(runs), "ttft_p50")
    assert ttft["paired"] and ttft["verdict"] == "slower"
    assert 0 < ttft["change_low"] < 5.0 < ttft["change_high"]
    order = data.permutation(len(after_records))
    shuffled = [after_records[i] for i in order]
    again = [runs[0], write_run(tmp_path / "shuffled" / "after", shuffled)]  # same label
    other = _row(compare_runs(again), "ttft_p50")
    assert (other["change_low"], other["change_high"]) == (ttft["change_low"], ttft["change_high"])


def test_a_retried_plan_key_keeps_its_last_record(tmp_path: Path) -> None:
    """A plan_key recorded twice (a retry) counts once, with its later record: a slow first
    attempt does not move the paired p50."""
    base = _records("b", [50.0] * 40)
    retried = _records("a", [50.0] * 40)
    slow = make_record(run_id="a", ttft_ms=5000.0)
    slow.plan_key = retried[0].plan_key
    runs = _pair(tmp_path, base, [slow, *retried])
    ttft = _row(compare_runs(runs), "ttft_p50")
    assert ttft["paired"] and ttft["n"] == 40
    assert ttft["change"] == 0.0 and ttft["change_high"] == 0.0
