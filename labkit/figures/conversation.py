"""`conversation`: a row per turn number and cache variant, and each variant's growth."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from labkit.figures.base import _Figures, register_figures
from labkit.figures.stats import LinearFit

__all__ = ["ConversationFigures", "ConversationTurn", "ConversationVariant"]


class ConversationTurn(_Figures):
    """One turn number of one cache variant: medians over the sessions that reached it."""

    cache: Literal["on", "off"]
    turn: int = Field(description="0 for a session's first request.")
    ok: int = 0
    failed: int = 0
    input_tokens_p50: float | None = None
    cached_tokens_p50: float | None = Field(
        default=None, description="Prompt tokens the provider says it served from its cache."
    )
    reuse_p50: float | None = Field(
        default=None, description="cached / input tokens: the KV (prefix) reuse the count implies."
    )
    reusable_p50: float | None = Field(
        default=None,
        description="The previous turn's input and output tokens as a share of this prompt: "
        "what a perfect prefix cache could reuse (the chat template around the answer not "
        "counted).",
    )
    ttft_ms_p50: float | None = None
    ttft_ms_p90: float | None = None
    prefill_ms_p50: float | None = Field(default=None, description="The provider's own prefill.")


class ConversationVariant(_Figures):
    """One cache variant over all turns: how TTFT grew against the history it carried."""

    cache: Literal["on", "off"]
    sessions: int = Field(description="Sessions with at least one successful turn.")
    complete_sessions: int = 0
    first_ttft_ms: float | None = None
    last_ttft_ms: float | None = None
    first_input_tokens: float | None = None
    last_input_tokens: float | None = None
    last_reuse: float | None = None
    ttft_fit: LinearFit | None = Field(
        default=None, description="TTFT against input tokens, over every successful turn."
    )


@register_figures
class ConversationFigures(_Figures):
    """`conversation`: a row per turn number and cache variant, and each variant's growth."""

    kind: Literal["conversation"] = "conversation"
    turns: list[ConversationTurn] = Field(default_factory=list)
    variants: list[ConversationVariant] = Field(default_factory=list)
    cache_switch: bool = Field(
        default=True, description="Whether the provider can turn its prompt cache off."
    )
