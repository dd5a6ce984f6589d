"""The thinking grade's slack for the truth server's own lateness: a server that fell behind
sends its late visible tokens in a burst, so the pace a client measures is faster than the
plan and an estimate from it reads low by the same amount; that is no error of the estimate
(CI beside two CPU hogs: the truth server's first token 12 ms late, the estimate 88 ms
against a planned 120). A thinking pace unlike the visible one is still caught."""

from __future__ import annotations

from pathlib import Path

import pytest

from labkit.figures.stats import Mean
from labkit.figures.thinking import ThinkingFigures, ThinkingRequest
from labkit.records import LabAnswer
from labkit.scoring.grading.base import Truth
from labkit.scoring.grading.thinking import grade_thinking, pace_strayed_ms
from labkit.truth.log import TruthLog, TruthRequest
from tests.support.records import make_record

pytestmark = pytest.mark.unit

MS = 1_000_000
PACE_MS = 2.0
TOKENS = 24  # visible, one an event
REASONING = 60


def _truth(i: int, late_ms: float, thinking_ms: float) -> TruthRequest:
    """A request planned at `PACE_MS` whose first visible token went `late_ms` late and the
    rest on the plan's clock (the server caught up)."""
    t0 = 10_000 * MS * (i + 1)
    events = [t0 + int(late_ms * MS)] + [t0 + int(k * PACE_MS * MS) for k in range(1, TOKENS)]
    return TruthRequest.model_validate(
        {
            "id": f"resp-{i}",
            "api": "chat",
            "stream": True,
            "model": "m",
            "t_read_ns": t0 - 200 * MS,
            "t_start_ns": t0 - 200 * MS,
            "events_ns": events,
            "events_sent_ns": events,
            "event_tokens": [1] * TOKENS,
            "t_end_ns": events[-1],
            "prompt_tokens": 10,
            "output_tokens": TOKENS,
            "capped": False,
            "decode_ms": (TOKENS - 1) * PACE_MS,
            "reasoning_tokens": REASONING,
            "thinking_ms": thinking_ms,
        }
    )


def _graded(late_ms: list[float], thinking_ms: float) -> dict[str, object]:
    truths = [_truth(i, late, thinking_ms) for i, late in enumerate(late_ms)]
    records = [
        make_record(experiment="thinking").model_copy(update={"response_id": t.id}) for t in truths
    ]
    # What the client measured: the visible span as the server sent it.
    paces = [(t.events_ns[-1] - t.events_ns[0]) / MS / (TOKENS - 1) for t in truths]
    estimates = [REASONING * p for p in paces]
    mean = sum(estimates) / len(estimates)
    spread = max(estimates) - min(estimates)
    figures = ThinkingFigures(
        n=len(truths),
        hidden=len(truths),
        thinking_ms=Mean(value=mean, lo=mean - spread / 2, hi=mean + spread / 2, n=len(truths)),
        requests=[
            ThinkingRequest(
                record_id=r.record_id,
                reasoning_tokens=REASONING,
                decode_ms_per_token=p,
                ttft_ms=300.0,
                thinking_ms=e,
                waiting_ms=300.0 - e,
                answering_ms=(TOKENS - 1) * p,
            )
            for r, p, e in zip(records, paces, estimates, strict=True)
        ],
    )
    answer = LabAnswer(
        experiment="thinking", provider="p", model="m", question="?", answer="", figures=figures
    )
    log = TruthLog(path=Path("truth.jsonl"), mono_ns=0, wall_ns=0, requests=truths)
    return {c.name: c for c in grade_thinking(answer, records, Truth(log))}


def test_the_pace_a_late_server_strayed_from_its_plan_is_read_from_its_own_log() -> None:
    assert pace_strayed_ms(_truth(0, 0.0, 120.0)) == 0.0
    assert pace_strayed_ms(_truth(0, 12.0, 120.0)) == pytest.approx(12.0 / (TOKENS - 1))


def test_an_estimate_low_by_what_the_late_server_burst_is_graded_right() -> None:
    late = [12.0, 11.0, 12.5, 10.0, 12.0, 11.5, 12.0, 10.5]
    checks = _graded(late, thinking_ms=REASONING * PACE_MS)
    thinking = checks["thinking time, estimated (mean)"]
    assert thinking.value is not None and thinking.value < 100  # ~29 ms below the truth
    assert thinking.ok is True, thinking.why
    assert checks["replies with hidden reasoning"].ok is True


def test_a_thinking_pace_unlike_the_visible_one_is_still_caught_on_a_late_server() -> None:
    late = [12.0, 11.0, 12.5, 10.0, 12.0, 11.5, 12.0, 10.5]
    thinking = _graded(late, thinking_ms=3 * REASONING * PACE_MS)["thinking time, estimated (mean)"]
    assert thinking.ok is False and thinking.why is not None and thinking.why.startswith("off by +")
    on_time = _graded([0.0] * 8, thinking_ms=3 * REASONING * PACE_MS)
    assert on_time["thinking time, estimated (mean)"].ok is False
