"""Grading the prompt-cache probe (`prompt_cache`): each row's hits against the requests the
truth server really served from its cache, the lifetime bracket against the cache lifetime
it was given (`cache_ttl_s`; 0: none, an unbounded lifetime), and the TTFT and money a hit
saved against the true TTFTs and cached tokens of the same probes."""

from __future__ import annotations

import math

from labkit.analysis.prompt_cache import hit_pairs
from labkit.figures.prompt_cache import PromptCacheFigures
from labkit.figures.stats import Estimate
from labkit.records import LabAnswer, RequestRecord
from labkit.scoring.grading.base import (
    Check,
    Truth,
    fact,
    figure,
    mean_of,
    median_of,
    register_grader,
    true_ttft_ms,
)
from labkit.truth.log import TruthRequest

__all__ = ["LIFETIME_TOLERANCE_S", "grade_prompt_cache"]

#: What the client's start-to-start gap cannot see of the server's: each request's transit
#: to the server on the loopback and a stamp's lateness (s).
LIFETIME_TOLERANCE_S = 0.005


def _true_hit(t: TruthRequest, share: float) -> bool:
    if not t.prompt_tokens:
        return t.cached_tokens > 0
    return t.cached_tokens >= share * t.prompt_tokens


@register_grader("prompt_cache")
def grade_prompt_cache(
    answer: LabAnswer, records: list[RequestRecord], truth: Truth
) -> list[Check]:
    """Every row's hits, the lifetime, TTFT cold, hit and saved, and the money saved."""
    f = answer.figures
    if not isinstance(f, PromptCacheFigures):
        return []
    who = f"prompt_cache · {answer.provider}"
    pairs = {r.record_id: t for r, t in truth.pairs(records)}
    checks: list[Check] = []
    for row in f.rows:
        repeats = [
            r
            for r in records
            if r.tags.get("phase") == row.phase
            and r.tags.get("setting") == row.setting
            and r.tags.get("role") == "repeat"
            and r.record_id in pairs
        ]
        true_hits = sum(1 for r in repeats if _true_hit(pairs[r.record_id], f.hit_share))
        checks.append(
            fact(who, f"{row.phase} · {row.label}: repeats that hit", row.hits, true_hits)
        )
    if f.lifetime is not None and f.lifetime.value_s is not None:
        ttl = float(truth.log.schedule.get("cache_ttl_s") or 0.0)
        stated = Estimate(value=f.lifetime.value_s, lo=f.lifetime.lo_s, hi=f.lifetime.hi_s)
        if f.lifetime.hi_s is None:  # a lower bound alone: the lifetime is at least it
            stated = Estimate(value=f.lifetime.value_s, lo=f.lifetime.lo_s, hi=None)
        checks.append(
            figure(
                who,
                "cache lifetime (bracket)",
                stated,
                ttl if ttl > 0 else math.inf,
                "s",
                tolerance=LIFETIME_TOLERANCE_S,
            )
        )
    measured = [r for r in records if r.record_id in pairs]
    probes = hit_pairs(measured, f.hit_share)
    true_probes = [
        (p, h)
        for p, h in probes
        if not _true_hit(pairs[p.record_id], f.hit_share)
        and _true_hit(pairs[h.record_id], f.hit_share)
    ]
    checks.append(fact(who, "probes paired cold and hit", len(probes), len(true_probes)))
    saved = []
    for p, h in probes:
        cold, hot = true_ttft_ms(p, pairs[p.record_id]), true_ttft_ms(h, pairs[h.record_id])
        if cold is not None and hot is not None:
            saved.append(cold - hot)
    if f.ttft_saved is not None:
        checks.append(
            figure(who, "TTFT a hit saved (paired mean)", f.ttft_saved, mean_of(saved), "ms")
        )
    cold_primes = [
        r
        for r in measured
        if r.tags.get("role") == "prime" and not _true_hit(pairs[r.record_id], f.hit_share)
    ]
    if f.ttft_cold is not None:
        checks.append(
            figure(
                who,
                "cold TTFT (median)",
                f.ttft_cold,
                median_of([true_ttft_ms(r, pairs[r.record_id]) for r in cold_primes]),
                "ms",
            )
        )
    if f.money is not None:
        hits = [
            r
            for r in measured
            if r.tags.get("role") == "repeat" and _true_hit(pairs[r.record_id], f.hit_share)
        ]
        diff = (f.money.input_per_mtok - f.money.cached_input_per_mtok) / 1e6
        checks.append(
            figure(
                who,
                "money a hit saved (mean)",
                f.money.saved_per_hit_usd,
                mean_of([pairs[r.record_id].cached_tokens * diff for r in hits]),
                "USD",
                tolerance=1e-12,  # sums of float prices: their rounding alone
            )
        )
    return checks
