"""The report's session part: a table of sessions with their critical path, the critical
path per provider, and each session's timeline — from lab.json's typed figures only."""

from __future__ import annotations

import pytest

from labkit.figures import CriticalPath, SessionFigures, SessionRow, SessionStep
from labkit.records import LabAnswer, LabResults
from labkit.report.kinds.session import critical_path_chart, session_section, session_timeline_chart
from labkit.report.render import ChartBlock, Table
from labkit.wording.session import session_answer

pytestmark = pytest.mark.unit

PATH = CriticalPath(provider_queue_ms=10, prefill_ms=300, decode_ms=200, tool_ms=450, labkit_ms=40)


def _figures() -> SessionFigures:
    steps = [
        SessionStep(session=0, agent="0", step=0, start_ms=2, end_ms=250, tool_calls=1),
        SessionStep(session=0, agent="0.1", step=0, start_ms=260, end_ms=400, tool_calls=0),
        SessionStep(
            session=0, agent="0", step=1, start_ms=700, end_ms=1000, tool_ms=450, tool_calls=0
        ),
    ]
    row = SessionRow(
        session=0, complete=True, steps=3, agents=2, tool_calls=1, duration_ms=1000, critical=PATH
    )
    return SessionFigures(
        sessions=[row], steps=steps, critical=PATH, completion_ms_p50=1000, queue_reported=True
    )


def _lab(figures: SessionFigures | None) -> LabResults:
    answers = [] if figures is None else [
        LabAnswer(experiment="session", provider="local", question="q", answer="a", figures=figures)
    ]  # fmt: skip
    return LabResults(run_id="r", answers=answers)


def test_a_run_without_sessions_adds_nothing() -> None:
    assert session_section(_lab(None)) == []
    assert critical_path_chart(_lab(None)) is None


def test_sessions_get_a_table_a_breakdown_and_timelines() -> None:
    blocks = session_section(_lab(_figures()))
    (table,) = [b for b in blocks if isinstance(b, Table)]
    assert table.rows[0][:7] == ["0", "yes", "3", "0", "2", "1", "1,000"]
    charts = [b.chart.name for b in blocks if isinstance(b, ChartBlock)]
    assert charts == ["session_critical_path", "session_timeline"]
    timeline = session_timeline_chart(_lab(_figures()))
    assert timeline is not None
    rows = {v["row"] for v in timeline.spec["data"]["values"]}
    assert rows == {"local · s0 · agent 0", "local · s0 · agent 0.1"}  # sub-agent beside
    tools = [v for v in timeline.spec["data"]["values"] if v["what"] == "tool"]
    assert [(t["start"], t["end"]) for t in tools] == [(250, 700)]


def test_the_answer_names_the_biggest_share_first() -> None:
    text = session_answer("local", _figures())
    assert text.startswith("local completed 1 of 1 sessions in 1.00 s (median); ")
    assert "45% tools, 30% the provider's prefill, 20% decode, 4% labkit itself, 1% " in text


def test_a_provider_without_a_queue_says_prefill_holds_it() -> None:
    figures = _figures().model_copy(update={"queue_reported": False})
    assert "the provider's prefill (queue included)" in session_answer("local", figures)
    (table,) = [b for b in session_section(_lab(figures)) if isinstance(b, Table)]
    assert table.rows[0][7] == "—"


def test_sessions_that_did_not_complete_say_why() -> None:
    figures = _figures()
    cut = figures.sessions[0].model_copy(
        update={"session": 1, "complete": False, "ended": "length"}
    )
    stuck = cut.model_copy(update={"session": 2, "ended": "step_limit"})
    figures = figures.model_copy(
        update={
            "sessions": [figures.sessions[0], cut, stuck],
            "incomplete": {"length": 1, "step_limit": 1},
        }
    )
    text = session_answer("local", figures)
    assert text.startswith(
        "local completed 1 of 3 sessions (1 cut by max_tokens on the last turn, 1 still calling "
        "tools at max_steps) in 1.00 s (median); "
    )
    (table,) = [b for b in session_section(_lab(figures)) if isinstance(b, Table)]
    assert [row[1] for row in table.rows] == ["yes", "no: length", "no: step_limit"]
