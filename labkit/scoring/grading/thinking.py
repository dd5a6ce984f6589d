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
    true_decode_ms_per_token,
)
from labkit.truth.log import TruthRequest

__all__ = ["grade_thinking", "pace_strayed_ms"]


@register_grader("thinking")
def grade_thinking(answer: LabAnswer, records: list[RequestRecord], truth: Truth) -> list[Check]:
    """The mean estimated thinking time's interval must hold the mean true thinking time of
    the same requests (`TruthRequest.thinking_ms`); the mean hidden tokens, the counted ones;
    the requests said to hide their reasoning, the ones the server thought for.

    The estimate is hidden tokens × the visible decode pace, and a decode pace is graded to
    within `TOLERANCE["ms/token"]` (the client's stamp of the first output event is a little
    late, which shortens every measured decode span a little): the thinking time is graded
    to within that tolerance × the hidden tokens, as the same slack carried through; and
    within what the truth server's own visible pace strayed from its plan × the hidden
    tokens (`pace_strayed_ms`: a server that fell behind sends its late tokens in a burst,
    and an estimate from the pace a client saw inherits that, which is no error of its)."""
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
    strayed = mean_of([t.reasoning_tokens * pace_strayed_ms(t) for _, t in pairs]) or 0.0
    checks.append(
        figure(
            who,
            "thinking time, estimated (mean)",
            f.thinking_ms,
            mean_of([t.thinking_ms for _, t in pairs]),
            "ms",
            tolerance=TOLERANCE["ms"] + tokens * TOLERANCE["ms/token"] + strayed,
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


def pace_strayed_ms(t: TruthRequest) -> float:
    """How far the server's visible pace as sent (`true_decode_ms_per_token`) strayed from
    its plan (`decode_ms` over the same tokens), ms a token; 0 where there is no such pace."""
    sent = true_decode_ms_per_token(t)
    if sent is None or t.decode_ms is None:
        return 0.0
    return abs(sent - t.decode_ms / sum(t.event_tokens[1:]))
