"""Grading question 1 (`single`): the cold and the cached TTFT, the tokens, decode, stop."""

from __future__ import annotations

from labkit.figures.single import SingleFigures
from labkit.records import LabAnswer, RequestRecord
from labkit.scoring.grading.base import (
    Check,
    Truth,
    fact,
    figure,
    median_of,
    register_grader,
    true_decode_ms_per_token,
    true_ttft_ms,
)

__all__ = ["grade_single"]


@register_grader("single")
def grade_single(answer: LabAnswer, records: list[RequestRecord], truth: Truth) -> list[Check]:
    """Each cache state's TTFT against the true TTFT of the requests the server really served
    cold (none of the prompt cached) or cached; the token counts, decode per token over the
    tokens that arrived, the server's own prefill, and the stop reasons."""
    f = answer.figures
    if not isinstance(f, SingleFigures):
        return []
    who = f"single · {answer.provider}"
    pairs = truth.pairs(records)
    paired = [(r, t) for r, t in pairs if r.tags.get("cache") in ("cold", "cached")]
    checks: list[Check] = []
    states = {"cold": [(r, t) for r, t in paired if t.cached_tokens == 0]}
    states["cached"] = [(r, t) for r, t in paired if t.cached_tokens > 0]
    for state, run in (("cold", f.cold), ("cached", f.cached)):
        served = states[state]
        if run is None and not served:
            continue
        checks.append(fact(who, f"{state} requests", run.n if run else 0, len(served)))
        checks.append(
            figure(
                who,
                f"{state} TTFT (median)",
                run.ttft if run else None,
                median_of([true_ttft_ms(r, t) for r, t in served]),
                "ms",
            )
        )
        if run is None or not served:
            continue
        checks.append(
            figure(
                who,
                f"{state}: input tokens (median)",
                run.input_tokens_p50,
                median_of([float(t.prompt_tokens) for _, t in served]),
                "tokens",
            )
        )
        checks.append(
            figure(
                who,
                f"{state}: cached tokens (median)",
                run.cached_tokens_p50,
                median_of([float(t.cached_tokens) for _, t in served]),
                "tokens",
            )
        )
        checks.append(
            figure(
                who,
                f"{state}: the server's prefill (median)",
                run.provider_prefill_ms_p50,
                median_of([t.prefill_ms for _, t in served]),
                "ms",
                tolerance=0.01,
            )
        )
    if not paired:  # sent as they came: every cache hit must be named
        hits = sum(1 for _, t in pairs if t.cached_tokens > 0)
        checks.append(fact(who, "requests that were cache hits", f.cache_hits, hits))
    checks.append(
        figure(
            who,
            "decode per token (median)",
            f.decode_per_token,
            median_of([true_decode_ms_per_token(t) for _, t in pairs]),
            "ms/token",
        )
    )
    stops = {"length" if t.capped else "end" for _, t in pairs}
    checks.append(fact(who, "stop reasons", sorted(f.stop_reasons), sorted(stops)))
    return checks
