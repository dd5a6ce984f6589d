"""Statistics and attribution on synthetic data with known answers."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from labkit.report import (
    NOT_DERIVABLE,
    NOT_OBSERVED,
    NOT_REPORTED,
    load_run,
    provider_client_split,
    summarize,
)
from tests.report.report_builders import make_record, write_run

pytestmark = pytest.mark.unit


def _frame(n: int = 100, **cols: object) -> pd.DataFrame:
    base: dict[str, object] = {
        "provider": "a",
        "experiment": "single",
        "model": "m",
        "ok": True,
        "warmup": False,
        "error.kind": None,
    }
    base.update(cols)
    return pd.DataFrame({k: (v if isinstance(v, list) else [v] * n) for k, v in base.items()})


def test_percentiles_are_numpy_linear() -> None:
    df = _frame(**{"client.ttft_ms": [float(i) for i in range(1, 101)]})
    row = summarize(df).iloc[0]
    assert row["ttft_ms.p50"] == pytest.approx(50.5)
    assert row["ttft_ms.p90"] == pytest.approx(90.1)
    assert row["ttft_ms.p99"] == pytest.approx(99.01)
    assert row["ttft_ms.mean"] == pytest.approx(50.5)
    assert (row["ttft_ms.min"], row["ttft_ms.max"]) == (1.0, 100.0)
    assert row["n"] == 100 and row["ttft_ms.n"] == 100
    assert math.isnan(row["decode_ms_per_token.p50"])  # column absent: NaN, not 0


def test_failed_and_warmup_excluded_and_counted(tmp_path: Path) -> None:
    recs = [make_record(ttft_ms=float(i)) for i in range(1, 11)]
    recs += [make_record(ttft_ms=1e6, error_kind="timeout") for _ in range(2)]
    recs += [make_record(ttft_ms=1e6, error_kind="http_status")]
    recs += [make_record(ttft_ms=1e6, warmup=True) for _ in range(2)]
    df = load_run(write_run(tmp_path / "run", recs)).records
    row = summarize(df).iloc[0]
    assert row["records"] == 15
    assert row["warmup_excluded"] == 2
    assert row["errors"] == 3
    assert row["n"] == 10
    assert row["error_rate"] == pytest.approx(3 / 13)
    assert row["error_kinds"] == "http_status: 1, timeout: 2"
    assert row["ttft_ms.max"] == 10.0
    assert row["ttft_ms.p50"] == pytest.approx(5.5)


def test_groups_by_provider_experiment_model_and_keeps_all_failed_groups() -> None:
    df = pd.concat(
        [
            _frame(4, provider="a", **{"client.ttft_ms": [1.0, 2.0, 3.0, 4.0]}),
            _frame(
                2, provider="b", ok=False, **{"error.kind": "connection", "client.ttft_ms": 5.0}
            ),
            _frame(2, provider="a", model="m2", **{"client.ttft_ms": [10.0, 20.0]}),
        ],
        ignore_index=True,
    )
    s = summarize(df).set_index(["provider", "model"])
    assert s.loc[("a", "m"), "ttft_ms.p50"] == 2.5
    assert s.loc[("a", "m2"), "ttft_ms.p50"] == 15.0
    b = s.loc[("b", "m")]
    assert b["n"] == 0 and b["errors"] == 2 and b["error_rate"] == 1.0
    assert math.isnan(b["ttft_ms.p50"])
    assert b["error_kinds"] == "connection: 2"


def test_split_difference_columns_exact(tmp_path: Path) -> None:
    recs = [
        make_record(
            ttft_ms=t,
            prefill_ms=p,
            decode_ms_per_token=d,
            provider_decode_ms_per_token=pd_,
            prepare_ms=pm,
            parse_cpu_ms=pc,
        )
        for t, p, d, pd_, pm, pc in [
            (110.0, 100.0, 12.0, 10.0, 1.0, 0.1),
            (125.0, 100.0, 13.0, 10.0, 2.0, 0.2),
            (190.0, 160.0, 15.0, 11.0, 3.0, 0.3),
        ]
    ]
    recs.append(make_record(ttft_ms=1e6, prefill_ms=0.0, error_kind="protocol"))
    split = provider_client_split(load_run(write_run(tmp_path / "run", recs)).records)
    row = split.set_index("provider").loc["local"]
    assert row["n"] == 3
    assert row["provider.prefill_ms"] == 100.0
    assert row["client.ttft_ms"] == 125.0
    # median of per-request differences (10, 25, 30), not a difference of medians
    assert row["network.ttft_minus_prefill_ms"] == 25.0
    assert row["network.decode_diff_ms_per_token"] == 3.0  # (2, 3, 4)
    assert row["provider.decode_ms_per_token"] == 10.0
    assert row["client.decode_ms_per_token"] == 13.0
    assert row["app.prepare_ms"] == 2.0
    assert row["app.parse_cpu_ms"] == 0.2
    assert row["app.client_path"] == "wire"
    assert row["app.sdk_minus_wire_e2e_ms"] == NOT_OBSERVED
    assert row["provider.processing_ms"] == NOT_REPORTED


def test_split_says_not_reported_for_a_provider_that_reports_nothing(tmp_path: Path) -> None:
    recs = [
        make_record(provider="hosted", provider_kind="anthropic", ttft_ms=float(t))
        for t in (300, 310, 320)
    ]
    split = provider_client_split(load_run(write_run(tmp_path / "run", recs)).records)
    row = split.iloc[0]
    assert row["client.ttft_ms"] == 310.0
    for col in ("provider.prefill_ms", "provider.decode_ms_per_token", "provider.processing_ms"):
        assert row[col] == NOT_REPORTED
    assert row["network.ttft_minus_prefill_ms"] == NOT_DERIVABLE
    assert row["network.decode_diff_ms_per_token"] == NOT_DERIVABLE
    assert not any(isinstance(v, float) and math.isnan(v) for v in row.to_numpy())


def test_split_sdk_minus_wire_is_paired_within_one_experiment() -> None:
    df = _frame(
        6,
        provider="p",
        **{
            "experiment": ["attribution"] * 4 + ["single"] * 2,
            "plan_key": ["a/0", "a/1", "a/0/sdk", "a/1/sdk", "s/0", "s/0/sdk"],
            "client.ttft_ms": 10.0,
            # pairs: 130 − 100 and 150 − 110; the single pair (−900) is another experiment's
            "client.e2e_ms": [100.0, 110.0, 130.0, 150.0, 1000.0, 100.0],
            "app.client_path": ["wire", "wire", "sdk", "sdk", "wire", "sdk"],
        },
    )
    split = provider_client_split(df)
    rows = {(r["experiment"], r["app.client_path"]): r for _, r in split.iterrows()}
    assert set(rows) == {
        ("attribution", "wire"),
        ("attribution", "sdk"),
        ("single", "wire"),
        ("single", "sdk"),
    }
    assert rows[("attribution", "sdk")]["app.sdk_minus_wire_e2e_ms"] == pytest.approx(35.0)
    assert rows[("single", "sdk")]["app.sdk_minus_wire_e2e_ms"] == pytest.approx(-900.0)
    assert rows[("attribution", "wire")]["app.sdk_minus_wire_e2e_ms"] == NOT_OBSERVED
    assert rows[("attribution", "wire")]["n"] == 2
