"""The observatory's analysis (`labkit.analysis.observatory`) on probes frames built from a
known plan: three providers over seven simulated days, one round an hour, three probes each.

- `queuey` reports its queue and prefill (Groq's shape): a +300 ms queue 17:00–19:00 UTC
  every day, and its prefill doubles on day 3 at 12:00;
- `netty` reports both: its network and front end grow by 60 ms on day 5 at 06:00, and its
  system_fingerprint changes on day 4 at 09:00;
- `steady` reports its prefill only (llama.cpp's shape) and changes nothing.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pandas as pd
import pytest

from labkit.analysis.observatory import (
    Detection,
    change_sentence,
    changes,
    compute,
    probe_times,
    rollups,
    splits,
)
from labkit.figures.observatory import ObservatoryFigures
from labkit.figures.stats import Estimate

DAY0 = datetime(2026, 3, 2, tzinfo=UTC)  # a Monday
PREFILL_AT = DAY0 + timedelta(days=3, hours=12)
NETWORK_AT = DAY0 + timedelta(days=5, hours=6)
FINGERPRINT_AT = DAY0 + timedelta(days=4, hours=9)
BUMP_MS = 300.0


def _probe(provider: str, at: datetime, rng: np.random.Generator, index: int) -> dict[str, Any]:
    queue = 5.0 + rng.normal(0, 1.0) ** 2
    if provider == "queuey" and 17 <= at.hour < 19:
        queue += BUMP_MS
    prefill = 80.0 * (2 if provider == "queuey" and at >= PREFILL_AT else 1) + rng.normal(0, 3)
    network = 30.0 + (60 if provider == "netty" and at >= NETWORK_AT else 0) + abs(rng.normal(0, 4))
    ttft = queue + prefill + network
    row: dict[str, Any] = {
        "provider": provider,
        "model": "m-1",
        "ok": True,
        "warmup": False,
        "started_at": at.isoformat(),
        "round.at": at,
        "round.watch_id": "w",
        "round.index": index,
        "round.status": "ok",
        "client.ttft_ms": ttft,
        "client.decode_ms_per_token": 10.0 + rng.normal(0, 0.3),
        "client.e2e_ms": ttft + 150,
        "provider_timings.prefill_ms": prefill,
        "provider_timings.queue_ms": np.nan if provider == "steady" else queue,
        "server_build": "b4321" if provider == "steady" else None,
        "system_fingerprint": None,
    }
    if provider == "netty":
        row["system_fingerprint"] = "fp_b" if at >= FINGERPRINT_AT else "fp_a"
    return row


def week(seed: int = 0, probes: int = 3) -> pd.DataFrame:
    """The plan above as a store's probes frame."""
    rng = np.random.default_rng(seed)
    rows = []
    for index in range(7 * 24):
        at = DAY0 + timedelta(hours=index, minutes=7)
        for provider in ("queuey", "netty", "steady"):
            rows += [_probe(provider, at, rng, index) for _ in range(probes)]
    return pd.DataFrame(rows)


@pytest.fixture(scope="module")
def figures() -> ObservatoryFigures:
    return compute(week(), store="week.duckdb", computed_at=DAY0 + timedelta(days=7))


def _inside(t: datetime, lo: datetime | None, hi: datetime | None) -> bool:
    return lo is not None and hi is not None and lo <= t <= hi


