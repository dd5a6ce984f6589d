"""`determinism`: per sampling variant, whether the repeats' outputs were identical."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from labkit.figures.base import _Figures, register_figures
from labkit.figures.next_token import NextTokenFigures
from labkit.figures.slo import _ExperimentFigures

__all__ = ["DeterminismFigures", "VariantRow"]


class VariantRow(_Figures):
    """One sampling variant: were its outputs identical, and where did they diverge."""

    variant: str
    params: dict[str, Any] = Field(default_factory=dict)
    n: int
    identical: bool | None = None
    distinct_outputs: int
    first_divergent_token: int | None = Field(
        default=None,
        description="0-based index of the first compared unit (token of `tokenizer`, or "
        "character) where a repeat differs from the first: the count of units they shared. "
        "Every rendering says positions 1-based (token 1 is the first).",
    )
    common_prefix_tokens: int | None = None
    output_tokens: list[int] = Field(default_factory=list)
    system_fingerprints: list[str] = Field(default_factory=list)
    outputs: list[list[str]] = Field(
        default_factory=list,
        description="Each repeat's output as token texts, in send order (the compared tokens).",
    )


@register_figures
class DeterminismFigures(_ExperimentFigures):
    """`determinism`: a row per variant and the tokenizer the outputs were compared with."""

    kind: Literal["determinism"] = "determinism"
    variants: list[VariantRow] = Field(default_factory=list)
    tokenizer: str = "characters"
    next_token: NextTokenFigures | None = Field(
        default=None,
        description="The candidates behind the replies, with `top_logprobs` set (else None).",
    )
