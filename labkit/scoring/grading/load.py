"""Grading load levels (`load`): each level's TTFT, the requests it served, its queue."""

from __future__ import annotations

from labkit.analysis.selection import latest_pass
from labkit.figures.load import LoadFigures
from labkit.records import LabAnswer, RequestRecord
from labkit.scoring.grading.base import (
    Check,
    Truth,
    fact,
    figure,
    median_of,
    register_grader,
    true_decode_ms_per_token,
    true_ttft_ms,
)

__all__ = ["grade_load"]


@register_grader("load")
def grade_load(answer: LabAnswer, records: list[RequestRecord], truth: Truth) -> list[Check]:
    """Per level: the requests it served, its TTFT median (with its interval) against the
    true TTFTs of its requests (the wait for a slot included: the server logs it), its
    decode per token, and the server's queue where the level reports it."""
    f = answer.figures
    if not isinstance(f, LoadFigures):
        return []
    who = f"load · {answer.provider}"
    checks: list[Check] = []
    for level in f.levels:
        mine = latest_pass([r for r in records if r.tags.get("level") == level.level])
        pairs = truth.pairs(mine)
        name = level.display_title
        checks.append(fact(who, f"{name}: requests served", level.ok, len(pairs)))
        stated = level.ttft.p50 if level.ttft is not None else level.ttft_ms_p50
        true = median_of([true_ttft_ms(r, t) for r, t in pairs])
        checks.append(figure(who, f"{name}: TTFT (median)", stated, true, "ms"))
        decode = median_of([true_decode_ms_per_token(t) for _, t in pairs])
        stated_decode = level.decode_ms_per_token_p50
        what = f"{name}: decode per token (median)"
        checks.append(figure(who, what, stated_decode, decode, "ms/token"))
        if level.provider_queue_ms_p50 is not None:
            queue = median_of([t.queue_ms for _, t in pairs])
            what = f"{name}: provider queue (median)"
            checks.append(figure(who, what, level.provider_queue_ms_p50, queue, "ms", 0.01))
    return checks