@pytest.mark.unit
def test_every_planted_shift_is_found_named_and_placed(figures: ObservatoryFigures) -> None:
    shifts = [c for c in figures.changes if c.kind == "shift"]
    by_provider = {c.provider: c for c in shifts}
    assert sorted(by_provider) == ["netty", "queuey"], [c.sentence for c in shifts]
    assert len(shifts) == 2, [c.sentence for c in shifts]  # the daily bump is no change
    prefill = by_provider["queuey"]
    assert (prefill.metric, prefill.component) == ("client.ttft_ms", "processing")
    assert _inside(PREFILL_AT, prefill.at_lo, prefill.at_hi)
    assert prefill.delta is not None and prefill.delta.lo is not None
    assert prefill.delta.lo <= 80 <= (prefill.delta.hi or 0)
    assert prefill.q_value is not None and prefill.q_value < 0.05
    network = by_provider["netty"]
    assert network.component == "network_frontend"
    assert _inside(NETWORK_AT, network.at_lo, network.at_hi)
    assert network.delta is not None and network.delta.lo is not None
    assert network.delta.lo <= 60 <= (network.delta.hi or 0)
    assert "the network and front end, not" in network.sentence
    assert re.match(
        r"TTFT p50 on netty rose \d+\.\d ms \(95% CI .*\) since Sat 07 Mar", network.sentence
    )


@pytest.mark.unit
def test_a_new_fingerprint_is_an_event(figures: ObservatoryFigures) -> None:
    (event,) = [c for c in figures.changes if c.kind != "shift"]
    assert (event.provider, event.kind, event.old_value, event.new_value) == (
        "netty",
        "fingerprint",
        "fp_a",
        "fp_b",
    )
    assert _inside(FINGERPRINT_AT, event.at_lo, event.at_hi)
    assert "fp_a to fp_b" in event.sentence


@pytest.mark.unit
def test_the_hour_of_day_curve_holds_the_daily_queue(figures: ObservatoryFigures) -> None:
    queue = {
        c.hour: c
        for c in figures.rollups
        if (c.provider, c.metric, c.window)
        == ("queuey", "provider_timings.queue_ms", "hour_of_day")
    }
    assert sorted(h for h in queue if h is not None) == list(range(24))
    for hour, cell in queue.items():
        true = 5.0 + (BUMP_MS if hour in (17, 18) else 0.0)
        assert cell.median.lo is not None and cell.median.hi is not None
        assert cell.median.lo - 2 <= true <= cell.median.hi + 2, hour  # noise: + N(0,1)²
        assert cell.median.n == 21 and cell.p90.n == 21
    windows = {(c.window, c.provider) for c in figures.rollups if c.metric == "client.ttft_ms"}
    assert {("72h", "steady"), ("14d", "steady")} <= windows
    assert not any(
        c.provider == "steady" and c.metric == "provider_timings.queue_ms" for c in figures.rollups
    )
    assert figures.rounds == 168 and figures.first_round == DAY0 + timedelta(minutes=7)


@pytest.mark.unit
def test_the_split_adds_up_and_says_what_is_not_separable(figures: ObservatoryFigures) -> None:
    cells = {(c.provider, c.window): c for c in figures.splits if c.window != "hour_of_day"}
    whole = cells[("netty", "72h")]
    assert whole.separable == ["total", "network_frontend", "queue", "processing", "decode"]
    parts = [whole.network_frontend_ms, whole.queue_ms, whole.processing_ms]
    assert all(p is not None for p in parts)
    assert sum(p.value for p in parts if p is not None) == pytest.approx(whole.total_ms.value)
    # the last 72 hours: 41 of them after the +60 ms step, over a base of about 33 ms
    assert whole.network_frontend_ms is not None
    assert 33 + 60 * 41 / 72 - 5 < whole.network_frontend_ms.value < 33 + 60 * 41 / 72 + 5
    steady = cells[("steady", "14d")]
    assert steady.queue_ms is None and steady.network_frontend_ms is None
    assert steady.processing_ms is not None and steady.separable == [
        "total",
        "processing",
        "decode",
    ]
    bump = next(
        c for c in figures.splits if (c.provider, c.window, c.hour) == ("queuey", "hour_of_day", 17)
    )
    assert bump.queue_ms is not None and bump.queue_ms.value > BUMP_MS


