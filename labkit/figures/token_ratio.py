"""`token_ratio`: each text's size in characters, bytes and tokens, every tokenizer at
hand side by side."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from labkit.figures.base import _Figures, register_figures
from labkit.figures.slo import _ExperimentFigures

__all__ = ["TokenPieces", "TokenRatioFigures", "TokenRatioRow", "TokenizerCount", "TokenizerSpread"]


class TokenRatioRow(_Figures):
    """One text: its size in characters, bytes and tokens, and the 4-characters rule."""

    text_id: str
    text: str | None = Field(
        default=None, description="The text itself (None in a lab.json written before)."
    )
    chars: int
    bytes: int
    tokens: int | None = None
    token_source: str
    chars_per_token: float | None = None
    bytes_per_token: float | None = None
    rule_of_4_estimate: float
    rule_of_4_error_pct: float | None = None
    usage_input_tokens: float | None = None
    usage_text_tokens: float | None = None
    tiktoken_tokens: int | None = Field(
        default=None, description="The offline tokenizer's count, where labkit has one."
    )


class TokenizerCount(_Figures):
    """One text cut by one tokenizer (the side-by-side table)."""

    text_id: str
    tokenizer: str = Field(description="`tiktoken:o200k_base`, or a provider's own tokenizer.")
    tokens: int
    chars_per_token: float | None = None
    bytes_per_token: float | None = None


class TokenizerSpread(_Figures):
    """For one text: the tokenizer needing the fewest tokens and the one needing the most."""

    text_id: str
    most_efficient: str
    most_efficient_tokens: int
    least_efficient: str
    least_efficient_tokens: int
    ratio: float = Field(description="least_efficient_tokens / most_efficient_tokens.")


class TokenPieces(_Figures):
    """One text as one tokenizer cut it: each token's text (`display_piece`), in order."""

    text_id: str
    tokenizer: str
    pieces: list[str] = Field(default_factory=list)
    tokens_per_piece: list[int] = Field(
        default_factory=list,
        description="How many tokens each piece is: more than 1 where a character's bytes "
        "were split across tokens (the piece is then the whole character). Empty: 1 each.",
    )


@register_figures
class TokenRatioFigures(_ExperimentFigures):
    """`token_ratio`: a row per text, and every tokenizer at hand side by side."""

    kind: Literal["token_ratio"] = "token_ratio"
    rows: list[TokenRatioRow] = Field(default_factory=list)
    baseline_usage_input_tokens: float | None = None
    count_error: str | None = None
    side_by_side: list[TokenizerCount] = Field(default_factory=list)
    spread: list[TokenizerSpread] = Field(default_factory=list)
    input_tokens_local_diffs: list[int] = Field(
        default_factory=list,
        description="usage.input_tokens_local_diff of each request that has one.",
    )
    pieces: list[TokenPieces] = Field(
        default_factory=list, description="Token boundaries of each text, per tokenizer."
    )
    chat_framing_tokens: float | None = Field(
        default=None,
        description="Tokens the provider's chat template adds around a text sent as one "
        "user message (its count of the whole prompt less the text's own tokens); None: "
        "not measured (`chat_framing_missing` says why).",
    )
    chat_framing_source: str | None = Field(
        default=None,
        description="How it was measured: `usage` (a sent one-character message's "
        "usage.input_tokens less its own tokens), or the provider's count of the chat "
        "prompt without generating (`llamacpp:/apply-template + /tokenize`).",
    )
    chat_framing_missing: str | None = Field(
        default=None, description="Why the framing could not be measured."
    )
