"""Realistic `ObservatoryFigures` for the dashboard's tests: three providers watched for seven
simulated days (hour-of-day curves, the 72 h and 14 d windows), one that splits its time in
full, one that gives only its queue, one that gives nothing ("not separable"); a queue that
rose on day 4 at 14:00, a fingerprint that changed, costs for two, and three same-model
verdicts (one differs)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from labkit.figures.observatory import (
    ChangeEvent,
    CostFigures,
    ObservatoryFigures,
    RollupCell,
    SameModelVerdict,
    SeriesPoint,
    SplitCell,
)
from labkit.figures.stats import Estimate, Proportion, Quantile

__all__ = ["CHANGE_AT", "PROVIDERS", "START", "observatory_figures"]

START = datetime(2026, 11, 2, 0, 0, tzinfo=UTC)
CHANGE_AT = START + timedelta(days=3, hours=14)
PROVIDERS = ("alpha", "beta", "gamma")
METRICS = ("client.ttft_ms", "client.e2e_ms")
MODEL = "m-8b"


def q(value: float, q_: float, n: int = 40, half: float = 5.0) -> Quantile:
    """A quantile with an interval of ±`half` (none below its min_n)."""
    need = 6 if q_ == 0.5 else 29
    ok = n >= need
    return Quantile(
        q=q_,
        value=value,
        lo=value - half if ok else None,
        hi=value + half if ok else None,
        n=n,
        min_n=need,
    )


def est(value: float, half: float) -> Estimate:
    """An estimate with its interval."""
    return Estimate(value=value, lo=value - half, hi=value + half)


def _base_ms(provider: str, metric: str, hour: int) -> float:
    base = {"alpha": 120.0, "beta": 200.0, "gamma": 320.0}[provider]
    if provider == "beta" and 16 <= hour <= 19:
        base += 150.0  # a queue at the evening peak
    return base * (3.0 if metric == "client.e2e_ms" else 1.0)


def rollups() -> list[RollupCell]:
    """Hour-of-day cells for every provider × metric (hour 3 of gamma has too few probes
    for a p90 interval) and the 72 h and 14 d windows."""
    cells: list[RollupCell] = []
    end = START + timedelta(days=7)
    for p in PROVIDERS:
        for m in METRICS:
            for h in range(24):
                n = 20 if (p == "gamma" and h == 3) else 42
                v = _base_ms(p, m, h)
                cells.append(
                    RollupCell(provider=p, model=MODEL, metric=m, window="hour_of_day", hour=h,
                               median=q(v, 0.5, n), p90=q(v * 1.4, 0.9, n, 12.0))
                )  # fmt: skip
            for window, days in (("72h", 3), ("14d", 7)):
                v = _base_ms(p, m, 12)
                cells.append(
                    RollupCell(provider=p, model=MODEL, metric=m, window=window,
                               start=end - timedelta(days=days), end=end,
                               median=q(v, 0.5, 24 * 12 * days), p90=q(v * 1.4, 0.9, 288 * days))
                )  # fmt: skip
    return cells


def splits() -> list[SplitCell]:
    """alpha: every part; beta: its queue only; gamma: none (not separable)."""
    out: list[SplitCell] = []
    for h in range(24):
        a = SplitCell(
            provider="alpha",
            model=MODEL,
            window="hour_of_day",
            hour=h,
            n=42,
            total_ms=est(120, 4),
            network_frontend_ms=est(30, 2),
            queue_ms=est(10, 1),
            processing_ms=est(80, 3),
            decode_ms_per_token=est(12, 0.5),
            separable=["network_frontend", "queue", "processing", "decode"],
        )
        queue = 160.0 if 16 <= h <= 19 else 10.0
        b = SplitCell(
            provider="beta",
            model=MODEL,
            window="hour_of_day",
            hour=h,
            n=42,
            total_ms=est(190 + queue, 6),
            queue_ms=est(queue, 3),
            decode_ms_per_token=est(15, 0.6),
            separable=["queue", "decode"],
        )
        g = SplitCell(
            provider="gamma",
            model=MODEL,
            window="hour_of_day",
            hour=h,
            n=42,
            total_ms=est(320, 9),
            separable=[],
        )
        out += [a, b, g]
    out.append(
        SplitCell(
            provider="gamma", model=MODEL, window="72h", n=864, total_ms=est(320, 3), separable=[]
        )
    )
    return out  # fmt: skip


def changes() -> list[ChangeEvent]:
    """beta's queue rose at CHANGE_AT; gamma's fingerprint changed on day 5."""
    return [
        ChangeEvent(
            provider="beta", model=MODEL, kind="shift", metric="client.ttft_ms",
            statistic="p50", component="queue", at=CHANGE_AT,
            at_lo=CHANGE_AT - timedelta(hours=2), at_hi=CHANGE_AT + timedelta(hours=1),
            before=200.0, after=380.0, delta=est(180, 22), q_value=0.0004,
            sentence="TTFT p50 on beta rose 180 ms (95 % CI 158–202 ms) since Thu 05 Nov "
            "14:00 UTC: the provider's queue, not the network.",
        ),
        ChangeEvent(
            provider="gamma", model=MODEL, kind="fingerprint", at=START + timedelta(days=5),
            old_value="fp_0a1b", new_value="fp_9f8e",
            sentence="gamma's system_fingerprint changed from fp_0a1b to fp_9f8e on Sat 07 Nov.",
        ),
    ]  # fmt: skip


def series() -> list[SeriesPoint]:
    """beta's TTFT median per day (the change is on day 4)."""
    out = []
    for d in range(7):
        start = START + timedelta(days=d)
        v = 200.0 if start + timedelta(hours=12) < CHANGE_AT else 380.0
        out.append(SeriesPoint(provider="beta", model=MODEL, metric="client.ttft_ms",
                               start=start, end=start + timedelta(hours=23, minutes=55),
                               median=q(v, 0.5, 288, 8.0)))  # fmt: skip
    return out


