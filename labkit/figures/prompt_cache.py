"""`prompt_cache`: a provider's prompt cache probed — which prefixes it keeps, for how long,
under concurrency and routing, and what a hit saves in time and money."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from labkit.figures.base import _Figures, register_figures
from labkit.figures.slo import _ExperimentFigures
from labkit.figures.stats import Mean, Proportion, Quantile

__all__ = [
    "CacheLifetime",
    "CacheMoney",
    "CachePhase",
    "CacheProbeRow",
    "PromptCacheFigures",
]

#: What a row varies: the prefix's length, the idle gap before the repeat, the other
#: prompts sent between (eviction), the repeats sent at once, a routing key or none.
CachePhase = Literal["length", "gap", "evict", "concurrency", "routing"]


class CacheProbeRow(_Figures):
    """One setting of one phase: its probes (a priming request with a fresh nonce, then its
    repeat or repeats) and how often a repeat found the prefix cached."""

    phase: CachePhase
    setting: float = Field(
        description="The value varied: prefix tokens (length), seconds (gap), prompts sent "
        "between (evict), repeats at once (concurrency), 1 with a routing key and 0 without "
        "(routing)."
    )
    label: str = Field(description="The setting in words (`1,024 tokens`, `gap 5 s`).")
    probes: int = Field(description="Priming requests that succeeded.")
    repeats: int = Field(description="Repeats that succeeded and reported cached tokens.")
    hits: int = Field(description="Repeats with at least `hit_share` of their prompt cached.")
    hit_rate: Proportion = Field(description="hits / repeats, with its exact interval.")
    unreported: int = Field(
        default=0, description="Repeats that succeeded but reported no cached-token count."
    )
    input_tokens_p50: float | None = Field(
        default=None, description="The primes' prompt tokens as the provider counted them."
    )
    cached_tokens_p50: float | None = Field(
        default=None, description="The repeats' cached tokens (median)."
    )
    gaps_s: list[float] = Field(
        default_factory=list,
        description="gap: each probe's measured gap, the prime's start to its repeat's "
        "start (s), in probe order.",
    )
    gap_hits: list[bool] = Field(
        default_factory=list, description="gap: whether each of those repeats hit."
    )


class CacheLifetime(_Figures):
    """How long an unused prefix stays cached, bracketed by the gap probes.

    Not a statistical interval but a bracket of observations: `lo` is the longest measured
    gap whose repeat still hit, `hi` the shortest whose repeat missed. A cache that keeps a
    prefix a fixed time after its last use has its lifetime in (lo, hi]; where a miss came
    at a shorter gap than some hit (`consistent` false: the lifetime varies, or other
    traffic evicted the prefix), the bracket is the span between them.
    """

    lo_s: float | None = Field(
        default=None, description="Lower bound (s); None: no repeat hit at any gap."
    )
    hi_s: float | None = Field(
        default=None, description="Upper bound (s); None: no repeat missed (it lives longer)."
    )
    value_s: float | None = Field(
        default=None,
        description="The bracket's middle; the bound alone where the other is open.",
    )
    consistent: bool = Field(
        default=True, description="Every hit came at a shorter gap than every miss."
    )
    trials: int = Field(default=0, description="Gap probes with a judged repeat.")


class CacheMoney(_Figures):
    """What the cached tokens saved, at the config's prices (USD per million tokens)."""

    input_per_mtok: float
    cached_input_per_mtok: float
    saved_per_hit_usd: Mean = Field(
        description="Per hit repeat: its cached tokens × (input − cached input price)."
    )
    saved_share: float | None = Field(
        default=None,
        description="The hit repeats' saving over what their prompts cost uncached (0 to 1).",
    )


@register_figures
class PromptCacheFigures(_ExperimentFigures):
    """`prompt_cache`: a row per probed setting, the lifetime bracket, the saving."""

    kind: Literal["prompt_cache"] = "prompt_cache"
    min_tokens: int | None = Field(
        default=None,
        description="The documented shortest cacheable prompt the probe was planned around "
        "(the config's `min_tokens`, else the provider's); None: not documented.",
    )
    hit_share: float = Field(
        default=0.5, description="A repeat is a hit when this share of its prompt was cached."
    )
    cached_reported: bool = Field(
        default=True, description="Whether any repeat reported a cached-token count."
    )
    rows: list[CacheProbeRow] = Field(default_factory=list)
    lifetime: CacheLifetime | None = None
    ttft_cold: Quantile | None = Field(
        default=None, description="TTFT of the primes that found nothing cached."
    )
    ttft_hit: Quantile | None = Field(default=None, description="TTFT of the hit repeats.")
    ttft_saved: Mean | None = Field(
        default=None,
        description="Per hit probe, its cold prime's TTFT less its repeat's (paired), mean "
        "with its t-interval.",
    )
    money: CacheMoney | None = None
    server_slots: int | None = Field(
        default=None, description="The server's slots (llama-server /props), where reported."
    )
    context_tokens: int | None = Field(
        default=None, description="The server's context per slot, where known."
    )
