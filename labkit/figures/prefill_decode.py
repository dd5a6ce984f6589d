"""`prefill_decode`: the prompt-length sweep, its fits and the cache variant."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from labkit.figures.base import _Figures, register_figures
from labkit.figures.slo import _ExperimentFigures
from labkit.figures.stats import LinearFit, PromptCost

__all__ = ["CacheEffect", "MarginalCost", "PrefillDecodeFigures", "PrefillPoint"]


class PrefillPoint(_Figures):
    """Medians of the cold requests at one target prompt length."""

    target_prompt_tokens: int
    input_tokens: float | None = None
    ttft_ms: float | None = None
    prefill_ms: float | None = None
    decode_ms_per_token: float | None = None
    provider_decode_ms_per_token: float | None = None
    cached_tokens: float | None = None
    n: int = 0


class MarginalCost(_Figures):
    """TTFT cost of one more prompt token between two consecutive sweep points."""

    from_tokens: float
    to_tokens: float
    ms_per_token: float


class CacheEffect(_Figures):
    """The repeated-prefix variant: TTFT of the first send against the cache hits."""

    prefix_tokens: int | None = None
    prime_ttft_ms: float | None = None
    hit_ttft_ms: float | None = None
    prime_cached_tokens: float | None = None
    hit_cached_tokens: float | None = None
    hit_input_tokens: float | None = None
    n_hits: int = 0


@register_figures
class PrefillDecodeFigures(_ExperimentFigures):
    """`prefill_decode`: the sweep, its fits and the cache variant."""

    kind: Literal["prefill_decode"] = "prefill_decode"
    points: list[PrefillPoint] = Field(default_factory=list)
    fit: LinearFit | None = Field(default=None, description="Client TTFT against input tokens.")
    server_prefill_fit: LinearFit | None = None
    decode_fit: LinearFit | None = Field(
        default=None, description="Client decode ms/token against input tokens."
    )
    cold_cache_hits: int = 0
    cache_control: str = ""
    cache: CacheEffect | None = None
    marginal_ms_per_token: list[MarginalCost] = Field(default_factory=list)
    ttft_model: PromptCost | None = Field(
        default=None, description="Client TTFT against input tokens, the model the data chose."
    )
    server_prefill_model: PromptCost | None = Field(
        default=None, description="The server's own prefill against input tokens, likewise."
    )
    client_bound: str | None = Field(
        default=None,
        description="The self-check's reason where it found these requests' stamps late; "
        "None: not flagged.",
    )
