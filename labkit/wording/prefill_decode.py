"""`prefill_decode`'s answer: the prefill sweep's sentences, the model of TTFT against
prompt tokens among them."""

from __future__ import annotations

from labkit.figures import Estimate, PromptCost
from labkit.figures.prefill_decode import PrefillDecodeFigures
from labkit.wording.common import marked

__all__ = ["prefill_decode_answer", "prompt_cost_lead", "prompt_cost_model_sentence"]


def _g(value: float | None) -> str:
    """A fitted value to three significant figures (`0.512`, `12.3`, `-135`)."""
    return "n/a" if value is None else f"{value:.3g}"


def _ci(e: Estimate, unit: str = "") -> str:
    """`95% CI 0.49 to 0.53 ms` (`to`, not a dash: bounds may be negative)."""
    return f"95% CI {_g(e.lo)} to {_g(e.hi)}{unit}"


def _intercept_words(m: PromptCost) -> str:
    e = m.intercept_ms
    if m.intercept_reading == "positive":
        return f"fixed part {_g(e.value)} ms ({_ci(e, ' ms')})"
    if m.intercept_reading == "zero":
        return f"no fixed part distinguishable from 0 ({_ci(e, ' ms')})"
    if m.model == "linear":
        return (
            f"its fixed part, {_g(e.value)} ms ({_ci(e, ' ms')}), is not physical: a "
            "straight line is the wrong model over this range"
        )
    return f"even the curve's fixed part, {_g(e.value)} ms, is not physical: read the slopes"


def prompt_cost_lead(m: PromptCost) -> str:
    """The lead sentence: what one more prompt token costs in TTFT, with its interval."""
    lo, hi = m.marginal_at_min, m.marginal_at_max
    if m.model == "linear":
        return (
            f"{_g(lo.value)} ms ({_ci(lo)}) more to the first token per extra prompt token, "
            f"over {m.min_tokens:,.0f}–{m.max_tokens:,.0f} tokens: the model reads (prefills) "
            "the whole prompt before it writes."
        )
    return (
        f"{_g(lo.value)} ms ({_ci(lo)}) more to the first token per extra prompt token at "
        f"{m.min_tokens:,.0f} tokens, {_g(hi.value)} ms ({_g(hi.lo)} to {_g(hi.hi)}) at "
        f"{m.max_tokens:,.0f}: prefill per token grows with the prompt."
    )


def prompt_cost_model_sentence(m: PromptCost) -> str:
    """Which model the data chose, and what its fixed part may be said to be."""
    if m.curvature_p is None:
        chose = f"Too few prompt lengths to test for a curve (n = {m.n})"
    elif m.model == "quadratic":
        chose = (
            f"A straight line fits worse than a curve (F-test p = {m.curvature_p:.2g}, n = {m.n})"
        )
    else:
        chose = f"A curve fits no better than the line (F-test p = {m.curvature_p:.2f}, n = {m.n})"
    return f"{chose}; {_intercept_words(m)}."


def prefill_decode_answer(f: PrefillDecodeFigures) -> str:
    """The marginal cost of a prompt token (the lead), the model behind it, decode across
    the sweep, and a cold cache hit (a warning) or what a cached prefix did to TTFT."""
    m = f.ttft_model
    if m is None:
        return "Not enough successful requests at two or more prompt lengths to fit."
    parts = [marked(prompt_cost_lead(m), f.client_bound), prompt_cost_model_sentence(m)]
    decodes = [p.decode_ms_per_token for p in f.points if p.decode_ms_per_token is not None]
    if decodes:
        trend = ""
        d = f.decode_fit
        if d is not None:
            trend = f" ({d.ms_per_token * 1000:+.2f} ms per 1,000 prompt tokens"
            if d.ms_per_token_lo is not None and d.ms_per_token_hi is not None:
                trend += (
                    f", 95% CI {d.ms_per_token_lo * 1000:+.2f} to {d.ms_per_token_hi * 1000:+.2f}"
                )
            trend += ")"
        parts.append(
            f"Decode took {min(decodes):.2f}–{max(decodes):.2f} ms per output token across "
            f"the sweep{trend}."
        )
    cache = f.cache
    if f.cold_cache_hits:
        parts.append(f"Warning: {f.cold_cache_hits} cold requests still hit a prompt cache.")
    elif cache and cache.hit_ttft_ms is not None and cache.prime_ttft_ms is not None:
        cached = (
            f" ({cache.hit_cached_tokens:.0f} tokens cached)"
            if cache.hit_cached_tokens is not None
            else " (no cached-token count reported)"
        )
        parts.append(
            f"Sending the same {cache.prefix_tokens}-token prefix again, TTFT went from "
            f"{cache.prime_ttft_ms:.1f} ms to {cache.hit_ttft_ms:.1f} ms{cached}."
        )
    return " ".join(parts)
