"""`prefill_decode`: the prompt-length sweep, its fits and the cache variant."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from labkit.figures.base import _Figures, register_figures
from labkit.figures.slo import _ExperimentFigures
from labkit.figures.stats import Estimate, LinearFit, PromptCost, Quantile

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
    ttft_values: list[float] = Field(
        default_factory=list, description="Each cold request's TTFT (the spread, drawn)."
    )
    decode_values: list[float] = Field(
        default_factory=list, description="Each cold request's decode ms per token."
    )


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
        default=None,
        description="Client decode ms/token against input tokens, over every cold request.",
    )
    cold_cache_hits: int = 0
    cache_control: str = ""
    cache: CacheEffect | None = None
    marginal_ms_per_token: list[MarginalCost] = Field(default_factory=list)
    prompt_token_ms: Estimate | None = Field(
        default=None,
        description="What one prompt token costs to read: the straight line's slope of TTFT "
        "against input tokens over every cold request (ms per token, 95% CI).",
    )
    generated_token_ms: Quantile | None = Field(
        default=None,
        description="What one generated token costs: median client decode ms per output "
        "token over the cold requests, with its interval.",
    )
    generated_vs_prompt: Estimate | None = Field(
        default=None,
        description="generated_token_ms / prompt_token_ms: how many prompt tokens are read in "
        "the time one token is generated (95% percentile-bootstrap interval over requests).",
    )
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
