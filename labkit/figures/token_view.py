"""`token_view`: one reply, token by token: its text, probability and candidates, when it
arrived, the server's own time at it, and whether the prompt came from cache."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from labkit.figures.base import _Figures, register_figures
from labkit.figures.next_token import TokenChoice
from labkit.figures.slo import _ExperimentFigures

__all__ = ["NOT_REPORTED", "TokenRow", "TokenViewFigures", "TokenViewReply"]

#: What a column the API gives nothing for says, in every cell of it.
NOT_REPORTED = "not reported by this API"


class TokenRow(_Figures):
    """One streamed token of one reply (an output event, where the API marks no tokens)."""

    i: int = Field(description="1-based position in the reply.")
    text: str = Field(description="Its text as it arrived (the rows' texts join to the reply).")
    p: float | None = Field(
        default=None, description="Its probability, 0..1 (None: not reported by this API)."
    )
    candidates: list[TokenChoice] = Field(
        default_factory=list, description="The top candidates at its step, likeliest first."
    )
    arrival_ms: float | None = Field(
        default=None,
        description="When the event carrying it arrived, ms from the request's start "
        "(`client.event_offsets_ms`).",
    )
    arrival_late_ms: float | None = Field(
        default=None,
        description="How late its arrival stamp may be (`client.stamp_lateness_ms`): it "
        "arrived between `arrival_ms` − this and `arrival_ms`.",
    )
    server_ms: float | None = Field(
        default=None,
        description="The server's own time at it, ms from the start of its prompt processing "
        "(llama.cpp `timings_per_token`); None: not reported by this API.",
    )


class TokenViewReply(_Figures):
    """One send of the prompt, as rows."""

    send: int = Field(description="1-based: 1 is the first send, 2 its repeat.")
    output_text: str = ""
    rows: list[TokenRow] = Field(default_factory=list)
    rows_are: Literal["tokens", "events"] = Field(
        default="tokens",
        description="`tokens`: a row per token (logprobs, or one token per event); "
        "`events`: a row per streamed event, where the API marks no tokens.",
    )
    truncated: bool = Field(default=False, description="Rows past the view's bound left out.")
    input_tokens: int | None = None
    cached_tokens: int | None = Field(
        default=None,
        description="Prompt tokens the provider says came from its cache (OpenAI "
        "`cached_tokens`, Anthropic `cache_read_input_tokens`, llama.cpp `cache_n`).",
    )
    from_cache: bool | None = Field(
        default=None,
        description="Whether most of the prompt (half or more of its tokens) came from cache; "
        "None: not reported by this API.",
    )


@register_figures
class TokenViewFigures(_ExperimentFigures):
    """`token_view`: each send's reply as rows, and the columns this API leaves empty."""

    kind: Literal["token_view"] = "token_view"
    top_k: int
    replies: list[TokenViewReply] = Field(default_factory=list)
    not_reported: list[str] = Field(
        default_factory=list,
        description="Columns no reply carried (`probability`, `server time`, `cache`): each "
        "shown as not reported by this API, never as blank or zero.",
    )
