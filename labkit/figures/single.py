"""`single`: medians of each stage, and the median request's timeline."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from labkit.figures.base import _Figures, register_figures
from labkit.figures.slo import _ExperimentFigures
from labkit.figures.stats import Quantile

__all__ = ["PromptCacheRun", "RequestTimeline", "SingleFigures"]


class RequestTimeline(_Figures):
    """One representative request (the median TTFT) as offsets from t_start, in ms, with the
    server's own prefill and decode where it reported them: the request-anatomy picture."""

    record_id: str
    headers_ms: float | None = None
    first_event_ms: float | None = None
    ttft_ms: float | None = None
    last_token_ms: float | None = None
    e2e_ms: float | None = None
    event_offsets_ms: list[float] = Field(default_factory=list)
    provider_prefill_ms: float | None = None
    provider_decode_ms: float | None = None


class PromptCacheRun(_Figures):
    """The requests of one cache state (`cold`: nothing of the prompt cached; `cached`: sent
    again, its prefix read from the KV cache), as the provider's own cached-token counts say
    (or, where it reports none, as labkit asked: `confirmed` false)."""

    state: Literal["cold", "cached"]
    n: int
    ttft: Quantile = Field(description="Client TTFT, median with its interval.")
    input_tokens_p50: float | None = None
    cached_tokens_p50: float | None = Field(
        default=None, description="Median prompt tokens the provider served from its cache."
    )
    provider_prefill_ms_p50: float | None = Field(
        default=None, description="The server's own prompt reading (its prefill), median."
    )
    confirmed: bool = Field(
        default=True,
        description="Whether the provider's cached-token counts confirm the state; false: it "
        "reports none, and the state is what labkit asked for.",
    )


@register_figures
class SingleFigures(_ExperimentFigures):
    """`single`: medians of each stage over the measured requests."""

    kind: Literal["single"] = "single"
    n: int = Field(description="Successful measured requests.")
    failed: int = Field(description="Failed measured requests.")
    input_tokens_p50: float | None = None
    output_tokens_p50: float | None = None
    headers_ms_p50: float | None = None
    first_event_ms_p50: float | None = None
    ttft_ms_p50: float | None = None
    ttft_ms_p90: float | None = None
    last_token_ms_p50: float | None = None
    e2e_ms_p50: float | None = None
    reply_ms_p50: float | None = Field(
        default=None,
        description="Median per request of last_token_ms − ttft_ms: the reply after its "
        "first token, the same cold or cached.",
    )
    decode_ms_per_token_p50: float | None = None
    provider_prefill_ms_p50: float | None = None
    provider_decode_ms_per_token_p50: float | None = None
    stop_reasons: dict[str, int] = Field(
        default_factory=dict, description="How often each stop reason occurred."
    )
    timeline: RequestTimeline | None = None
    cold: PromptCacheRun | None = Field(
        default=None, description="The requests nothing of whose prompt was cached."
    )
    cached: PromptCacheRun | None = Field(
        default=None, description="The requests sent again with their prompt cached."
    )
    cache_hits: int = Field(
        default=0,
        description="Requests the provider served with part of their prompt from its cache "
        "(cached tokens > 0), whichever way they were sent.",
    )
    repeats_uncached: int = Field(
        default=0,
        description="Requests sent again for a cache hit that the provider served with no "
        "cached token (it caches no prompt this short, or not at all).",
    )
    ttft: Quantile | None = Field(
        default=None, description="Client TTFT median with its interval (the answer's lead)."
    )
    decode_per_token: Quantile | None = Field(
        default=None, description="Client decode ms per output token, median with its interval."
    )
    client_bound: str | None = Field(
        default=None,
        description="The self-check's reason where it found these requests' stamps late "
        "(their timings hold labkit's own delay); None: not flagged.",
    )
