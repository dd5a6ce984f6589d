"""Grading question 4 (`prefill_decode`): what a prompt token and a generated one cost."""

from __future__ import annotations

import numpy as np

from labkit.figures import Estimate
from labkit.figures.prefill_decode import PrefillDecodeFigures
from labkit.records import LabAnswer, RequestRecord
from labkit.scoring.grading.base import (
    TOLERANCE,
    Check,
    Truth,
    fact,
    figure,
    median_of,
    register_grader,
    true_decode_ms_per_token,
    true_ttft_ms,
)
from labkit.truth.log import TruthRequest

__all__ = ["grade_prefill_decode"]


def _true_slope(cold: list[tuple[RequestRecord, TruthRequest]]) -> float | None:
    """The least-squares slope of the true TTFT against the prompt tokens the server counted
    (None: fewer than two lengths)."""
    points = [
        (float(t.prompt_tokens), ttft) for r, t in cold if (ttft := true_ttft_ms(r, t)) is not None
    ]
    if len({x for x, _ in points}) < 2:
        return None
    xs, ys = zip(*points, strict=True)
    return float(np.polyfit(xs, ys, 1)[0])


def _true_decode_slope(cold: list[tuple[RequestRecord, TruthRequest]]) -> float | None:
    """The least-squares slope of the true decode per token against the prompt tokens (the
    server's decode does not depend on them; what its jitter made of it in this sample)."""
    points = [
        (float(t.prompt_tokens), d)
        for _, t in cold
        if (d := true_decode_ms_per_token(t)) is not None
    ]
    if len({x for x, _ in points}) < 2:
        return None
    xs, ys = zip(*points, strict=True)
    return float(np.polyfit(xs, ys, 1)[0])


@register_grader("prefill_decode")
def grade_prefill_decode(
    answer: LabAnswer, records: list[RequestRecord], truth: Truth
) -> list[Check]:
    """The cost of a prompt token against the line through the true TTFTs (what the server
    really did, which a busy host can move off its schedule), a generated token's against
    the true gaps, their ratio against the true one, decode's slope against the prompt's
    length against the true decodes' (the server's decode does not depend on it; a 95%
    interval may still miss 0 in one run of twenty, the truth of the sample it holds), and
    the cache variant's cached tokens."""
    f = answer.figures
    if not isinstance(f, PrefillDecodeFigures):
        return []
    who = f"prefill_decode · {answer.provider}"
    pairs = truth.pairs(records)
    cold = [(r, t) for r, t in pairs if r.tags.get("variant") == "cold"]
    per_prompt_token = _true_slope(cold)
    generated = median_of([true_decode_ms_per_token(t) for _, t in cold])
    per_token = generated
    checks = [
        figure(who, "a prompt token's cost", f.prompt_token_ms, per_prompt_token, "ms/token", 0.0),
        figure(who, "a generated token's cost", f.generated_token_ms, generated, "ms/token"),
    ]
    if per_prompt_token and per_token:
        ratio = per_token / per_prompt_token
        # the decode's tolerance (stamps the server cannot see), carried into the ratio
        slack = ratio * TOLERANCE["ms/token"] / per_token
        checks.append(
            figure(
                who, "generated / prompt token cost", f.generated_vs_prompt, ratio, "ratio", slack
            )
        )
    d = f.decode_fit
    trend = _true_decode_slope(cold)
    if d is not None and trend is not None:
        lengths = [float(t.prompt_tokens) for _, t in cold]
        # decode's own tolerance, spread over the prompt lengths the line runs across
        slack = TOLERANCE["ms/token"] / (max(lengths) - min(lengths))
        stated = Estimate(value=d.ms_per_token, lo=d.ms_per_token_lo, hi=d.ms_per_token_hi)
        what = "decode per token against prompt tokens (slope)"
        checks.append(figure(who, what, stated, trend, "ms/token per token", slack))
    checks.append(
        fact(
            who,
            "cold requests that hit a cache",
            f.cold_cache_hits,
            sum(1 for _, t in cold if t.cached_tokens > 0),
        )
    )
    hits = [t for r, t in pairs if r.tags.get("phase") == "hit"]
    if f.cache is not None and hits:
        checks.append(
            figure(
                who,
                "cached tokens on a repeated prefix (median)",
                f.cache.hit_cached_tokens,
                median_of([float(t.cached_tokens) for t in hits]),
                "tokens",
            )
        )
    return checks
