"""`labkit session-trace` through typer's CliRunner: a run's session records become an agent
trace file; a run without any is one clear error."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from labkit.cli.sessions import register
from labkit.workloads.agent_traces import read_agent_trace
from tests.support.records import make_record

pytestmark = pytest.mark.unit


def _app() -> typer.Typer:
    app = typer.Typer()
    register(app)
    app.command("noop")(lambda: None)  # two commands: typer keeps the command's name
    return app


def _write(run_dir: Path, session_tags: bool) -> None:
    run_dir.mkdir()
    lines = []
    for step in range(3):
        r = make_record(input_tokens=20 + 10 * step, output_tokens=4)
        if session_tags:
            r.tags.update(session=0, agent="0", step=step, tool_ms=30.0, calls=int(step < 2))
        lines.append(r.to_json_line())
    (run_dir / "records.jsonl").write_text("\n".join(lines) + "\n")


def test_a_runs_sessions_become_a_trace(tmp_path: Path) -> None:
    _write(tmp_path / "run", session_tags=True)
    result = CliRunner().invoke(_app(), ["session-trace", str(tmp_path / "run")])
    assert result.exit_code == 0, result.output
    assert "1 sessions, 3 turns" in result.output
    trace = read_agent_trace(tmp_path / "run" / "agent_trace.jsonl")
    assert [s.tool_calls for s in trace.sessions[0].agents[0].steps] == [1, 1, 0]


def test_a_run_without_sessions_is_one_error(tmp_path: Path) -> None:
    _write(tmp_path / "run", session_tags=False)
    result = CliRunner().invoke(_app(), ["session-trace", str(tmp_path / "run")])
    assert result.exit_code == 1 and "holds no session records" in result.output
