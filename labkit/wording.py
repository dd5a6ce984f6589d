"""The answers' words: the one place where sentences are composed from figures.

Each answer leads with ONE sentence — the number, its interval, what it means (about 35
words at most) — then at most three short sentences; every other number lives in the
report's tables. A median or percentile is always said through
`labkit.analysis.stats.describe` (its interval and n, or why there is none).
"""

from __future__ import annotations

from labkit.figures import (
    Estimate,
    PrefillDecodeFigures,
    PromptCost,
    SLOCheck,
    SLOReport,
    SweepFigures,
)

__all__ = [
    "goodput_words",
    "prefill_decode_answer",
    "prompt_cost_lead",
    "prompt_cost_model_sentence",
    "slo_sentence",
    "sweep_answer",
]


# --- prefill_decode --------------------------------------------------------------------------


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
            f"Each extra prompt token delayed the first token by {_g(lo.value)} ms "
            f"({_ci(lo)}) over {m.min_tokens:,.0f}–{m.max_tokens:,.0f} tokens: the model reads "
            "(prefills) the whole prompt before it writes."
        )
    return (
        f"Each extra prompt token delayed the first token by {_g(lo.value)} ms ({_ci(lo)}) at "
        f"{m.min_tokens:,.0f} tokens and {_g(hi.value)} ms ({_g(hi.lo)} to {_g(hi.hi)}) at "
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
    parts = [prompt_cost_lead(m), prompt_cost_model_sentence(m)]
    decodes = [p.decode_ms_per_token for p in f.points if p.decode_ms_per_token is not None]
    if decodes:
        trend = (
            f" ({f.decode_fit.ms_per_token * 1000:+.2f} ms per 1,000 prompt tokens)"
            if f.decode_fit is not None
            else ""
        )
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


# --- slo -------------------------------------------------------------------------------------

_VERDICT_WORDS = {"pass": "held", "fail": "missed", "undecided": "undecided"}


def _check_words(c: SLOCheck) -> str:
    """`ttft_ms_p90 ≤ 500 ms held: 180 of 192 within it (94%, 95% CI 89–97%)`."""
    verdict = f"{c.name} ≤ {c.bound_ms:g} ms {_VERDICT_WORDS[c.verdict]}"
    s = c.share
    if s is None or s.value is None or s.lo is None or s.hi is None:
        return f"{verdict}: {c.met} of {c.requests} within it"
    return (
        f"{verdict}: {s.k} of {s.n} within it ({s.value:.0%}, 95% CI "
        f"{s.lo * 100:.0f}–{s.hi * 100:.0f}%)"
    )


def goodput_words(report: SLOReport) -> str:
    """`12.30 req/s, 95% CI 11.80–12.60`, or `n/a`."""
    if report.goodput_rps is None:
        return "n/a"
    if report.goodput_low_rps is None or report.goodput_high_rps is None:
        return f"{report.goodput_rps:.2f} req/s"
    return (
        f"{report.goodput_rps:.2f} req/s, 95% CI {report.goodput_low_rps:.2f}–"
        f"{report.goodput_high_rps:.2f}"
    )


def slo_sentence(report: SLOReport) -> str:
    """The report in one sentence: each SLO's verdict at 95% with the share meeting it, and
    the goodput with its interval."""
    checks = "; ".join(_check_words(c) for c in report.checks)
    return (
        f"SLOs: {checks}; {report.good} of {report.requests} requests met every SLO "
        f"(goodput {goodput_words(report)})."
    )


# --- sweep -----------------------------------------------------------------------------------


def _load(mode: str, value: float | None) -> str:
    if value is None:
        return "n/a"
    return f"{value:.0f} streams" if mode == "concurrency" else f"{value:.2f} req/s"


def sweep_answer(f: SweepFigures) -> str:
    """The knee with its interval and the goodput there; then the baseline and throughput,
    the first level above the knee to fail (and any left undecided), and what it cost."""
    base = f.probes[0]
    if not base.met:
        return (
            f"Even one request at a time does not pass the SLOs ({base.why}): no load is "
            f"shown to meet them. Stopped: {f.stopped}."
        )
    if f.knee is None:
        lead = "No level above the baseline was shown to meet the SLOs."
    else:
        unit = "streams" if f.mode == "concurrency" else "req/s"
        low = f"{f.knee_low:.0f}" if f.mode == "concurrency" else f"{f.knee_low or 0:.2f}"
        if f.knee_high is None:
            interval = f"at or above {low} {unit}: no level failed"
        else:
            high = f"{f.knee_high:.0f}" if f.mode == "concurrency" else f"{f.knee_high:.2f}"
            interval = f"[{low}, {high}) {unit}"
        goodput = ""
        if f.knee_goodput_rps is not None:
            goodput_ci = (
                f" (95% CI {f.knee_goodput_low_rps:.2f}–{f.knee_goodput_high_rps:.2f})"
                if f.knee_goodput_low_rps is not None and f.knee_goodput_high_rps is not None
                else ""
            )
            goodput = f", goodput {f.knee_goodput_rps:.2f} req/s{goodput_ci} there"
        lead = (
            f"The knee: {_load(f.mode, f.knee)} meets every SLO at 95% (the true knee lies "
            f"{'' if f.knee_high is None else 'in '}{interval}){goodput}."
        )
    parts = [lead]
    rates = f"The synchronous baseline completed {_load('rate', base.level.completed_rps)}"
    if f.throughput_rps is not None:
        rates += f", the throughput probe ({f.probes[1].level.title}) {f.throughput_rps:.2f}"
    parts.append(rates + ".")
    failed = [p for p in f.probes if p.role == "bisect" and p.verdict == "fail"]
    undecided = [p.level.title for p in f.probes if p.role == "bisect" and p.verdict == "undecided"]
    above = ""
    if failed:
        lowest = min(failed, key=lambda p: p.level.target)
        above = f"The first level above it to fail, {lowest.level.title}: {lowest.why}. "
    if undecided:
        above += f"Undecided at the request bound: {', '.join(undecided)}. "
    sent = sum(p.requests_sent for p in f.probes)
    parts.append(f"{above}{len(f.probes)} levels, {sent} requests; stopped: {f.stopped}.")
    return " ".join(parts)
