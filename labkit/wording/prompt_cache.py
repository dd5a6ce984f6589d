"""The answer of `prompt_cache`: how often a repeat found its prefix cached, what a hit saved,
how long an unused prefix lived, and what length, eviction, concurrency and routing did."""

from __future__ import annotations

from labkit.analysis.stats import _number, describe_share, proportion
from labkit.figures.prompt_cache import CacheLifetime, CacheProbeRow, PromptCacheFigures
from labkit.wording.common import say

__all__ = ["lifetime_words", "prompt_cache_answer", "row_words"]


def _s(seconds: float) -> str:
    return f"{_number(seconds)} s"


def lifetime_words(life: CacheLifetime) -> str:
    """The lifetime bracket in words (`between 0.4 s and 0.8 s`)."""
    if life.lo_s is not None and life.hi_s is not None:
        span = f"between {_s(life.lo_s)} and {_s(life.hi_s)}"
        if not life.consistent:
            return span + " (the trials disagreed: a miss came before a later hit)"
        return span
    if life.lo_s is not None:
        return f"longer than {_s(life.lo_s)} (no gap probed was long enough to miss)"
    assert life.hi_s is not None
    return f"shorter than {_s(life.hi_s)} (every gap probed missed)"


def row_words(row: CacheProbeRow) -> str:
    """One row as `label: k of n hit`."""
    return f"{row.label}: {row.hits} of {row.repeats} hit"


def _phase(f: PromptCacheFigures, phase: str) -> list[CacheProbeRow]:
    return [r for r in f.rows if r.phase == phase and r.repeats]


def _lengths(f: PromptCacheFigures) -> str | None:
    rows = _phase(f, "length")
    if not rows:
        return None
    hit = [r for r in rows if r.hits]
    missed = [r for r in rows if not r.hits]
    minimum = f" (documented minimum {f.min_tokens:,})" if f.min_tokens else ""
    if hit and missed:
        return f"By prefix length{minimum}, " + "; ".join(row_words(r) for r in rows) + "."
    if hit:
        return f"Every prefix length probed was cached{minimum}."
    return f"No prefix length probed was cached{minimum}."


def _others(f: PromptCacheFigures) -> str | None:
    parts = []
    for phase, name in (
        ("evict", "eviction"),
        ("concurrency", "concurrency"),
        ("routing", "routing"),
    ):
        rows = _phase(f, phase)
        if rows:
            parts.append(f"{name}: " + ", ".join(row_words(r) for r in rows))
    if not parts:
        return None
    return "; ".join(parts).capitalize() + "."


def prompt_cache_answer(f: PromptCacheFigures) -> str:
    """Lead: the repeats that hit and the TTFT a hit saved; then the lengths, the
    lifetime, and eviction, concurrency and routing (with the money saved)."""
    judged = sum(r.repeats for r in f.rows)
    hits = sum(r.hits for r in f.rows)
    if not f.cached_reported:
        return (
            "The provider reported no cached-token count, so no repeat can be called a hit "
            "or a miss (labkit reads OpenAI cached_tokens, Anthropic "
            "cache_read_input_tokens, llama.cpp cache_n)."
        )
    lead = f"{describe_share(proportion(hits, judged))} of the repeats found their prefix cached"
    if f.ttft_saved is not None and f.ttft_saved.value is not None:
        lead += f"; a hit cut TTFT by {say(f.ttft_saved)} (paired with its cold prime)"
        if f.ttft_cold is not None and f.ttft_hit is not None:
            lead += (
                f", from a cold median of {_number(f.ttft_cold.value or 0)} ms to "
                f"{_number(f.ttft_hit.value or 0)} ms"
            )
    lead += "."
    after = [s for s in (_lengths(f), None, _others(f)) if s]
    if f.lifetime is not None:
        words = (
            f"An unused prefix stayed cached {lifetime_words(f.lifetime)}, bracketed by "
            f"{f.lifetime.trials} gap probes"
        )
        if f.money is not None and f.money.saved_per_hit_usd.value is not None:
            words += f"; a hit saved {say(f.money.saved_per_hit_usd, 'USD')}"
        after.insert(1 if len(after) else 0, words + ".")
    elif f.money is not None and f.money.saved_per_hit_usd.value is not None:
        after.append(f"A hit saved {say(f.money.saved_per_hit_usd, 'USD')}.")
    return " ".join([lead, *after[:3]])
