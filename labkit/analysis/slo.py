"""Service-level objectives: which requests were good enough, and the goodput they make.

An SLO names a `client.*` duration from the record contract and a percentile:
``ttft_ms_p90: 500`` reads "90% of requests see their first token within 500 ms". It is judged
twice, on the same per-request test (`SLO.met_by`): per request, for goodput (good requests per
second, DistServe's and `vllm bench serve --goodput`'s definition: one slow request cannot be
hidden by fast ones), and per set (a load level, an experiment) as the share of its requests that
met it, with its exact interval, for a pass / fail / undecided verdict. The rules:
docs/measurement.md, "SLOs and goodput".
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from labkit.analysis.stats import proportion, quantile
from labkit.clocksync import driver_start_ns
from labkit.figures import Proportion, Quantile, SLOCheck, SLOReport, Verdict
from labkit.records import RequestRecord

__all__ = [
    "SLO",
    "SLO_METRICS",
    "judge",
    "parse_slos",
    "request_span_s",
    "verdict",
]

#: The `client.*` fields an SLO may bound (all milliseconds, lower is better).
SLO_METRICS: tuple[str, ...] = (
    "ttft_ms",
    "ttft_text_ms",
    "first_event_ms",
    "headers_ms",
    "last_token_ms",
    "e2e_ms",
    "decode_ms_per_token",
    "itl_ms_p50",
    "itl_ms_p99",
    "itl_ms_max",
)
# Undefined (null) with fewer than two streamed tokens: such a reply does not miss them.
_UNDEFINED_WHEN_SHORT = frozenset({"decode_ms_per_token", "itl_ms_p50", "itl_ms_p99", "itl_ms_max"})
_NAME = re.compile(r"^(?P<metric>[a-z0-9_]+)_p(?P<q>\d{1,2}(?:\.\d+)?)$")
_NS = 1_000_000_000


@dataclass(frozen=True, slots=True)
class SLO:
    """One objective: `metric` within `bound_ms` for `percentile`% of requests."""

    name: str
    metric: str
    percentile: float
    bound_ms: float

    def value(self, record: RequestRecord) -> float | None:
        """The record's value of the metric (`ttft_text_ms` falls back to `ttft_ms`)."""
        value: float | None = getattr(record.client, self.metric)
        if value is None and self.metric == "ttft_text_ms":
            return record.client.ttft_ms
        return value

    def met_by(self, record: RequestRecord) -> bool:
        """Whether this one request met the objective: never when it failed; a metric
        undefined for it (decode and the inter-token gaps of a reply under two tokens) does
        not fail it, as vLLM's benchmark counts such a request's TPOT as 0; any other metric
        missing from it does."""
        if record.error is not None:
            return False
        value = self.value(record)
        if value is None:
            return self.metric in _UNDEFINED_WHEN_SHORT
        return value <= self.bound_ms


def parse_slos(raw: Mapping[str, float]) -> list[SLO]:
    """The SLOs of a config's ``slo:`` mapping; ValueError naming what is wrong."""
    out = []
    for name, bound in raw.items():
        match = _NAME.match(name)
        metric = match["metric"] if match else None
        if match is None or metric not in SLO_METRICS:
            raise ValueError(
                f"slo key {name!r}: expected <metric>_p<percentile>, e.g. ttft_ms_p90, with a "
                f"metric of {', '.join(SLO_METRICS)}"
            )
        q = float(match["q"])
        if not 0 < q < 100:
            raise ValueError(f"slo key {name!r}: the percentile must be above 0 and below 100")
        if not bound > 0:
            raise ValueError(f"slo {name}: the bound (ms) must be positive, got {bound}")
        out.append(SLO(name, metric, q, float(bound)))
    return out


def request_span_s(records: Sequence[RequestRecord]) -> float | None:
    """Seconds from the first request's start to the last successful one's end."""
    starts = [t for r in records if (t := driver_start_ns(r)) is not None]
    ends = [
        t + r.client.e2e_ms * 1e6
        for r in records
        if r.error is None and (t := driver_start_ns(r)) is not None and r.client.e2e_ms is not None
    ]
    if not starts or not ends:
        return None
    span = (max(ends) - min(starts)) / _NS
    return span if span > 0 else None


def judge(
    slos: Sequence[SLO],
    records: Sequence[RequestRecord],
    span_s: float | None = None,
) -> SLOReport | None:
    """The SLOs over `records` (warm-ups dropped); None when there are no SLOs.

    `span_s` is the goodput's denominator (default: `request_span_s`). The goodput's
    interval is the good requests' share, with its exact interval, times the requests per
    second over the span: what is uncertain is which requests are good, the span is measured.
    """
    if not slos:
        return None
    recs = [r for r in records if not r.warmup]
    ok = [r for r in recs if r.error is None]
    checks = []
    good = [True] * len(recs)
    for slo in slos:
        met = [slo.met_by(r) for r in recs]
        good = [g and m for g, m in zip(good, met, strict=True)]
        share = proportion(sum(met), len(recs))
        checks.append(
            SLOCheck(
                name=slo.name,
                metric=slo.metric,
                percentile=slo.percentile,
                bound_ms=slo.bound_ms,
                requests=len(recs),
                met=share.k,
                share=share,
                observed=_quantile_of(ok, slo.value, slo.percentile),
                verdict=verdict(share, slo.percentile / 100),
            )
        )
    span = span_s if span_s is not None else request_span_s(recs)
    good_share = proportion(sum(good), len(recs))
    rate = len(recs) / span if span else None
    verdicts = {c.verdict for c in checks}
    return SLOReport(
        checks=checks,
        requests=len(recs),
        good=good_share.k,
        good_share=good_share,
        goodput_rps=good_share.k / span if span else None,
        goodput_low_rps=None if rate is None or good_share.lo is None else good_share.lo * rate,
        goodput_high_rps=None if rate is None or good_share.hi is None else good_share.hi * rate,
        verdict=next((v for v in ("fail", "undecided") if v in verdicts), "pass"),
    )


def verdict(share: Proportion, required: float) -> Verdict:
    """`pass` when the share's interval lies at or above `required`, `fail` when it lies
    below, else `undecided` (also with no requests)."""
    if share.lo is None or share.hi is None:
        return "undecided"
    if share.lo >= required:
        return "pass"
    return "fail" if share.hi < required else "undecided"


def _quantile_of(
    records: Sequence[RequestRecord], get: Callable[[RequestRecord], float | None], q: float
) -> Quantile:
    return quantile((v for v in (get(r) for r in records) if v is not None), q / 100)