@pytest.mark.unit
def test_a_provider_that_does_not_say_its_parts_gets_an_unnamed_shift() -> None:
    frame = week(seed=1)
    frame = frame[frame["provider"] == "netty"].copy()
    frame["provider_timings.queue_ms"] = np.nan
    (event,) = [c for c in changes(frame) if c.kind == "shift"]
    assert event.component == "total"
    assert "not separable (the provider reports no queue time)" in event.sentence


@pytest.mark.unit
def test_no_change_below_the_smallest_shift_worth_stating() -> None:
    frame = week(seed=2)
    frame = frame[frame["provider"] == "netty"]
    assert [c.kind for c in changes(frame, Detection(min_shift_ms=100))] == ["fingerprint"]


@pytest.mark.unit
def test_probes_that_did_not_measure_are_left_out() -> None:
    frame = week(seed=3, probes=1)
    frame.loc[frame.index[:30], "round.status"] = "throttled"
    frame.loc[frame.index[30:40], "ok"] = False
    cells = [c for c in rollups(frame, ["client.ttft_ms"]) if c.window == "14d"]
    assert sum(c.median.n for c in cells) == len(frame) - 40
    assert splits(frame.iloc[:0]) == [] and changes(frame.iloc[:0]) == []
    empty = compute(frame.iloc[:0], computed_at=DAY0)
    assert (empty.rounds, empty.first_round, empty.rollups) == (0, None, [])


@pytest.mark.unit
def test_the_time_is_the_round_else_the_start() -> None:
    frame = pd.DataFrame(
        {"round.at": [None, DAY0], "started_at": ["2026-03-01T00:00:00+00:00", "x"]}
    )
    assert list(probe_times(frame)) == [
        np.datetime64("2026-03-01T00:00:00"),
        np.datetime64("2026-03-02T00:00:00"),
    ]


@pytest.mark.unit
def test_a_fall_is_worded_with_its_interval_in_order() -> None:
    text = change_sentence(
        "p",
        "queue",
        "The provider's queue p50",
        Estimate(value=-50, lo=-60, hi=-40),
        DAY0,
        None,
        None,
    )
    assert text == (
        "The provider's queue p50 on p fell 50.0 ms (95% CI 40.0–60.0) since Mon 02 Mar 00:00 UTC."
    )


@pytest.mark.unit
def test_the_shift_test_holds_its_level_when_nothing_changes() -> None:
    """Seven days of a daily +300 ms bump and noise with a heavy tail, no step: the test's
    p-value falls below 0.05 in about 5 % of weeks (the daily pattern is no change)."""
    from labkit.analysis.observatory import _shift

    rng = np.random.default_rng(7)
    start = np.datetime64("2026-03-02T00:07")
    times = np.repeat(start + np.arange(168) * np.timedelta64(1, "h"), 3)
    hours = times.astype("datetime64[h]").astype(np.int64) % 24
    bump = np.where((hours >= 17) & (hours < 19), BUMP_MS, 0.0)
    ps = []
    for _ in range(200):
        tail = rng.exponential(30, times.size) * (rng.random(times.size) < 0.1)
        values = 100 + bump + rng.normal(0, 5, times.size) + tail
        shift = _shift("p", "m", "total", times, values, Detection(resamples=99))
        assert shift is not None
        ps.append(shift.p)
    assert np.mean(np.array(ps) < 0.05) <= 0.1


@pytest.mark.unit
def test_a_new_build_is_an_event_and_a_build_seen_before_is_not() -> None:
    frame = week(seed=4, probes=1)
    frame = frame[frame["provider"] == "steady"].copy()
    index = frame["round.index"].to_numpy()
    frame["server_build"] = np.where(index < 100, "b1", np.where(index < 120, "b2", "b1"))
    (event,) = changes(frame)
    assert (event.kind, event.old_value, event.new_value) == ("build", "b1", "b2")
    assert event.at == DAY0 + timedelta(hours=100, minutes=7)
    assert event.at_lo == DAY0 + timedelta(hours=99, minutes=7)
    assert "server build changed from b1 to b2" in event.sentence
