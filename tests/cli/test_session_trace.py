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


def test_the_trace_replaces_a_planted_link_and_never_writes_through_it(tmp_path: Path) -> None:
    _write(tmp_path / "run", session_tags=True)
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    (tmp_path / "run" / "agent_trace.jsonl").symlink_to(victim)
    result = CliRunner().invoke(_app(), ["session-trace", str(tmp_path / "run")])
    assert result.exit_code == 0, result.output
    assert victim.read_text() == "keep me"
    written = tmp_path / "run" / "agent_trace.jsonl"
    assert not written.is_symlink() and read_agent_trace(written).sessions


def test_records_a_trace_cannot_hold_are_counted_and_the_rest_written(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    lines = []
    for step in range(2):
        r = make_record(input_tokens=20, output_tokens=4)
        r.tags.update(session=0, agent="0", step=step, tool_ms=1.0, calls=1)
        lines.append(r.to_json_line())
    bad_tool_ms = make_record(input_tokens=20, output_tokens=4)
    bad_tool_ms.tags.update(session=0, agent="0", step=2, tool_ms=-5.0)
    orphan = make_record(input_tokens=20, output_tokens=4)
    orphan.tags.update(session=0, agent="0.1", step=0, parent="0.9", joins_step=1)
    lonely = make_record(input_tokens=20, output_tokens=4)
    lonely.tags.update(session=1, agent="0.1", step=0, parent="0", joins_step=1)
    huge = make_record(input_tokens=10**12, output_tokens=4)
    huge.tags.update(session=0, agent="0", step=3)
    lines += [x.to_json_line() for x in (bad_tool_ms, orphan, lonely, huge)]
    lines.append('{"not": "a record"}')
    (run / "records.jsonl").write_bytes(("\n".join(lines) + "\n").encode() + b"\xff\xfe\n")
    result = CliRunner().invoke(_app(), ["session-trace", str(run)])
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output
    assert "1 sessions, 2 turns" in result.output
    assert "6 left out (first: " in result.output
    trace = read_agent_trace(run / "agent_trace.jsonl")
    assert [a.path for a in trace.sessions[0].agents] == ["0"]


def test_a_sub_agent_joins_the_parents_next_successful_turn(tmp_path: Path) -> None:
    """A run counts a failed turn in its steps; the trace counts the successful ones."""
    run = tmp_path / "run"
    run.mkdir()
    lines = []
    for step in (0, 2):  # step 1 failed and was sent again as step 2
        r = make_record(input_tokens=20, output_tokens=4)
        r.tags.update(session=0, agent="0", step=step, calls=1)
        lines.append(r.to_json_line())
    sub = make_record(input_tokens=10, output_tokens=4)
    sub.tags.update(session=0, agent="0.1", step=0, parent="0", joins_step=1)
    lines.append(sub.to_json_line())
    (run / "records.jsonl").write_text("\n".join(lines) + "\n")
    result = CliRunner().invoke(_app(), ["session-trace", str(run)])
    assert result.exit_code == 0, result.output
    session = read_agent_trace(run / "agent_trace.jsonl").sessions[0]
    assert [c.path for c in session.children("0", 1)] == ["0.1"]


def test_an_output_folder_that_is_missing_is_one_line(tmp_path: Path) -> None:
    _write(tmp_path / "run", session_tags=True)
    out = tmp_path / "nowhere" / "t.jsonl"
    result = CliRunner().invoke(_app(), ["session-trace", str(tmp_path / "run"), "--out", str(out)])
    assert result.exit_code == 1 and "Traceback" not in result.output
    (line,) = result.output.strip().splitlines()
    assert line.startswith(f"error: cannot write {out}")
