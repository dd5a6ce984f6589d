"""The series each change is drawn on (`labkit.analysis.change_series`): a changed metric's
median per day over a simulated week, with its interval, from the measured probes only; the
stretch follows the watch's span."""

from __future__ import annotations

from datetime import timedelta

import pandas as pd
import pytest

from labkit.analysis.change_series import change_series, stretch_of
from labkit.analysis.observatory import compute
from labkit.analysis.stats import median
from labkit.figures.observatory import ChangeEvent
from tests.analysis.test_observatory import DAY0, NETWORK_AT, week

pytestmark = pytest.mark.unit


def _shift(provider: str, metric: str = "client.ttft_ms") -> ChangeEvent:
    return ChangeEvent(provider=provider, model="m-1", kind="shift", metric=metric,
                       at=NETWORK_AT, sentence="s")  # fmt: skip


def test_a_day_per_point_over_a_week_with_the_medians_interval() -> None:
    probes = week()
    series = change_series(probes, [_shift("netty")])
    assert [p.start.date() for p in series] == [(DAY0 + timedelta(days=d)).date() for d in range(7)]
    # each point is the median of that day's 24 rounds × 3 probes, as stats.median gives it
    day5 = probes[
        (probes["provider"] == "netty")
        & (pd.to_datetime(probes["round.at"]).dt.day == (DAY0 + timedelta(days=5)).day)
    ]
    assert series[5].median == median(day5["client.ttft_ms"].to_numpy(float))  # fmt: skip
    assert all(p.median.n == 72 and p.median.lo is not None for p in series)
    # the network grew by 60 ms on day 5 at 06:00: day 6's median is ~60 ms above day 4's
    assert series[6].median.value - series[4].median.value == pytest.approx(60, abs=5)


def test_only_measured_probes_and_only_shifts() -> None:
    probes = week(probes=1)
    probes.loc[probes.index[:30], "ok"] = False
    probes.loc[probes.index[30:60], "round.status"] = "throttled"
    fingerprint = _shift("netty").model_copy(update={"kind": "fingerprint", "metric": None})
    assert change_series(probes, [fingerprint]) == []
    series = change_series(probes, [_shift("netty")])
    kept = probes.iloc[60:]
    assert sum(p.median.n for p in series) == int((kept["provider"] == "netty").sum())


def test_the_stretch_follows_the_span() -> None:
    assert stretch_of(pd.Timedelta(days=7)) == "1D"
    assert stretch_of(pd.Timedelta(hours=12)) == "1h"
    assert stretch_of(pd.Timedelta(hours=1)) == "10min"


def test_the_analysis_changes_each_get_their_series() -> None:
    probes = week()
    figs = compute(probes, store="x", computed_at=DAY0 + timedelta(days=7))
    series = change_series(probes, figs.changes)
    shifted = {(c.provider, c.metric) for c in figs.changes if c.kind == "shift"}
    assert {(p.provider, p.metric) for p in series} == shifted
    assert len(series) == 7 * len(shifted)
