"""`thinking`: hidden reasoning's time, estimated, and each TTFT split into waiting, thinking
and answering."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from labkit.figures.base import _Figures, register_figures
from labkit.figures.slo import _ExperimentFigures
from labkit.figures.stats import Mean

__all__ = ["ESTIMATED", "ThinkingFigures", "ThinkingRequest"]

#: The label every estimated thinking time carries, wherever it is shown.
ESTIMATED: Literal["estimated"] = "estimated"


class ThinkingRequest(_Figures):
    """One request whose reasoning was counted but never streamed, its time to the first
    visible token split in three (`labkit.analysis.thinking`)."""

    record_id: str
    reasoning_tokens: int = Field(description="Hidden reasoning tokens the provider counted.")
    decode_ms_per_token: float = Field(
        description="The visible stream's own decode pace (client.decode_ms_per_token)."
    )
    ttft_ms: float = Field(description="Time to the first visible token (client.ttft_ms).")
    thinking_ms: float = Field(
        description="Estimated: reasoning_tokens × decode_ms_per_token (the hidden tokens taken "
        "to be decoded at the visible pace)."
    )
    waiting_ms: float = Field(
        description="ttft_ms − thinking_ms: before the provider began thinking (network, "
        "queue, prefill); below 0 when the estimate is more than the TTFT."
    )
    answering_ms: float = Field(
        description="The visible answer: last_token_ms − ttft_ms (measured)."
    )
    server_prefill_ms: float | None = Field(
        default=None,
        description="Of the waiting, the prefill the server reports (provider_timings."
        "prefill_ms); None: not reported.",
    )


@register_figures
class ThinkingFigures(_ExperimentFigures):
    """`thinking`: the estimate over the requests with hidden reasoning, each part a mean
    with its 95% t-interval across those requests (means add: waiting + thinking = TTFT)."""

    kind: Literal["thinking"] = "thinking"
    params: dict[str, Any] = Field(default_factory=dict)
    label: Literal["estimated"] = Field(
        default=ESTIMATED, description="Thinking time is estimated, never measured."
    )
    n: int = Field(default=0, description="Successful measured replies.")
    hidden: int = Field(
        default=0, description="Replies whose reasoning was counted but not streamed."
    )
    streamed_reasoning: int = Field(
        default=0,
        description="Replies that streamed their reasoning (or a summary of it): its time is "
        "measured in the stream (ttft_text_ms − ttft_ms), not estimated here.",
    )
    no_reasoning: int = Field(default=0, description="Replies with no reasoning counted.")
    not_estimated_because: str | None = Field(
        default=None, description="Why no estimate was made (None: one was)."
    )
    reasoning_tokens: Mean | None = None
    decode_ms_per_token: Mean | None = Field(
        default=None, description="The visible decode pace the estimate rests on."
    )
    ttft_ms: Mean | None = None
    thinking_ms: Mean | None = Field(
        default=None, description="Estimated thinking time: the mean of the requests' estimates."
    )
    waiting_ms: Mean | None = None
    server_prefill_ms: Mean | None = Field(
        default=None,
        description="Of the waiting, the server's own prefill, where every estimated reply "
        "reports one (None: not reported).",
    )
    answering_ms: Mean | None = None
    thinking_share: float | None = Field(
        default=None, description="Estimated thinking's share of the mean TTFT."
    )
    requests: list[ThinkingRequest] = Field(default_factory=list)
