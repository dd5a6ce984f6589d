"""Grading question 3 (`determinism`): identical or not, where replies split, and how likely
each branch was."""

from __future__ import annotations

import math

from labkit.analysis.selection import measured
from labkit.figures.determinism import DeterminismFigures
from labkit.records import LabAnswer, RequestRecord
from labkit.scoring.grading.base import Check, Truth, fact, figure, register_grader
from labkit.truth.log import TruthRequest

__all__ = ["grade_determinism"]


def _first_split(replies: list[list[str]]) -> int | None:
    """The 0-based index of the first token where any reply leaves the first (None: all equal)."""
    first = replies[0]
    worst: int | None = None
    for other in replies[1:]:
        if other == first:
            continue
        k = next((i for i, (a, b) in enumerate(zip(first, other, strict=False)) if a != b), None)
        k = min(len(first), len(other)) if k is None else k
        worst = k if worst is None else min(worst, k)
    return worst


def _probability(t: TruthRequest, step: int, token: str) -> float | None:
    if step >= len(t.steps):
        return None
    return next((p for tok, p in t.steps[step].candidates if tok == token), None)


@register_grader("determinism")
def grade_determinism(answer: LabAnswer, records: list[RequestRecord], truth: Truth) -> list[Check]:
    """Per variant, whether the replies were identical and the first token where they split,
    against the tokens the server drew; at the split, each branch's stated probability
    against the one it was drawn with."""
    f = answer.figures
    if not isinstance(f, DeterminismFigures):
        return []
    who = f"determinism · {answer.provider}"
    checks: list[Check] = []
    for row in f.variants:
        recs = [r for r in measured(records) if r.tags.get("variant") == row.variant]
        drawn = [t for r in recs if (t := truth.of(r)) is not None]
        if len(drawn) < 2 or any(not t.steps for t in drawn):
            continue
        replies = [[s.token for s in t.steps] for t in drawn]
        split = _first_split(replies)
        checks.append(fact(who, f"{row.variant}: identical replies", row.identical, split is None))
        name = f"{row.variant}: first different token (0-based)"
        checks.append(fact(who, name, row.first_divergent_token, split))
    seen = f.next_token
    for v in seen.variants if seen is not None else []:
        d = v.divergence
        if d is None:
            continue
        recs = [r for r in measured(records) if r.tags.get("variant") == v.variant]
        drawn = [t for r in recs if (t := truth.of(r)) is not None]
        for choice in d.taken:
            true_p = next(
                (p for t in drawn if (p := _probability(t, d.step, choice.token)) is not None),
                None,
            )
            checks.append(
                figure(
                    who,
                    f"{v.variant}: p of {choice.token!r} at token {d.step + 1}",
                    choice.p,
                    None if true_p is None or math.isnan(true_p) else true_p,
                    "p",
                )
            )
    return checks
