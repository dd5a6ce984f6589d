"""`same_model`: whether each provider of one model name serves the reference's model — its
fingerprint (token counts, next-token distributions, stop mix) beside the reference's, and
the verdict (`labkit.figures.observatory.SameModelVerdict`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from labkit.figures.base import _Figures, register_figures
from labkit.figures.observatory import SameModelVerdict
from labkit.figures.slo import _ExperimentFigures

__all__ = ["PromptDistance", "SameModelFigures", "TextCount"]


class TextCount(_Figures):
    """One fixed text's prompt tokens here and at the reference, with the chat framing (the
    first text's count) taken off both, and a named tokenizer's count of the text."""

    text_id: str
    tokens: int | None = Field(description="The provider's input_tokens for the text.")
    reference_tokens: int | None = None
    beyond_framing: int | None = Field(
        default=None, description="tokens − the first text's tokens (the framing cancels)."
    )
    reference_beyond_framing: int | None = None
    named_tokenizer_tokens: int | None = Field(
        default=None, description="The text's count by the experiment's `tokenizer`."
    )
    equal: bool | None = Field(
        default=None, description="beyond_framing == reference_beyond_framing."
    )


class PromptDistance(_Figures):
    """One fixed prompt's first next-token distribution here and at the reference."""

    prompt_id: str
    total_variation: float | None = Field(
        default=None,
        description="½ Σ |p − q| over the union of both top candidates (the rest of each "
        "distribution as one outcome); None: a side returned no logprobs.",
    )
    top: str | None = Field(default=None, description="The likeliest first token here.")
    reference_top: str | None = None
    stop: str | None = Field(default=None, description="The reply's stop reason here.")
    reference_stop: str | None = None


@register_figures
class SameModelFigures(_ExperimentFigures):
    """`same_model`: the provider's fingerprint beside the reference's, and the verdict."""

    kind: Literal["same_model"] = "same_model"
    reference: str = Field(description="The reference provider's id.")
    is_reference: bool = False
    tokenizer: str | None = Field(default=None, description="The named tokenizer, if any.")
    tolerance: float = Field(
        description="The total variation two servers of one model may differ by (numerics)."
    )
    texts: list[TextCount] = Field(default_factory=list)
    prompts: list[PromptDistance] = Field(default_factory=list)
    stop_mix: dict[str, int] = Field(default_factory=dict)
    reference_stop_mix: dict[str, int] = Field(default_factory=dict)
    verdict: SameModelVerdict | None = Field(
        default=None, description="None for the reference itself."
    )
