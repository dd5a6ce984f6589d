"""Agent traces: AIPerf's multi-turn Mooncake rows with labkit's branch keys, read with one
clear message for a bad line, and labkit's own session records written in the format."""

from __future__ import annotations

from pathlib import Path

import pytest

from labkit.errors import ConfigError
from labkit.workloads.agent_traces import read_agent_trace, session_trace, write_agent_trace
from tests.support.records import make_record

pytestmark = pytest.mark.unit


def test_plain_aiperf_rows_are_one_agent_per_session(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(
        '{"session_id": "a", "input_length": 10, "output_length": 2, "hash_ids": [1]}\n'
        '{"session_id": "a", "input_length": 20, "output_length": 3, "delay": 150}\n'
        '{"session_id": "b", "input_length": 5, "output_length": 1}\n'
    )
    trace = read_agent_trace(path)
    assert [s.id for s in trace.sessions] == ["a", "b"]
    (agent,) = trace.sessions[0].agents
    assert agent.path == "0" and [s.delay_ms for s in agent.steps] == [0.0, 150.0]
    assert agent.steps[0].hash_ids == [1]


def test_branches_read_back_as_written(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(
        '{"session_id": "a", "input_length": 10, "output_length": 2, "agent": "0"}\n'
        '{"session_id": "a", "input_length": 8, "output_length": 2, "agent": "0.1", '
        '"parent_agent": "0", "joins_step": 1}\n'
        '{"session_id": "a", "input_length": 30, "output_length": 2, "agent": "0", "delay": 90}\n'
    )
    trace = read_agent_trace(path)
    session = trace.sessions[0]
    assert [c.path for c in session.children("0", 1)] == ["0.1"]
    again = tmp_path / "again.jsonl"
    write_agent_trace(trace, again)
    assert read_agent_trace(again) == trace


@pytest.mark.parametrize(
    ("line", "says"),
    [
        ("not json", "not JSON"),
        ('{"session_id": "a", "input_length": -1}', "input_length"),
        ('{"session_id": "a", "input_length": 3, "hash_ids": ["x"]}', "hash_ids"),
        ('{"session_id": "a", "input_length": 3, "delay": "soon"}', "delay"),
    ],
)
def test_a_bad_line_is_one_clear_message(tmp_path: Path, line: str, says: str) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(line + "\n")
    with pytest.raises(ConfigError, match=says):
        read_agent_trace(path)


def test_session_records_become_a_trace_with_growing_prefixes() -> None:
    records = []
    for step, (n_in, n_out) in enumerate([(40, 5), (70, 6), (100, 7)]):
        r = make_record(input_tokens=n_in, output_tokens=n_out)
        r.tags.update(session=0, agent="0", step=step, tool_ms=50.0 * step, calls=1)
        records.append(r)
    trace = session_trace(records, block_tokens=32)
    steps = trace.sessions[0].agents[0].steps
    assert [s.output_tokens for s in steps] == [5, 6, 7]
    assert [s.delay_ms for s in steps] == [0.0, 50.0, 100.0]
    assert steps[0].hash_ids == [0] and steps[1].hash_ids == [0, 1]
    assert steps[2].hash_ids[:2] == steps[1].hash_ids
