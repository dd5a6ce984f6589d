"""Agent traces that are wrong or ask for too much: each is one `ConfigError` line naming
``file:line`` (cycles, a missing parent or main agent, a joined step the parent lacks,
values past labkit's limits, NaN, deep nesting, bytes that are not UTF-8), never a
traceback; a trace at the limits reads, in one pass; fuzzed rows end in one error or a
trace whose every session is one tree under ``"0"``. Through the real CLI, a hostile trace
stops `labkit run` with one line before anything is sent."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError
from typer.testing import CliRunner

from labkit.cli.app import app
from labkit.errors import ConfigError
from labkit.experiments.session import SessionSettings
from labkit.workloads import agent_traces
from labkit.workloads.agent_traces import (
    MAX_DELAY_MS,
    MAX_FANOUT,
    MAX_PROMPT_TOKENS,
    AgentTrace,
    read_agent_trace,
)

pytestmark = pytest.mark.unit


def _row(
    agent: str = "0", parent: str | None = None, joins: int | None = None, **extra: Any
) -> str:
    row: dict[str, Any] = {"session_id": "s", "input_length": 10, "output_length": 2}
    row["agent"] = agent
    if parent is not None:
        row.update(parent_agent=parent, joins_step=joins)
    row.update(extra)
    return json.dumps(row)


def _write(tmp_path: Path, *lines: str | bytes) -> Path:
    path = tmp_path / "trace.jsonl"
    path.write_bytes(b"".join((x if isinstance(x, bytes) else x.encode()) + b"\n" for x in lines))
    return path


def _refused(path: Path, *says: str) -> str:
    with pytest.raises(ConfigError) as caught:
        read_agent_trace(path)
    message = str(caught.value)
    assert "\n" not in message and message.startswith(f"{path}:"), message
    for part in says:
        assert part in message, message
    return message


def test_a_cycle_of_parents_is_named(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        _row("0"),
        _row("a", "b", 0),
        _row("b", "c", 0),
        _row("c", "a", 0),
    )
    message = _refused(path, "form a cycle")
    assert "a -> b -> c -> a" in message


def test_an_agent_that_is_its_own_parent_is_a_cycle(tmp_path: Path) -> None:
    _refused(_write(tmp_path, _row("0"), _row("a", "a", 0)), "cycle: a -> a")


@pytest.mark.parametrize(
    ("lines", "says"),
    [
        ([_row("0"), _row("0.1", "ghost", 0)], "'ghost', which has no turns"),
        ([_row("0.1", "0", 0)], 'no main agent "0"'),
        ([_row("0"), _row("0.1", "0", 5)], "joins step 5 of agent '0', which has steps 0 to 0"),
        ([_row("0"), _row("x")], "has no parent_agent"),
        ([_row("0", "x", 0)], "cannot have a parent_agent"),
        ([_row("0"), _row("0.1", "0", 0), _row("0.1", "0", 1)], "another parent_agent"),
        (
            [json.dumps({"session_id": "s", "input_length": 3, "agent": "a", "joins_step": 0})],
            "together",
        ),
    ],
)
def test_structure_that_is_not_one_tree_is_one_line(
    tmp_path: Path, lines: list[str], says: str
) -> None:
    _refused(_write(tmp_path, *lines), says)


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        ({"input_length": -1}, "input_length must be a whole number >= 0"),
        ({"input_length": MAX_PROMPT_TOKENS + 1}, "over labkit's limit"),
        ({"input_length": 1e300}, "over labkit's limit"),
        ({"input_length": 2.5}, "input_length must be a whole number"),
        ({"output_length": 10**9}, "output_length"),
        ({"delay": -5}, "delay must be a number of ms >= 0"),
        ({"delay": MAX_DELAY_MS * 2}, "over labkit's limit"),
        ({"delay": True}, "delay"),
        ({"tool_calls": 10**6}, "tool_calls"),
        ({"hash_ids": [1, "x"]}, "hash_ids"),
        ({"session_id": {"a": 1}}, "session_id must be a string"),
        ({"session_id": "x" * 1000}, "session_id must be 1 to 256 characters"),
    ],
)
def test_values_out_of_range_are_one_line(tmp_path: Path, extra: dict[str, Any], says: str) -> None:
    _refused(_write(tmp_path, _row("0", **extra)), says)


@pytest.mark.parametrize(
    ("line", "says"),
    [
        (b'{"session_id": "s", "input_length": NaN}', "NaN is not a JSON number"),
        (b'{"session_id": "s", "input_length": 3, "delay": Infinity}', "Infinity"),
        (b"[" * 100_000 + b"]" * 100_000, "nested deeper than"),
        (b'{"session_id": "s\xff", "input_length": 3}', "not UTF-8 text (byte 0xff"),
        (b"[1, 2]", "not a JSON object"),
        (b"{", "not JSON"),
    ],
)
def test_bad_lines_are_one_line(tmp_path: Path, line: bytes, says: str) -> None:
    _refused(_write(tmp_path, _row("0"), line), ":2: ", says)


def test_limits_on_agents_fanout_and_depth(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(agent_traces, "MAX_FANOUT", 3)
    monkeypatch.setattr(agent_traces, "MAX_DEPTH", 2)
    monkeypatch.setattr(agent_traces, "MAX_AGENTS", 6)
    fan = [_row("0"), *(_row(f"0.{i}", "0", 0) for i in range(4))]
    _refused(_write(tmp_path, *fan), "more than labkit's limit of 3 sub-agents")
    chain = [_row("0"), _row("a", "0", 0), _row("b", "a", 0), _row("c", "b", 0)]
    _refused(_write(tmp_path, *chain), "3 deep, over labkit's limit of 2")
    many = [_row("0"), *(_row(f"x{i}", "0", 0) for i in range(6))]
    _refused(_write(tmp_path, *many), "more than labkit's limit of 6 agents")


def test_a_large_fan_out_reads_and_is_indexed(tmp_path: Path) -> None:
    lines = [_row("0"), _row("0")]
    lines += [_row(f"0.{i}", "0", 1) for i in range(MAX_FANOUT)]
    session = read_agent_trace(_write(tmp_path, *lines)).sessions[0]
    children = session.children("0", 1)
    assert len(children) == MAX_FANOUT and session.children("0", 0) == []
    assert session.agent(f"0.{MAX_FANOUT - 1}") is children[-1]


def test_the_reader_is_a_line_at_a_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """It stops at the first line past the cap on turns, never reading the rest."""
    monkeypatch.setattr(agent_traces, "MAX_TURNS", 5)
    path = tmp_path / "trace.jsonl"
    with path.open("w") as f:
        for _ in range(6):
            f.write(_row("0") + "\n")
        f.write("\xff not even text\n" * 3)
    _refused(path, ":6: more than labkit's limit of 5 turns")


_KEYS = ["session_id", "agent", "parent_agent", "joins_step", "input_length", "output_length"]
_KEYS += ["delay", "hash_ids", "tool_calls"]
_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 6),
    st.integers(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from(["0", "0.1", "0.2", "a", ""]),
    st.lists(st.integers(-2, 5), max_size=3),
    st.dictionaries(st.text(max_size=2), st.integers(), max_size=2),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.dictionaries(st.sampled_from(_KEYS), _VALUES, max_size=9), max_size=8))
def test_fuzzed_rows_give_one_error_or_a_tree(rows: list[dict[str, Any]]) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "t.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        try:
            trace = read_agent_trace(path)
        except ConfigError as exc:
            assert "\n" not in str(exc)
            return
    assert isinstance(trace, AgentTrace)
    for session in trace.sessions:
        reached = {"0"}
        todo = ["0"]
        while todo:
            agent = session.agent(todo.pop())
            assert agent is not None
            for step in range(len(agent.steps)):
                for child in session.children(agent.path, step):
                    assert child.path not in reached
                    reached.add(child.path)
                    todo.append(child.path)
        assert reached == {a.path for a in session.agents}


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300))
def test_fuzzed_bytes_give_one_error_or_a_trace(data: bytes) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "t.jsonl"
        path.write_bytes(data)
        try:
            read_agent_trace(path)
        except ConfigError as exc:
            assert "\n" not in str(exc)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"subagents": MAX_FANOUT + 1}, "subagents"),
        ({"tool_result_tokens": MAX_PROMPT_TOKENS + 1}, "tool_result_tokens"),
        ({"task_tokens": 10**12}, "task_tokens"),
        ({"sessions": 10**9}, "sessions"),
        ({"max_steps": 10**9}, "max_steps"),
        ({"tool_latency": {"ms": float("inf")}}, "ms"),
        ({"tool_latency": {"ms": MAX_DELAY_MS + 1}}, "ms"),
        ({"tool_latency": {"script": [1.0, float("nan")]}}, "script"),
        ({"session_slo_ms": float("inf")}, "session_slo_ms"),
        ({"rate": 1e-300}, "rate"),
    ],
)
def test_session_settings_past_the_limits_are_refused(change: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationError, match=field):
        SessionSettings.model_validate({"kind": "session", **change})


def test_an_exponential_tool_latency_is_cut_at_the_limit() -> None:
    import random

    latency = SessionSettings.model_validate(
        {"kind": "session", "tool_latency": {"distribution": "exponential", "ms": MAX_DELAY_MS}}
    ).tool_latency
    rng = random.Random(3)
    assert max(latency.draw(rng, n) for n in range(2000)) == MAX_DELAY_MS


def _config(tmp_path: Path, trace: Path, speedup: float = 1.0) -> Path:
    config = tmp_path / "lab.yaml"
    config.write_text(
        "name: hostile\n"
        f"output_dir: {tmp_path / 'runs'}\n"
        "providers:\n  - {id: fake, kind: fake}\n"
        f"experiments:\n  - {{kind: session, trace: {trace}, speedup: {speedup}}}\n"
    )
    return config


@pytest.mark.parametrize(
    ("lines", "says"),
    [
        ([_row("0"), _row("a", "b", 0), _row("b", "a", 0)], "cycle"),
        ([_row("0", input_length=10**9)], "input_length"),
        ([b"\xff\xfe"], "not UTF-8"),
    ],
)
def test_labkit_run_stops_at_a_hostile_trace_with_one_line(
    tmp_path: Path, lines: list[str | bytes], says: str
) -> None:
    result = CliRunner().invoke(app, ["run", str(_config(tmp_path, _write(tmp_path, *lines)))])
    assert result.exit_code != 0
    assert says in result.output and "Traceback" not in result.output
    assert not list((tmp_path / "runs").glob("*/records.jsonl"))


def test_a_gap_past_the_limit_after_speedup_is_one_line(tmp_path: Path) -> None:
    trace = _write(tmp_path, _row("0"), _row("0", delay=MAX_DELAY_MS))
    result = CliRunner().invoke(app, ["run", str(_config(tmp_path, trace, speedup=0.5))])
    assert result.exit_code != 0 and "longest gap at speedup 0.5" in result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize(
    ("name", "data", "says"),
    [
        ("t.jsonl", b'{"timestamp": NaN, "input_length": 3, "output_length": 1}\n', ":1: not JSON"),
        ("t.jsonl", b'{"timestamp": 1e999, "input_length": 3, "output_length": 1}\n', "finite"),
        ("t.jsonl", b'{"timestamp": 0, "input_length": 1e30, "output_length": 1}\n', "limits"),
        (
            "t.jsonl",
            b'{"timestamp": 0, "input_length": 3, "output_length": 1}\n\xff\n',
            ":2: not UTF-8",
        ),
        ("t.jsonl", b"[" * 50_000 + b"]" * 50_000, ":1: JSON nested deeper"),
        ("t.csv", b"timestamp,input_tokens,output_tokens\nnan,3,1\n", ":2: a finite timestamp"),
        ("t.csv", b"timestamp,input_tokens,output_tokens\n0,3,1\n\xff,1,1\n", "not UTF-8"),
        ("t.csv", b"timestamp,input_tokens,output_tokens\n0,99999999999,1\n", "limits"),
    ],
)
def test_a_hostile_request_trace_is_one_line(
    tmp_path: Path, name: str, data: bytes, says: str
) -> None:
    from labkit.workloads.traces import read_trace

    path = tmp_path / name
    path.write_bytes(data)
    with pytest.raises(ConfigError) as caught:
        read_trace(path)
    assert says in str(caught.value) and "\n" not in str(caught.value)
