"""Grading `same_model` against the truth server: the verdict each provider's answer states
beside the one the truth log implies (what model variant served it, how its replies ended),
and each prompt's stated total variation beside the true distributions' (`steps`)."""

from __future__ import annotations

from collections import Counter

from labkit.analysis.same_model import OTHER, total_variation
from labkit.figures.same_model import SameModelFigures
from labkit.records import LabAnswer, RequestRecord
from labkit.scoring.grading.base import Check, Truth, fact, figure, register_grader
from labkit.truth.log import TruthRequest

__all__ = ["grade_same_model", "true_verdict"]

#: A probability sent as a logprob and read back: rounding, summed over both sides.
_TV_TOLERANCE = 0.01


def _parts(label: str | None) -> dict[str, str]:
    out = {"tokenizer": "pieces", "model_salt": "0"}
    for part in (label or "").split(", "):
        key, eq, value = part.partition("=")
        if eq:
            out[key] = value
    return out


def _kind(t: TruthRequest) -> tuple[str, str]:
    parts = _parts(t.model_variant)
    return parts["tokenizer"], parts["model_salt"]


def _ended_share(truths: list[TruthRequest]) -> float | None:
    return sum(not t.capped for t in truths) / len(truths) if truths else None


def true_verdict(
    mine: list[TruthRequest],
    ref: list[TruthRequest],
    mine_replies: list[TruthRequest] | None = None,
    ref_replies: list[TruthRequest] | None = None,
) -> str:
    """The verdict the truth implies: another tokenizer, another model's distributions,
    another stop habit (most replies ended on their own at one and not at the other), or
    the reference's model (its numbers perhaps moved by another server's noise)."""
    a = Counter(_kind(t) for t in mine)
    b = Counter(_kind(t) for t in ref)
    (tok_a, salt_a), (tok_b, salt_b) = a.most_common(1)[0][0], b.most_common(1)[0][0]
    if tok_a != tok_b:
        return "differs: tokenizer"
    if salt_a != salt_b:
        return "differs: distributions"
    ended_a = _ended_share(mine if mine_replies is None else mine_replies)
    ended_b = _ended_share(ref if ref_replies is None else ref_replies)
    if ended_a is not None and ended_b is not None and (ended_a > 0.5) != (ended_b > 0.5):
        return "differs: behaviour"
    return "consistent"


def _first_step(t: TruthRequest) -> dict[str, float] | None:
    if not t.steps:
        return None
    dist = {token: p for token, p in t.steps[0].candidates}
    rest = 1.0 - sum(dist.values())
    if rest > 0:
        dist[OTHER] = rest
    return dist


@register_grader("same_model")
def grade_same_model(answer: LabAnswer, records: list[RequestRecord], truth: Truth) -> list[Check]:
    """The stated verdict against the truth's, and each prompt's total variation."""
    f = answer.figures
    if not isinstance(f, SameModelFigures) or f.verdict is None:
        return []
    who = f"same_model · {answer.provider}"
    ref_records = [
        r
        for r in truth.run_records
        if r.provider == f.reference and r.experiment == answer.experiment
    ]
    mine = truth.pairs(records)
    theirs = truth.pairs(ref_records)
    if not mine or not theirs:
        return []
    first = {r.prompt_id: t for r, t in mine if r.tags.get("phase") == "dist"}
    ref_first = {r.prompt_id: t for r, t in theirs if r.tags.get("phase") == "dist"}
    replies = [t for r, t in mine if r.tags.get("phase") == "dist"]
    ref_replies = [t for r, t in theirs if r.tags.get("phase") == "dist"]
    checks = [
        fact(
            who,
            "verdict",
            f.verdict.verdict,
            true_verdict([t for _, t in mine], [t for _, t in theirs], replies, ref_replies),
            why="the truth log's model variants and reply ends say otherwise",
        )
    ]
    for row in f.prompts:
        a, b = first.get(row.prompt_id), ref_first.get(row.prompt_id)
        p = _first_step(a) if a is not None else None
        q = _first_step(b) if b is not None else None
        if row.total_variation is None or p is None or q is None:
            continue
        checks.append(
            figure(
                who,
                f"{row.prompt_id}: total variation from the reference",
                row.total_variation,
                total_variation(p, q),
                "p",
                tolerance=_TV_TOLERANCE,
            )
        )
    return checks
