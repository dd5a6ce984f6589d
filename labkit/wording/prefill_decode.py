"""`prefill_decode`'s answer: the prefill sweep's sentences, the model of TTFT against
prompt tokens among them."""

from __future__ import annotations

from labkit.figures import Estimate, PromptCost
from labkit.figures.prefill_decode import PrefillDecodeFigures
from labkit.wording.common import marked, say

__all__ = [
    "cost_lead",
    "prefill_decode_answer",
    "prompt_cost_lead",
    "prompt_cost_model_sentence",
]


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


def _estimate(e: Estimate, unit: str = " ms", digits: str = ".3g") -> str:
    """`12.3 ms (95% CI 11.0 to 13.6)`; `(95% CI at least 11.0)` where the interval has no
    upper bound; the value alone where it has no interval."""
    if e.lo is not None and e.hi is None:
        return f"{e.value:{digits}}{unit} (95% CI at least {e.lo:{digits}})"
    if e.lo is None or e.hi is None:
        return f"{e.value:{digits}}{unit} (no interval)"
    return f"{e.value:{digits}}{unit} (95% CI {e.lo:{digits}} to {e.hi:{digits}})"


def cost_lead(f: PrefillDecodeFigures) -> str | None:
    """The lesson in one sentence: what a prompt token costs to read against what a
    generated token costs, and their ratio with its interval (None: not measured)."""
    read, write, ratio = f.prompt_token_ms, f.generated_token_ms, f.generated_vs_prompt
    if read is None or write is None or write.value is None:
        return None
    times = (
        f"; one generated token cost as much as {_estimate(ratio, '', '.3g')} prompt tokens"
        if ratio is not None
        else ""
    )
    return (
        f"{_estimate(read)} more to the first token for each prompt token read, "
        f"{say(write)} for each token generated{times}: the prompt is read in one pass, the "
        "reply made one token at a time."
    )


def _decode_words(f: PrefillDecodeFigures) -> str | None:
    """Whether decode per token moved with the prompt's length, said plainly."""
    d = f.decode_fit
    lengths = [p.input_tokens for p in f.points if p.input_tokens is not None]
    if d is None or d.ms_per_token_lo is None or d.ms_per_token_hi is None or not lengths:
        return None
    span = f"{min(lengths):,.0f}–{max(lengths):,.0f}"
    per_k = d.ms_per_token * 1000
    interval = f"95% CI {d.ms_per_token_lo * 1000:+.2f} to {d.ms_per_token_hi * 1000:+.2f}"
    if d.ms_per_token_lo <= 0 <= d.ms_per_token_hi:
        return (
            f"Decode per token showed no dependence on the prompt's length over {span} tokens "
            f"({per_k:+.2f} ms per 1,000 prompt tokens, {interval})."
        )
    grew = "grew" if per_k > 0 else "fell"
    return (
        f"Decode per token {grew} with the prompt: {per_k:+.2f} ms per 1,000 prompt tokens "
        f"({interval}), over {span} tokens."
    )


def _cache_words(f: PrefillDecodeFigures) -> str | None:
    cache = f.cache
    if f.cold_cache_hits:
        return f"Warning: {f.cold_cache_hits} cold requests still hit a prompt cache."
    if cache is None or cache.hit_ttft_ms is None or cache.prime_ttft_ms is None:
        return None
    cached = (
        f"{cache.hit_cached_tokens:.0f} tokens read from the cache"
        if cache.hit_cached_tokens is not None
        else "no cached-token count reported"
    )
    return (
        f"Sending the same {cache.prefix_tokens}-token prefix again, TTFT went from "
        f"{cache.prime_ttft_ms:.1f} ms (once, cold) to {cache.hit_ttft_ms:.1f} ms (median of "
        f"{cache.n_hits}, {cached}): too few sends for an interval, the size of the change is "
        "the lesson."
    )


def prefill_decode_answer(f: PrefillDecodeFigures) -> str:
    """What a prompt token costs against a generated one (the lead), whether decode moved
    with the prompt, and a cold cache hit (a warning) or what a cached prefix did; the
    model's statistics are the report's (`prompt_cost_lead`, `prompt_cost_model_sentence`)."""
    m = f.ttft_model
    if m is None:
        return "Not enough successful requests at two or more prompt lengths to fit."
    lead = cost_lead(f) or prompt_cost_lead(m)
    parts = [marked(lead, f.client_bound)]
    parts += [s for s in (_decode_words(f), _cache_words(f)) if s]
    return " ".join(parts)