def costs() -> list[CostFigures]:
    """alpha and beta priced; gamma has no price table entry."""
    return [
        CostFigures(provider="alpha", model=MODEL, price_date="2026-11-01",
                    per_request=est(0.00042, 0.00002), per_session=est(0.0061, 0.0004),
                    per_successful_answer=est(0.00045, 0.00003),
                    goodput_per_dollar=est(2222.0, 150.0), requests=2016, total=0.8467),
        CostFigures(provider="beta", model=MODEL, price_date="2026-11-01",
                    per_request=est(0.00031, 0.00001), per_successful_answer=est(0.00040, 0.00003),
                    goodput_per_dollar=est(2500.0, 190.0), requests=2016, total=0.6250),
    ]  # fmt: skip


def verdicts() -> list[SameModelVerdict]:
    """alpha is the reference's match, beta differs in distributions, gamma undecided."""
    return [
        SameModelVerdict(model=MODEL, provider="alpha", reference="reference", verdict="consistent",
                         confidence=0.95, reasons=["token counts equal on 40 of 40 texts"],
                         token_counts_equal=Proportion(k=40, n=40, value=1.0, lo=0.912, hi=1.0),
                         distribution_p=0.61, stop_reason_p=0.83),
        SameModelVerdict(model=MODEL, provider="beta", reference="reference",
                         verdict="differs: distributions", confidence=0.9991,
                         reasons=["next-token distributions differ (p = 0.0009)"],
                         token_counts_equal=Proportion(k=40, n=40, value=1.0, lo=0.912, hi=1.0),
                         distribution_p=0.0009, stop_reason_p=0.4),
        SameModelVerdict(model=MODEL, provider="gamma", reference="reference",
                         verdict="undecided", confidence=0.5,
                         reasons=["no top_logprobs: distributions not compared"]),
    ]  # fmt: skip


def observatory_figures(store: str = "/var/lab/watch.duckdb") -> ObservatoryFigures:
    """The whole: seven days of three providers (2016 rounds, one every five minutes)."""
    return ObservatoryFigures(
        store=store,
        computed_at=START + timedelta(days=7, minutes=3),
        first_round=START,
        last_round=START + timedelta(days=7) - timedelta(minutes=5),
        rounds=2016,
        rollups=rollups(),
        splits=splits(),
        changes=changes(),
        costs=costs(),
        verdicts=verdicts(),
        series=series(),
    )
