"""Agent traces: recorded agent sessions with their structure, read and written as JSONL.

The format is AIPerf's multi-turn Mooncake trace (``session_id``, ``input_length``,
``output_length``, ``hash_ids``, ``delay``: turn order, lengths, prefix sharing and the gap
before a turn), plus labkit's optional keys for sub-agent branches that other readers ignore:
``agent``, ``parent_agent``, ``joins_step`` and ``tool_calls``. Rows of one (session, agent)
are its steps in file order. `session_trace` writes labkit's own `session` records in it, so
a run replays elsewhere. Why this format: docs/experiments.md, "Agent sessions".
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, NonNegativeFloat, NonNegativeInt

from labkit.errors import ConfigError
from labkit.records import RequestRecord

__all__ = [
    "AgentTrace",
    "TraceAgent",
    "TraceSession",
    "TraceStep",
    "read_agent_trace",
    "session_trace",
    "write_agent_trace",
]


class TraceStep(BaseModel):
    """One model turn of an agent."""

    model_config = ConfigDict(extra="forbid")

    input_tokens: NonNegativeInt
    output_tokens: NonNegativeInt
    delay_ms: NonNegativeFloat = Field(default=0.0, description="Tool or think gap before it.")
    hash_ids: list[int] = Field(default_factory=list)
    tool_calls: NonNegativeInt = 0


class TraceAgent(BaseModel):
    """One agent of a session: its steps, and where it branches off its parent."""

    model_config = ConfigDict(extra="forbid")

    path: str = "0"
    parent: str | None = None
    joins_step: int | None = Field(
        default=None, description="The parent's step that waits for this agent's answer."
    )
    steps: list[TraceStep] = Field(default_factory=list)


class TraceSession(BaseModel):
    """One recorded session: its main agent and every sub-agent."""

    model_config = ConfigDict(extra="forbid")

    id: str
    agents: list[TraceAgent] = Field(default_factory=list)

    def children(self, parent: str, joins_step: int) -> list[TraceAgent]:
        """The sub-agents `parent`'s step `joins_step` waits for."""
        return [a for a in self.agents if a.parent == parent and a.joins_step == joins_step]

    def agent(self, path: str) -> TraceAgent | None:
        """The agent at `path`."""
        return next((a for a in self.agents if a.path == path), None)


class AgentTrace(BaseModel):
    """A whole trace file: its sessions in order of first appearance."""

    model_config = ConfigDict(extra="forbid")

    sessions: list[TraceSession] = Field(default_factory=list)


def _int(row: dict[str, Any], key: str, path: Path, line: int, default: int | None = None) -> int:
    value = row.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise ConfigError(f"{path}:{line}: {key} must be a non-negative number, got {value!r}")
    return int(value)


def _delay(row: dict[str, Any], path: Path, line: int) -> float:
    value = row.get("delay") or 0
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise ConfigError(f"{path}:{line}: delay must be a non-negative number of ms")
    return float(value)


def read_agent_trace(path: Path) -> AgentTrace:
    """The sessions of an agent trace file (see the module's docstring); one clear message
    for the first bad line."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise ConfigError(f"cannot read agent trace {path}: {exc.strerror}") from None
    sessions: dict[str, dict[str, TraceAgent]] = {}
    for n, text in enumerate(lines, 1):
        if not text.strip():
            continue
        try:
            row = json.loads(text)
        except ValueError as exc:
            raise ConfigError(f"{path}:{n}: not a JSON object ({exc})") from None
        if not isinstance(row, dict):
            raise ConfigError(f"{path}:{n}: not a JSON object")
        session = str(row.get("session_id", f"row{n}"))
        agent_path = str(row.get("agent", "0"))
        agents = sessions.setdefault(session, {})
        if agent_path not in agents:
            joins = row.get("joins_step")
            agents[agent_path] = TraceAgent(
                path=agent_path,
                parent=None if row.get("parent_agent") is None else str(row["parent_agent"]),
                joins_step=None if joins is None else _int(row, "joins_step", path, n),
            )
        hash_ids = row.get("hash_ids") or []
        if not isinstance(hash_ids, list) or not all(isinstance(h, int) for h in hash_ids):
            raise ConfigError(f"{path}:{n}: hash_ids must be a list of integers")
        agents[agent_path].steps.append(
            TraceStep(
                input_tokens=_int(row, "input_length", path, n),
                output_tokens=_int(row, "output_length", path, n, 1),
                delay_ms=_delay(row, path, n),
                hash_ids=hash_ids,
                tool_calls=_int(row, "tool_calls", path, n, 0),
            )
        )
    if not sessions:
        raise ConfigError(f"agent trace {path} holds no turns")
    return AgentTrace(
        sessions=[TraceSession(id=k, agents=list(v.values())) for k, v in sessions.items()]
    )


def session_trace(records: list[RequestRecord], block_tokens: int = 512) -> AgentTrace:
    """labkit's `session` records as an agent trace: per session and agent its successful
    steps in order, the tool gap before each, and hash ids where each step's prompt extends
    the step before it (a session's history is its prompt prefix)."""
    by_agent: dict[tuple[int, str], list[RequestRecord]] = defaultdict(list)
    for r in records:
        session = r.tags.get("session")
        if r.warmup or r.error is not None or "agent" not in r.tags or not isinstance(session, int):
            continue
        by_agent[(session, str(r.tags["agent"]))].append(r)
    sessions: dict[int, TraceSession] = {}
    next_id = 0
    for (session, path), recs in sorted(by_agent.items()):
        recs.sort(key=lambda r: int(r.tags.get("step", 0)))
        parent = recs[0].tags.get("parent")
        joins = recs[0].tags.get("joins_step")
        agent = TraceAgent(
            path=path,
            parent=None if parent is None else str(parent),
            joins_step=None if joins is None else int(joins),
        )
        ids: list[int] = []
        for r in recs:
            blocks = (r.usage.input_tokens or 0) // block_tokens
            while len(ids) < blocks:
                ids.append(next_id)
                next_id += 1
            agent.steps.append(
                TraceStep(
                    input_tokens=r.usage.input_tokens or 0,
                    output_tokens=r.usage.output_tokens or 0,
                    delay_ms=float(r.tags.get("tool_ms", 0.0)),
                    hash_ids=ids[:blocks],
                    tool_calls=int(r.tags.get("calls", 0)),
                )
            )
        sessions.setdefault(session, TraceSession(id=f"s{session}")).agents.append(agent)
    return AgentTrace(sessions=list(sessions.values()))


def write_agent_trace(trace: AgentTrace, path: Path) -> None:
    """Write `trace` as JSONL rows (AIPerf's keys, labkit's three where there are branches)."""
    rows: list[str] = []
    for session in trace.sessions:
        for agent in session.agents:
            for step in agent.steps:
                row: dict[str, Any] = {
                    "session_id": session.id,
                    "input_length": step.input_tokens,
                    "output_length": step.output_tokens,
                    "hash_ids": step.hash_ids,
                    "delay": round(step.delay_ms, 3),
                    "agent": agent.path,
                    "tool_calls": step.tool_calls,
                }
                if agent.parent is not None:
                    row["parent_agent"] = agent.parent
                    row["joins_step"] = agent.joins_step
                rows.append(json.dumps(row))
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
