"""Request statistics and the TTFT split on synthetic records with known answers."""

from __future__ import annotations

from pathlib import Path

import pytest

from labkit.analysis.requests import request_stats
from labkit.report import NOT_DERIVABLE, NOT_REPORTED, load_run, run_stats
from labkit.report.build import build_blocks
from labkit.report.render import Table
from tests.report.report_builders import write_run
from tests.support.records import make_record

pytestmark = pytest.mark.unit


def test_percentiles_are_numpy_linear_with_their_intervals() -> None:
    (s,) = request_stats([make_record(ttft_ms=float(i)) for i in range(1, 101)])
    assert s.ttft_ms.p50.value == pytest.approx(50.5)
    assert s.ttft_ms.p90.value == pytest.approx(90.1)
    assert s.ttft_ms.p99.value == pytest.approx(99.01)
    assert s.n == 100 and s.ttft_ms.p50.n == 100
    lo, hi = s.ttft_ms.p50.lo, s.ttft_ms.p50.hi
    assert lo is not None and hi is not None and lo < 50.5 < hi
    assert s.ttft_ms.p99.lo is None  # 100 requests cannot bound a p99


def test_failed_and_warmup_excluded_and_counted() -> None:
    recs = [make_record(ttft_ms=float(i)) for i in range(1, 11)]
    recs += [make_record(ttft_ms=1e6, error_kind="timeout") for _ in range(2)]
    recs += [make_record(ttft_ms=1e6, error_kind="http_status")]
    recs += [make_record(ttft_ms=1e6, warmup=True) for _ in range(2)]
    (s,) = request_stats(recs)
    assert (s.records, s.warmup_excluded, s.errors, s.n) == (15, 2, 3, 10)
    assert s.error_kinds == {"http_status": 1, "timeout": 2}
    assert s.ttft_ms.p50.value == pytest.approx(5.5)


def test_groups_by_provider_experiment_model_and_path_and_keeps_all_failed_groups() -> None:
    recs = [make_record(provider="a", ttft_ms=t) for t in (1.0, 2.0, 3.0, 4.0)]
    recs += [make_record(provider="b", error_kind="connection") for _ in range(2)]
    recs += [make_record(provider="a", model="m2", ttft_ms=t) for t in (10.0, 20.0)]
    recs += [make_record(provider="a", client_path="sdk", ttft_ms=7.0)]
    s = {(g.provider, g.model, g.client_path): g for g in request_stats(recs)}
    assert s[("a", "m", "wire")].ttft_ms.p50.value == 2.5
    assert s[("a", "m2", "wire")].ttft_ms.p50.value == 15.0
    assert s[("a", "m", "sdk")].n == 1
    b = s[("b", "m", "wire")]
    assert (b.n, b.errors, b.ttft_ms.p50.value) == (0, 2, None)
    assert b.error_kinds == {"connection": 2}


def test_split_is_the_mean_ttft_in_parts_that_add_up(tmp_path: Path) -> None:
    recs = [
        make_record(
            ttft_ms=t, prefill_ms=p, decode_ms_per_token=d, provider_decode_ms_per_token=pd_
        )
        for t, p, d, pd_ in [
            (110.0, 100.0, 12.0, 10.0),
            (125.0, 100.0, 13.0, 10.0),
            (190.0, 160.0, 15.0, 11.0),
        ]
    ]
    for r in recs:  # a managed server used within its slots: no queue by construction
        r.tags.update(server_slots=1, in_flight_max=1)
    recs.append(make_record(ttft_ms=1e6, prefill_ms=0.0, error_kind="protocol"))
    (s,) = run_stats(None, write_run(tmp_path / "run", recs))
    split = s.ttft_split
    # the failed request stays out; means over the three: TTFT 425/3, prefill 360/3
    assert split.ttft_ms is not None and split.ttft_ms.value == pytest.approx(425 / 3)
    assert split.provider_prefill_ms is not None
    assert split.provider_prefill_ms.value == pytest.approx(120.0)
    assert split.provider_queue_ms is not None and split.provider_queue_ms.value == 0.0
    # network and front end is the rest, so the parts add up: (10 + 25 + 30) / 3
    assert split.network_front_end_ms is not None
    assert split.network_front_end_ms.value == pytest.approx(65 / 3)
    assert s.provider_prefill_ms.value == 100.0  # the prefill's median, for the summary
    assert s.decode_gap_ms_per_token.value == 3.0  # (2, 3, 4)
    assert s.provider_decode_ms_per_token.value == 10.0
    assert s.decode_gap_client_bound is None


def test_split_table_says_not_reported_for_a_provider_that_reports_nothing(
    tmp_path: Path,
) -> None:
    recs = [
        make_record(provider="hosted", provider_kind="anthropic", ttft_ms=float(t))
        for t in (300, 310, 320)
    ]
    _, blocks, stats = build_blocks(load_run(write_run(tmp_path / "run", recs)))
    assert stats[0].ttft_split.provider_prefill_ms is None
    (table,) = [b for b in blocks if isinstance(b, Table) and "+ network + front end" in b.columns]
    row = dict(zip(table.columns, table.rows[0], strict=True))
    assert row["client TTFT (mean)"].startswith("310")
    assert row["+ provider queue"] == row["+ provider prefill"] == NOT_REPORTED
    assert row["+ network + front end"].endswith("(with the provider's)")
    assert row["client − provider"] == NOT_DERIVABLE


def test_a_client_faster_than_the_server_is_marked_client_bound() -> None:
    recs = [
        make_record(decode_ms_per_token=8.0, provider_decode_ms_per_token=10.0) for _ in range(3)
    ]
    (s,) = request_stats(recs)
    assert s.decode_gap_ms_per_token.value == -2.0
    assert s.decode_gap_client_bound is not None and "late" in s.decode_gap_client_bound


def test_answers_in_one_event_leave_decode_empty_everywhere_it_is_read(tmp_path: Path) -> None:
    # Each answer came in one output event: decode is null (not 0.0) with its reason, and
    # the statistics, the split, the SLO verdict and the report read null as "no value".
    from labkit.analysis.slo import parse_slos

    recs = [
        make_record(
            ttft_ms=100.0 + t,
            decode_ms_per_token=None,
            n_events=1,
            provider_decode_ms_per_token=9.0,
            decode_null_reason="one_output_event",
        )
        for t in range(3)
    ]
    assert all(r.client.decode_ms_per_token is None for r in recs)
    (s,) = request_stats(recs)
    assert s.decode_ms_per_token.p50.value is None and s.n == 3
    assert s.output_tokens_per_s.p50.value is None
    (run,) = run_stats(None, write_run(tmp_path / "run", recs))
    assert run.decode_gap_ms_per_token.value is None
    (slo,) = parse_slos({"decode_ms_per_token_p90": 50.0})
    assert all(slo.met_by(r) for r in recs)  # undefined for the request: not failed
    build_blocks(load_run(write_run(tmp_path / "run2", recs)))
