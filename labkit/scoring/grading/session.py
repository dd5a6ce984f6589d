"""Grading agent sessions (`session`): the tool calls each turn made, and which sessions
ended with an answer."""

from __future__ import annotations

from labkit.figures.session import SessionFigures
from labkit.records import LabAnswer, RequestRecord, StopReason
from labkit.scoring.grading.base import Check, Truth, fact, register_grader

__all__ = ["grade_session"]


@register_grader("session")
def grade_session(answer: LabAnswer, records: list[RequestRecord], truth: Truth) -> list[Check]:
    """Every turn on which the server made a call (natively, or as text a grammar forced)
    carries that call in its record, with stop `tool_call`, and no other turn does; a session
    is complete exactly when its main agent's last turn was a text answer that the server
    ended on its own."""
    f = answer.figures
    if not isinstance(f, SessionFigures):
        return []
    who = f"session · {answer.provider}"
    pairs = truth.pairs(records)
    called = [(r, t) for r, t in pairs if t.tool_calls]
    carried = [
        (r, t)
        for r, t in called
        if [c.name for c in r.tool_calls or []] == [c.name for c in t.tool_calls]
        and r.stop_reason == StopReason.TOOL_CALL
    ]
    false_calls = sum(1 for r, t in pairs if not t.tool_calls and r.tool_calls)
    checks = [
        fact(who, "turns that made a call, carrying it", len(carried), len(called)),
        fact(who, "turns with a call the server never made", false_calls, 0),
    ]
    last: dict[object, tuple[int, RequestRecord]] = {}
    for r in records:
        if r.warmup or r.tags.get("agent") != "0":
            continue
        key = (r.tags.get("session"), r.tags.get("session_run"))
        step = int(r.tags.get("step", 0))
        if key not in last or step >= last[key][0]:
            last[key] = (step, r)
    answered = 0
    for _, r in last.values():
        t = truth.of(r)
        if r.error is None and t is not None and not t.tool_calls and not t.capped:
            answered += 1
    stated = sum(1 for s in f.sessions if s.complete)
    checks.append(fact(who, "sessions that ended with an answer", stated, answered))
    return checks
