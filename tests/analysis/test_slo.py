"""SLOs: the config keys, the per-request test, the per-set verdict, goodput, and the
answers that carry them (any experiment; load per level)."""

from __future__ import annotations

from typing import Any

import pytest

from labkit.analysis.levels import Level, level_figures
from labkit.analysis.slo import judge, parse_slos
from labkit.config import parse_config
from labkit.errors import ConfigError
from labkit.experiments.load import LoadExperiment, LoadSettings
from labkit.experiments.single import SingleExperiment, SingleSettings
from labkit.figures import LoadFigures, SingleFigures, SLOReport
from labkit.records import RequestRecord
from tests.support.records import make_record

pytestmark = pytest.mark.unit

NS = 1_000_000_000


def _config(experiment: dict[str, Any]) -> Any:
    return parse_config(
        {
            "name": "slo",
            "providers": [{"id": "f", "kind": "fake"}],
            "experiments": [experiment],
        }
    )


def _at(record: RequestRecord, start_s: float, e2e_ms: float = 100.0) -> RequestRecord:
    client = record.client.model_copy(update={"e2e_ms": e2e_ms})
    return record.model_copy(update={"t_start_mono_ns": int(start_s * NS), "client": client})


def test_slo_keys_are_accepted_on_any_experiment() -> None:
    for kind in ("single", "prefill_decode", "determinism", "token_ratio", "attribution"):
        cfg = _config({"kind": kind, "slo": {"ttft_ms_p90": 500, "e2e_ms_p99.9": 2000}})
        assert cfg.experiments[0].slo == {"ttft_ms_p90": 500.0, "e2e_ms_p99.9": 2000.0}
    cfg = _config({"kind": "load", "rate": [1], "slo": {"decode_ms_per_token_p50": 40}})
    (slo,) = cfg.experiments[0].slos()
    assert (slo.metric, slo.percentile, slo.bound_ms) == ("decode_ms_per_token", 50.0, 40.0)


