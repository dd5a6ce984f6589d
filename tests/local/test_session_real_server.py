"""`session` against the managed llama-server and the bundled model (no mocks): each session
makes a real, grammar-forced tool call through the server, gets the simulated tool's result
in the next turn and answers; the critical path covers each session's time, and the
server's cached prompt tokens are read per step.

The model's chat template knows no tools, so every call is read from the reply's text: each
tool step's record must still carry its call in `tool_calls` (`source: text`) with stop
`tool_call`, each final step must hold text that is not a call's JSON, and a session counts
as complete only when its last turn is such an answer."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from labkit.config import load_config
from labkit.figures import SessionFigures
from labkit.local import ensure_setup
from labkit.records import RequestRecord, StopReason
from labkit.runner import RunOptions, prepare_run

pytestmark = pytest.mark.e2e


def _is_call_json(text: str) -> bool:
    try:
        value = json.loads(text)
    except ValueError:
        return False
    return isinstance(value, dict) and "name" in value


def test_the_bundled_model_runs_a_tool_loop_session(tmp_path: Path) -> None:
    ensure_setup()
    config = load_config(Path(__file__).parents[2] / "labkit/examples/agent.yaml")
    config.experiments[0].sessions = 2  # type: ignore[attr-defined]
    result = asyncio.run(prepare_run(config, RunOptions(out_dir=tmp_path)).run())
    answer = result.lab.answers[0]
    print(answer.answer)
    figures = answer.figures
    assert isinstance(figures, SessionFigures), answer.answer
    assert len(figures.sessions) == 2
    for row in figures.sessions:
        print(row)
        assert row.tool_calls >= 1 and row.steps >= 2
        assert row.critical.total_ms == pytest.approx(row.duration_ms)
        assert row.critical.tool_ms > 0 and row.critical.prefill_ms > 0
    calls = [s for s in figures.steps if s.tool_calls]
    assert calls and all(s.tool_call_args_ms is not None for s in calls)
    # llama.cpp's cache_n, read per step: a later turn extends the earlier one's prompt.
    later = [s.cached_share for s in figures.steps if s.step > 0]
    assert later and all(share is not None and share > 0 for share in later), later

    lines = (result.folder.path / "records.jsonl").read_text().splitlines()
    records = [RequestRecord.from_json_line(line) for line in lines]
    turns = [r for r in records if not r.warmup and r.error is None]
    tool_steps = [r for r in turns if r.tags.get("calls")]
    finals = [r for r in turns if r.tags.get("final")]
    assert len(tool_steps) == sum(row.tool_calls for row in figures.sessions)
    for r in tool_steps:
        print(r.stop_reason, r.stop_reason_raw, r.tool_calls)
        assert r.stop_reason == StopReason.TOOL_CALL
        assert r.tool_calls and all(c.source == "text" and c.name for c in r.tool_calls)
        assert all(isinstance(json.loads(c.arguments), dict) for c in r.tool_calls)
    assert len(finals) == len(figures.sessions)
    for r in finals:
        print(r.stop_reason, repr(r.output_text))
        assert r.tool_calls is None and r.stop_reason != StopReason.TOOL_CALL
        assert r.output_text and not _is_call_json(r.output_text)
    # Complete only when the session's last turn is an answer that stopped on its own.
    by_session = {int(r.tags["session"]): r for r in finals}
    for row in figures.sessions:
        cut = by_session[row.session].stop_reason == StopReason.LENGTH
        assert row.complete == (not cut) and row.ended == ("length" if cut else "answer")
    done = sum(row.complete for row in figures.sessions)
    assert done + sum(figures.incomplete.values()) == len(figures.sessions)
    assert f"completed {done} of 2 sessions" in answer.answer
    assert answer.status == ("ok" if done == 2 else "partial")
