"""`next_token`: the model's candidates at each step of each reply (also `determinism`'s
`next_token`), where the repeats diverged, and the greedy check."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from labkit.figures.base import _Figures, register_figures
from labkit.figures.slo import _ExperimentFigures

__all__ = [
    "Divergence",
    "GreedyMiss",
    "NextTokenFigures",
    "NextTokenStep",
    "NextTokenVariant",
    "TokenChoice",
]


class TokenChoice(_Figures):
    """A token and its probability at one step."""

    token: str
    p: float = Field(description="Probability (exp of the provider's logprob), 0..1.")


class NextTokenStep(_Figures):
    """One output token of one reply: the token taken, its probability, the candidates."""

    token: str
    p: float
    entropy_bits: float = Field(
        description="Entropy of the step's top candidates with the rest of the probability "
        "as one outcome (scipy.stats.entropy, base 2): a lower bound of the full entropy."
    )
    candidates: list[TokenChoice] = Field(default_factory=list)


class Divergence(_Figures):
    """Where the repeats of one variant first took different tokens, and how likely each was."""

    step: int = Field(
        description="0-based index of the first output token that differs (said 1-based: "
        "token 1 is the first)."
    )
    prefix: str = Field(description="The text all repeats shared before it.")
    taken: list[TokenChoice] = Field(
        description="What each distinct branch took there, with its probability (first "
        "reply's first)."
    )
    candidates: list[TokenChoice] = Field(
        default_factory=list, description="The first reply's candidates at that step."
    )
    margin: float | None = Field(
        default=None, description="Probability of the top candidate minus the second's."
    )


class GreedyMiss(_Figures):
    """A step at temperature 0 where the token taken was not the top candidate."""

    step: int = Field(description="0-based index of the output token (said 1-based).")
    taken: TokenChoice
    top: TokenChoice
    margin: float = Field(description="Probability of the top candidate minus the second's.")


class NextTokenVariant(_Figures):
    """One sampling variant's replies as steps, and what the candidates explain."""

    variant: str
    params: dict[str, Any] = Field(default_factory=dict)
    replies: list[list[NextTokenStep]] = Field(
        default_factory=list, description="Each repeat's steps, in send order."
    )
    truncated: bool = Field(
        default=False, description="Some reply's logprobs were cut at the record's bound."
    )
    divergence: Divergence | None = Field(
        default=None, description="Where the repeats first differed; None: they never did."
    )
    greedy: bool | None = Field(
        default=None,
        description="At temperature 0: whether the top candidate was taken at every step "
        "of every repeat; None above temperature 0.",
    )
    greedy_misses: list[GreedyMiss] = Field(default_factory=list)


@register_figures
class NextTokenFigures(_ExperimentFigures):
    """`next_token`: per variant, each reply's steps with candidates, divergence, greedy check."""

    kind: Literal["next_token"] = "next_token"
    top_k: int
    inspected: bool = Field(description="Whether the provider returned any logprobs.")
    not_inspected_because: str | None = None
    variants: list[NextTokenVariant] = Field(default_factory=list)
