"""The figures a run computes after its level are the same whichever way they are computed.

The runner's figures after a level (`labkit.runner.Runner.analyze`: `request_stats` and the
load experiment's `level_figures`) read fields off the records in memory through
`labkit.analysis.columns.Columns`. These tests pin them: the load experiment's answer and
the request statistics of a varied load run are byte-identical to those the code before
issue 47's after-level work computed (a digest taken from it), and each faster path equals
the per-record one it replaced.
"""

from __future__ import annotations

import hashlib
import json
import math

import numpy as np
import pytest

from labkit.analysis import columns as columns_module
from labkit.analysis import selfcheck
from labkit.analysis.columns import Columns
from labkit.analysis.levels import Level, level_figures
from labkit.analysis.requests import FIELDS, request_stats
from labkit.analysis.selfcheck import lags_once, level_lag, pooled_p99, record_lateness
from labkit.analysis.split import ttft_beyond_prefill_of
from labkit.analysis.stats import p_of
from labkit.experiments.load import LoadExperiment, LoadSettings
from labkit.records import LabResults, RequestRecord
from tests.support.records import make_record

pytestmark = pytest.mark.unit

#: sha256 of `_figures_json(_load_run())` as the code before the change computed it
#: (main at 3da9333): the answer text, every level's figures and the request statistics.
BEFORE_DIGEST = "7351c57ffb4756373a28835c56d66024e6955ff1359d94f30f98bf09cdcf167a"


def _load_run() -> list[RequestRecord]:
    """Two levels of a load run with every kind of field the figures read: errors,
    warm-ups, prefill or the server's TTFT or neither, per-event stamp lateness (some
    records without), cached tokens, queue times, workers' tags."""
    recs: list[RequestRecord] = []
    for i in range(90):
        level = ("c2", "c8")[i % 2]
        r = make_record(
            provider="s",
            experiment="load",
            ttft_ms=50.0 + (i * 7) % 23 + i / 7,
            decode_ms_per_token=2.0 + (i % 5) / 10,
            output_tokens=10 + i % 4,
            prefill_ms=20.0 + i / 3 if i % 3 == 0 else None,
            cached_tokens=(i * 5) % 60 if i % 4 == 0 else None,
            error_kind="http_status" if i % 13 == 6 else None,
            warmup=i < 2,
            tags={"level": level, "workers": 1},
        )
        r.t_start_mono_ns = 1_000_000_000 + i * 3_000_000
        if i % 3 == 1:
            r.provider_timings.server_ttft_ms = 30.0 + i / 5
        r.provider_timings.queue_ms = 0.5 * (i % 6) if i % 2 else None
        r.client.queue_ms = 0.25 * (i % 7)
        if i % 5 != 4:  # some records carry no estimate
            n = len(r.client.event_offsets_ms)
            r.client.stamp_lateness_ms = [0.01 * ((i * k) % 9) for k in range(n)]
            r.client.stamp_lateness_ms_p50 = float(np.median(r.client.stamp_lateness_ms))
            r.client.stamp_lateness_ms_p99 = max(r.client.stamp_lateness_ms)
            r.client.stamp_lateness_ms_max = max(r.client.stamp_lateness_ms)
            r.client.ttft_lateness_ms = 0.02 * (i % 4)
        r.client.loop_lag_ms = 0.03 * (i % 11)
        r.client.itl_ms_p50 = 2.0 + (i % 3) / 10
        r.app.cpu_ms = 1.0 + i % 9
        r.client.send_ms = 0.05 + (i % 4) / 100
        recs.append(r)
    return recs


def _figures_json(records: list[RequestRecord]) -> str:
    """What lab.json holds of these records: the load experiment's answer and the request
    statistics, as the runner writes them."""
    exp = LoadExperiment(LoadSettings(concurrency=[2, 8], requests=44), 0)
    exp.all_records = {"s": records}
    exp.server_metrics["s"] = []
    exp.host_clocks = []
    answer = exp.judged("s", "m", [r for r in records if r.experiment == exp.name])
    lab = LabResults(run_id="run-1", answers=[answer], requests=request_stats(records))
    return lab.model_dump_json(indent=2)


def test_the_load_answer_and_request_statistics_are_those_computed_before() -> None:
    text = _figures_json(_load_run())
    assert json.loads(text)["answers"][0]["status"] == "ok"
    assert hashlib.sha256(text.encode()).hexdigest() == BEFORE_DIGEST


