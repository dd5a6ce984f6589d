"""Load levels as figures: one pass of a level's records → its `LoadLevel` row (rates,
percentiles, the server's own metrics, the self-check, SLOs, cache hits, clock uncertainty).

Pure and shared: the load, sweep and trace experiments all report their levels through
`level_figures`, so none of them imports another for it (docs/measurement.md, "Load levels").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from labkit.analysis.columns import Columns
from labkit.analysis.selfcheck import level_lag
from labkit.analysis.slo import SLO, judge
from labkit.analysis.split import ttfts_beyond_prefill
from labkit.analysis.stats import p_of, quantiles
from labkit.clocksync import HostClock, driver_start_ns, level_clock
from labkit.figures import LoadLevel, LoadLevelCache, Percentiles
from labkit.records import RequestRecord
from labkit.server_metrics import ServerMetricsSample, server_level_metrics
from labkit.timing import percentile

__all__ = ["Level", "level_cache", "level_figures"]

_NS = 1_000_000_000


@dataclass(frozen=True, slots=True)
class Level:
    """One load level."""

    index: int
    mode: Literal["concurrency", "rate"]
    target: float

    @property
    def label(self) -> str:
        """`c8` or `r2.5`: the level's tag in records and keys."""
        return f"c{int(self.target)}" if self.mode == "concurrency" else f"r{self.target:g}"

    @property
    def title(self) -> str:
        """`concurrency 8` or `2.5 req/s`."""
        if self.mode == "concurrency":
            return f"concurrency {int(self.target)}"
        return f"{self.target:g} req/s"


def level_figures(
    level: Level,
    records: list[RequestRecord],
    arrival: str = "poisson",
    server_samples: Sequence[ServerMetricsSample] = (),
    slos: Sequence[SLO] = (),
    clocks: Sequence[HostClock] = (),
) -> LoadLevel:
    """One row of the load table from one pass of a level, judged against `slos`; with the
    server's scraped metrics, what they said from the level's first request sent to its
    last stream's end; with the hosts' clock estimates around it (`clocks`), how far its
    times across hosts may be off."""
    recs = [r for r in records if not r.warmup]
    ok = [r for r in recs if r.error is None]
    starts = sorted(t for r in recs if (t := driver_start_ns(r)) is not None)
    ends = [
        t + r.client.e2e_ms * 1e6
        for r in ok
        if (t := driver_start_ns(r)) is not None and r.client.e2e_ms is not None
    ]
    span_s = (max(ends) - starts[0]) / _NS if starts and ends else None
    server = (
        server_level_metrics(server_samples, starts[0], int(max(ends)))
        if server_samples and starts and ends
        else None
    )
    start_span_s = (starts[-1] - starts[0]) / _NS if len(starts) >= 2 else None
    out_tokens = sum(r.usage.output_tokens or 0 for r in ok)
    busy_s = sum((r.client.e2e_ms or 0.0) for r in ok) / 1000.0

    def ttft(r: RequestRecord) -> float | None:
        return r.client.ttft_ms

    def decode(r: RequestRecord) -> float | None:
        return r.client.decode_ms_per_token

    def e2e(r: RequestRecord) -> float | None:
        return r.client.e2e_ms

    def queue(r: RequestRecord) -> float | None:
        return r.client.queue_ms

    def provider_queue(r: RequestRecord) -> float | None:
        return r.provider_timings.queue_ms

    ttft_p50, ttft_p90, ttft_p99 = quantiles([v for v in map(ttft, ok) if v is not None])
    lag = level_lag(recs)
    hosts, clock_ns = level_clock(recs, clocks)
    workers = {str(r.tags.get("workers")) for r in recs if r.tags.get("workers")}
    return LoadLevel(
        level=level.label,
        title=level.title,
        mode=level.mode,
        arrival=arrival if level.mode == "rate" else None,
        target=level.target,
        workers=int(next(iter(workers))) if len(workers) == 1 else None,
        requests=len(recs),
        ok=len(ok),
        failed=len(recs) - len(ok),
        duration_s=span_s,
        achieved_rate_rps=(len(starts) - 1) / start_span_s if start_span_s else None,
        completed_rps=len(ok) / span_s if span_s else None,
        mean_in_flight=busy_s / span_s if span_s else None,
        output_tokens_per_s=out_tokens / span_s if span_s else None,
        # computed once: `ttft` holds them with their intervals
        ttft_ms_p50=ttft_p50.value,
        ttft_ms_p90=ttft_p90.value,
        ttft_ms_p99=ttft_p99.value,
        ttft=Percentiles(p50=ttft_p50, p90=ttft_p90, p99=ttft_p99),
        decode_ms_per_token_p50=p_of(ok, decode, 50),
        decode_ms_per_token_p99=p_of(ok, decode, 99),
        e2e_ms_p50=p_of(ok, e2e, 50),
        e2e_ms_p99=p_of(ok, e2e, 99),
        queue_ms_p50=p_of(recs, queue, 50),
        queue_ms_p99=p_of(recs, queue, 99),
        queue_ms_max=p_of(recs, queue, 100),
        provider_queue_ms_p50=p_of(ok, provider_queue, 50),
        provider_queue_ms_p99=p_of(ok, provider_queue, 99),
        ttft_beyond_prefill_ms_p50=_p50_present(ttfts_beyond_prefill(Columns.of_records(ok))),
        loop_lag_ms_p50=lag.p50,
        loop_lag_ms_max=lag.max,
        stamp_lateness_ms_p50=lag.late_p50,
        stamp_lateness_ms_p99=lag.late_p99,
        labkit_cpu_share=lag.cpu_share,
        client_bound=lag.client_bound,
        client_bound_fix=lag.fix if lag.client_bound else None,
        slo=judge(slos, recs, span_s),
        server=server,
        cache=level_cache(ok),
        hosts=hosts,
        clock_uncertainty_ms=clock_ns / 1e6 if clock_ns is not None else None,
    )


def _p50_present(values: np.ndarray) -> float | None:
    """The median of the values that are not NaN, as `p_of` takes it (None: none are)."""
    present = sorted(values[~np.isnan(values)].tolist())
    return percentile(present, 50) if present else None


def level_cache(ok: list[RequestRecord]) -> LoadLevelCache | None:
    """The provider's cache-hit counts over a level's successful requests (None: it counted
    none), with the TTFT of hits (at least half the prompt cached) and misses."""

    def cached(r: RequestRecord) -> int | None:
        if r.usage.cached_input_tokens is not None:
            return r.usage.cached_input_tokens
        return r.provider_timings.cached_tokens

    counted = [(r, c) for r in ok if (c := cached(r)) is not None]
    if not counted:
        return None
    hits = [r for r, c in counted if r.usage.input_tokens and c >= 0.5 * r.usage.input_tokens]
    misses = [r for r, _ in counted if r not in hits]
    total_in = sum(r.usage.input_tokens or 0 for r, _ in counted)

    def ttft(r: RequestRecord) -> float | None:
        return r.client.ttft_ms

    return LoadLevelCache(
        counted=len(counted),
        hits=len(hits),
        cached_tokens_p50=p_of([r for r, _ in counted], cached, 50),
        cached_share=sum(c for _, c in counted) / total_in if total_in else None,
        ttft_ms_p50_hit=p_of(hits, ttft, 50),
        ttft_ms_p50_miss=p_of(misses, ttft, 50),
    )
