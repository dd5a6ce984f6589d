"""Grading question 2 (`token_ratio`): how many tokens the provider's tokenizer made of each
text, against the truth server's own tokenizer."""

from __future__ import annotations

from labkit.figures.token_ratio import TokenRatioFigures
from labkit.records import LabAnswer, RequestRecord
from labkit.scoring.grading.base import Check, Truth, figure, register_grader
from labkit.truth.reply import pieces

__all__ = ["grade_token_ratio"]


@register_grader("token_ratio")
def grade_token_ratio(answer: LabAnswer, records: list[RequestRecord], truth: Truth) -> list[Check]:
    """Each text's token count and characters per token by the provider's own tokenizer (its
    `/tokenize`, which the truth server answers) against the truth server's cut of it."""
    f = answer.figures
    if not isinstance(f, TokenRatioFigures):
        return []
    who = f"token_ratio · {answer.provider}"
    checks = []
    for row in f.rows:
        if row.text is None or not row.token_source.endswith("/tokenize"):
            continue  # an offline tokenizer's count: not the server's to know
        tokens = len(pieces(row.text))
        checks.append(figure(who, f"{row.text_id}: tokens", row.tokens, float(tokens), "tokens"))
        checks.append(
            figure(
                who,
                f"{row.text_id}: characters per token",
                row.chars_per_token,
                row.chars / tokens if tokens else None,
                "ratio",
                tolerance=1e-9,
            )
        )
    return checks
