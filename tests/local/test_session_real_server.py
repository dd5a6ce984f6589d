"""`session` against the managed llama-server and the bundled model (no mocks): each session
makes a real, grammar-forced tool call through the server, gets the simulated tool's result
in the next turn and answers; the critical path covers each session's time, and the
server's cached prompt tokens are read per step."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from labkit.config import load_config
from labkit.figures import SessionFigures
from labkit.local import ensure_setup
from labkit.runner import RunOptions, prepare_run

pytestmark = pytest.mark.e2e


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
        assert row.tool_calls >= 1 and row.steps >= 2 and row.complete
        assert row.critical.total_ms == pytest.approx(row.duration_ms)
        assert row.critical.tool_ms > 0 and row.critical.prefill_ms > 0
    calls = [s for s in figures.steps if s.tool_calls]
    assert calls and all(s.tool_call_args_ms is not None for s in calls)
    # llama.cpp's cache_n, read per step: a later turn extends the earlier one's prompt.
    later = [s.cached_share for s in figures.steps if s.step > 0]
    assert later and all(share is not None and share > 0 for share in later), later
    assert answer.status == "ok"