@pytest.mark.parametrize(
    ("slo", "message"),
    [
        ({"ttft_p90": 500}, "expected <metric>_p<percentile>"),
        ({"ttft_ms": 500}, "expected <metric>_p<percentile>"),
        ({"tokens_per_s_p90": 5}, "with a metric of ttft_ms"),
        ({"ttft_ms_p0": 500}, "above 0 and below 100"),
        ({"ttft_ms_p90": 0}, "greater than 0"),
    ],
)
def test_bad_slo_keys_get_a_clear_config_error(slo: dict[str, float], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        _config({"kind": "single", "slo": slo})


def test_a_request_meets_an_slo_when_it_succeeded_within_the_bound() -> None:
    (ttft,) = parse_slos({"ttft_ms_p90": 200})
    (decode,) = parse_slos({"decode_ms_per_token_p90": 20})
    within = make_record(experiment="e", ttft_ms=200.0, decode_ms_per_token=None)
    assert ttft.met_by(within)
    assert not ttft.met_by(make_record(experiment="e", ttft_ms=200.1))
    assert not ttft.met_by(make_record(experiment="e", ttft_ms=10.0, error_kind="http_status"))
    # A reply with one token has no decode speed: it does not miss a decode SLO...
    assert decode.met_by(within)
    # ... but a successful stream without a first token misses a TTFT SLO.
    assert not ttft.met_by(make_record(experiment="e", ttft_ms=None))


def test_goodput_counts_requests_meeting_every_slo_and_the_verdict_is_a_share() -> None:
    slos = parse_slos({"ttft_ms_p90": 200, "decode_ms_per_token_p50": 20})
    # Ten requests started 1 s apart, 100 ms each: a span of 9.1 s.
    ttfts = [100.0, 100.0, 300.0] + [100.0] * 6 + [150.0]
    decodes = [10.0] * 5 + [30.0] * 5
    records = [
        _at(make_record(experiment="e", ttft_ms=t, decode_ms_per_token=d), i)
        for i, (t, d) in enumerate(zip(ttfts, decodes, strict=True))
    ]
    records.append(make_record(experiment="e", warmup=True, ttft_ms=9999.0))  # never judged
    report = judge(slos, records)
    assert report is not None and report.requests == 10
    ttft, decode = report.checks
    # 90 % within a p90 bound, half within a p50 one: ten requests cannot tell either way.
    assert ttft.share is not None and decode.share is not None
    assert (ttft.met, ttft.share.value, ttft.verdict) == (9, 0.9, "undecided")
    assert (decode.met, decode.verdict) == (5, "undecided")
    assert ttft.observed is not None and ttft.observed.q == 0.9 and ttft.observed.n == 10
    assert report.good == 4  # 0-4 meet the decode SLO, and of those 2 misses the TTFT one
    assert report.verdict == "undecided" and not report.passed
    assert report.goodput_rps == pytest.approx(4 / 9.1)
    assert report.good_share is not None and report.good_share.lo is not None
    assert report.goodput_low_rps == pytest.approx(report.good_share.lo * 10 / 9.1)
    assert report.goodput_low_rps < report.goodput_rps < (report.goodput_high_rps or 0)
    # A failure counts as missing every SLO.
    failed = _at(make_record(experiment="e", ttft_ms=1.0, error_kind="http_status"), 10)
    worse = judge(slos, [*records, failed])
    assert worse is not None and worse.checks[0].share is not None
    assert worse.checks[0].share.value == pytest.approx(9 / 11)
    assert judge([], records) is None


def test_a_verdict_needs_the_share_s_interval_on_one_side_of_the_percentile() -> None:
    slos = parse_slos({"ttft_ms_p90": 200})
    # 40 of 40 within: the share's lower bound (0.912) clears 90 %; 35 of 36 would not.
    within = [_at(make_record(experiment="e", ttft_ms=100.0), i / 10) for i in range(40)]
    held = judge(slos, within)
    assert held is not None and held.checks[0].verdict == "pass" and held.passed
    slow = [_at(make_record(experiment="e", ttft_ms=300.0), 4 + i / 10) for i in range(15)]
    missed = judge(slos, within[:25] + slow)
    assert missed is not None and missed.checks[0].verdict == "fail"
    assert missed.verdict == "fail" and not missed.passed
    unsure = judge(slos, within[:35] + slow[:1])
    assert unsure is not None and unsure.verdict == "undecided"


def test_a_lab_json_from_before_verdicts_reads_its_point_verdict() -> None:
    old = {
        "checks": [
            {
                "name": "ttft_ms_p90",
                "metric": "ttft_ms",
                "percentile": 90.0,
                "bound_ms": 200.0,
                "requests": 10,
                "met": 9,
                "fraction": 0.9,
                "observed_ms": 180.0,
                "passed": True,
            }
        ],
        "requests": 10,
        "good": 9,
        "goodput_rps": 1.0,
        "passed": True,
    }
    report = SLOReport.model_validate(old)
    assert report.verdict == "pass" and report.checks[0].verdict == "pass"
    assert report.checks[0].share is None and report.checks[0].observed is None


def test_load_levels_carry_goodput_beside_throughput_and_the_answer_says_it() -> None:
    settings = LoadSettings(rate=[2.0], slo={"ttft_ms_p90": 150})
    exp = LoadExperiment(settings)
    records = [
        _at(make_record(experiment="load", ttft_ms=100.0 + 20 * i, tags={"level": "r2"}), i / 2)
        for i in range(6)
    ]
    row = level_figures(Level(0, "rate", 2.0), records, "constant", slos=settings.slos())
    assert row.slo is not None and row.slo.good == 3 and row.slo.verdict == "fail"
    assert row.completed_rps is not None and row.slo.goodput_rps is not None
    assert row.slo.goodput_rps == pytest.approx(row.completed_rps / 2)
    answer = exp.judged("p", "m", records)
    assert isinstance(answer.figures, LoadFigures)
    assert answer.figures.slo is None  # judged per level, not over the levels together
    assert answer.figures.levels[0].slo == row.slo
    assert "ttft_ms_p90 ≤ 150 ms missed: 3 of 6 within it (50%, 95% CI 12–88%)" in answer.answer
    assert "3 of 6 requests met every SLO" in answer.answer


def test_other_experiments_get_the_slos_over_their_measured_requests() -> None:
    exp = SingleExperiment(SingleSettings(slo={"ttft_ms_p90": 150}))
    records = [_at(make_record(experiment="single", ttft_ms=100.0), i) for i in range(3)]
    answer = exp.judged("p", "m", records)
    assert isinstance(answer.figures, SingleFigures) and answer.figures.slo is not None
    assert answer.figures.slo.verdict == "undecided" and answer.figures.slo.good == 3
    assert answer.answer.endswith(
        "3 of 3 requests met every SLO (goodput 1.43 req/s, 95% CI 0.42–1.43)."
    )
    plain = SingleExperiment(SingleSettings()).judged("p", "m", records)
    assert plain.figures is not None and plain.figures.slo is None
    assert "SLO" not in plain.answer