def test_one_analysis_computes_each_groups_lag_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Within `lags_once` (the runner's analysis) the load table's levels and the request
    table's client-bound check share each group's stamp self-check summary: the same bytes
    as before, no group's computed twice; outside it, each asks anew."""
    computed: list[tuple[str, ...]] = []
    compute = selfcheck._level_lag_of

    def counted(cols: Columns) -> selfcheck.LagSummary:
        computed.append(tuple(cols.text("record_id").tolist()))
        return compute(cols)

    monkeypatch.setattr(selfcheck, "_level_lag_of", counted)
    recs = _load_run()
    plain = _figures_json(recs)
    asked = list(computed)
    assert len(set(asked)) < len(asked)  # the same groups asked twice without it
    computed.clear()
    with lags_once():
        once = _figures_json(recs)
    assert hashlib.sha256(once.encode()).hexdigest() == BEFORE_DIGEST
    assert once == plain
    assert sorted(computed) == sorted(set(asked))  # each group once
    computed.clear()
    level_lag(recs[2:40])  # after the block: no memory of it
    level_lag(recs[2:40])
    assert len(computed) == 2


def _slow_columns(records: list[RequestRecord]) -> Columns:
    """Columns read off the records one by one, as before (the reference)."""
    recs = list(records)

    def source(name: str) -> np.ndarray:
        get = columns_module._record_getter(name)
        out = np.empty(len(recs), dtype=object)
        for i, r in enumerate(recs):
            out[i] = get(r)
        return out

    return Columns(len(recs), source)


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal item by item, NaN equal to NaN, and of the same types."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.dtype.kind == "f":
        return bool(np.array_equal(a, b, equal_nan=True))
    return all(type(x) is type(y) and (x == y or x is y) for x, y in zip(a, b, strict=True))


@pytest.mark.parametrize("field", [*FIELDS, "error.message", "tags.missing", "nothing.here"])
def test_columns_read_in_c_equal_those_read_record_by_record(field: str) -> None:
    recs = _load_run()
    recs[3].tags["level"] = 8  # a tag of another type
    recs[5].provider_timings.queue_ms = 2  # an int where floats are
    fast, slow = Columns.of_records(recs), _slow_columns(recs)
    assert _same(fast.objects(field), slow.objects(field))
    assert _same(fast.num(field), slow.num(field))
    assert _same(fast.text(field), slow.text(field))
    assert _same(fast.flag(field), slow.flag(field))


def test_numbers_read_at_once_are_those_read_one_by_one() -> None:
    raw = np.array([1.5, None, 3, True, "7", math.nan, -0.0, 10**20], dtype=object)
    plain = np.array([2.5, None, 4, None, -1.25], dtype=object)
    for values in (raw, plain):
        expected = np.array([columns_module._number(v) for v in values], dtype=float)
        got = columns_module._numbers(values)
        assert np.array_equal(got, expected, equal_nan=True)
        assert np.signbit(got).tolist() == np.signbit(expected).tolist()


def test_the_level_figures_median_beyond_prefill_is_the_per_record_one() -> None:
    recs = [r for r in _load_run() if r.tags["level"] == "c8"]
    ok = [r for r in recs if r.error is None and not r.warmup]
    row = level_figures(Level(1, "concurrency", 8), recs)
    assert row.ttft_beyond_prefill_ms_p50 is not None
    assert row.ttft_beyond_prefill_ms_p50 == p_of(ok, ttft_beyond_prefill_of, 50)
    unreported = [
        r
        for r in recs
        if r.provider_timings.prefill_ms is None and r.provider_timings.server_ttft_ms is None
    ]
    nothing = level_figures(Level(1, "concurrency", 8), unreported)
    assert nothing.ttft_beyond_prefill_ms_p50 is None


def test_the_pooled_p99_sorted_at_once_is_that_of_the_sorted_values() -> None:
    lateness = [x for r in _load_run() if (x := record_lateness(r)) is not None]
    assert all(x.values for x in lateness)
    pooled = sorted(v for x in lateness for v in x.values or ())
    from labkit.timing import percentile

    got = pooled_p99(lateness)
    assert type(got) is float
    assert got == percentile(pooled, 100.0 * (1.0 - 0.01))
    assert level_lag(_load_run()).late_p99 == got
