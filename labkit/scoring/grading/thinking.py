"""Grading `thinking`: the estimated hidden thinking time against the time the truth server
truly thought, and the hidden reasoning tokens against the ones it counted."""

from __future__ import annotations

from labkit.figures.thinking import ThinkingFigures
from labkit.records import LabAnswer, RequestRecord
from labkit.scoring.grading.base import (
    TOLERANCE,
    Check,
    Truth,
    fact,
    figure,
    mean_of,
    register_grader,
)

__all__ = ["grade_thinking"]


@register_grader("thinking")
def grade_thinking(answer: LabAnswer, records: list[RequestRecord], truth: Truth) -> list[Check]:
    """The mean estimated thinking time's interval must hold the mean true thinking time of
    the same requests (`TruthRequest.thinking_ms`); the mean hidden tokens, the counted ones;
    the requests said to hide their reasoning, the ones the server thought for.

    The estimate is hidden tokens × the visible decode pace, and a decode pace is graded to
    within `TOLERANCE["ms/token"]` (the client's stamp of the first output event is a little
    late, which shortens every measured decode span a little): the thinking time is graded
    to within that tolerance × the hidden tokens, as the same slack carried through."""
    f = answer.figures
    if not isinstance(f, ThinkingFigures):
        return []
    who = f"thinking · {answer.provider}"
    estimated = {e.record_id for e in f.requests}
    pairs = [(r, t) for r, t in truth.pairs(records) if r.record_id in estimated]
    measured = [(r, t) for r, t in truth.pairs(records) if not r.warmup and r.error is None]
    thought = sum(1 for _, t in measured if t.reasoning_tokens)
    checks = [fact(who, "replies with hidden reasoning", f.hidden, thought)]
    if not pairs:
        return checks
    tokens = mean_of([float(t.reasoning_tokens) for _, t in pairs]) or 0.0
    checks.append(
        figure(
            who,
            "thinking time, estimated (mean)",
            f.thinking_ms,
            mean_of([t.thinking_ms for _, t in pairs]),
            "ms",
            tolerance=TOLERANCE["ms"] + tokens * TOLERANCE["ms/token"],
        )
    )
    checks.append(
        figure(
            who,
            "hidden reasoning tokens (mean)",
            f.reasoning_tokens,
            tokens,
            "tokens",
        )
    )
    return checks
