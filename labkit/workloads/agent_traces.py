"""Agent traces: recorded agent sessions with their structure, read and written as JSONL.

The format is AIPerf's multi-turn Mooncake trace (``session_id``, ``input_length``,
``output_length``, ``hash_ids``, ``delay``: turn order, lengths, prefix sharing and the gap
before a turn), plus labkit's optional keys for sub-agent branches that other readers ignore:
``agent``, ``parent_agent``, ``joins_step`` and ``tool_calls``. Rows of one (session, agent)
are its steps in file order. `session_trace` writes labkit's own `session` records in it, so
a run replays elsewhere. A trace is read within labkit's limits (the ``MAX_`` constants), as
what it asks for is built in full when it is replayed. Why this format, and what is refused:
docs/experiments.md, "Agent sessions".
"""

from __future__ import annotations

import contextlib
import functools
import json
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, NonNegativeFloat, NonNegativeInt, PrivateAttr

from labkit.errors import ConfigError
from labkit.jsonlines import JsonLine, iter_json_lines
from labkit.records import RequestRecord
from labkit.safefiles import write_new_file

__all__ = [
    "MAX_AGENTS",
    "MAX_DELAY_MS",
    "MAX_DEPTH",
    "MAX_FANOUT",
    "MAX_OUTPUT_TOKENS",
    "MAX_PROMPT_TOKENS",
    "MAX_STEPS",
    "MAX_TOOL_CALLS",
    "MAX_TURNS",
    "AgentTrace",
    "TraceAgent",
    "TraceSession",
    "TraceStep",
    "agent_trace_text",
    "read_agent_trace",
    "session_trace",
    "write_agent_trace",
]

#: A prompt's length in tokens (a trace's input_length; a session's task, tool result and
#: summary sizes): the longest context windows served today are about a million tokens.
MAX_PROMPT_TOKENS = 1_048_576
#: A reply's length in tokens (a trace's output_length).
MAX_OUTPUT_TOKENS = 131_072
#: A gap before a turn, or a simulated tool's latency (ms): one hour.
MAX_DELAY_MS = 3_600_000.0
#: Tool calls one turn makes.
MAX_TOOL_CALLS = 1_024
#: Steps of one agent.
MAX_STEPS = 4_096
#: Agents of one session, and the sub-agents one step waits for (its fan-out).
MAX_AGENTS = 4_096
MAX_FANOUT = 1_024
#: Sub-agents nested in one another.
MAX_DEPTH = 32
#: Turns (rows) of a whole trace.
MAX_TURNS = 1_000_000
#: The longest session id or agent path.
MAX_NAME_CHARS = 256


class TraceStep(BaseModel):
    """One model turn of an agent."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    input_tokens: NonNegativeInt = Field(le=MAX_PROMPT_TOKENS)
    output_tokens: NonNegativeInt = Field(le=MAX_OUTPUT_TOKENS)
    delay_ms: NonNegativeFloat = Field(
        default=0.0, le=MAX_DELAY_MS, description="Tool or think gap before it."
    )
    hash_ids: list[int] = Field(default_factory=list, max_length=MAX_PROMPT_TOKENS)
    tool_calls: NonNegativeInt = Field(default=0, le=MAX_TOOL_CALLS)


class TraceAgent(BaseModel):
    """One agent of a session: its steps, and where it branches off its parent."""

    model_config = ConfigDict(extra="forbid")

    path: str = "0"
    parent: str | None = None
    joins_step: int | None = Field(
        default=None, ge=0, description="The parent's step that waits for this agent's answer."
    )
    steps: list[TraceStep] = Field(default_factory=list)


class TraceSession(BaseModel):
    """One recorded session: its main agent and every sub-agent."""

    model_config = ConfigDict(extra="forbid")

    id: str
    agents: list[TraceAgent] = Field(default_factory=list)
    _by_path: dict[str, TraceAgent] | None = PrivateAttr(default=None)
    _by_join: dict[tuple[str, int], list[TraceAgent]] | None = PrivateAttr(default=None)

    def _index(self) -> tuple[dict[str, TraceAgent], dict[tuple[str, int], list[TraceAgent]]]:
        """The agents by path and by the step they join, indexed once (a fan-out of n
        sub-agents then costs n, not n times the session's agents)."""
        if self._by_path is None or self._by_join is None:
            by_join: dict[tuple[str, int], list[TraceAgent]] = defaultdict(list)
            for a in self.agents:
                if a.parent is not None and a.joins_step is not None:
                    by_join[(a.parent, a.joins_step)].append(a)
            self._by_path = {a.path: a for a in self.agents}
            self._by_join = dict(by_join)
        return self._by_path, self._by_join

    def __eq__(self, other: object) -> bool:
        """Equal sessions: the same id and agents (their index is no part of them)."""
        if not isinstance(other, TraceSession):
            return NotImplemented
        return self.id == other.id and self.agents == other.agents

    __hash__ = None  # type: ignore[assignment]  # mutable, as every model

    def children(self, parent: str, joins_step: int) -> list[TraceAgent]:
        """The sub-agents `parent`'s step `joins_step` waits for."""
        return self._index()[1].get((parent, joins_step), [])

    def agent(self, path: str) -> TraceAgent | None:
        """The agent at `path`."""
        return self._index()[0].get(path)


class AgentTrace(BaseModel):
    """A whole trace file: its sessions in order of first appearance."""

    model_config = ConfigDict(extra="forbid")

    sessions: list[TraceSession] = Field(default_factory=list)

    def longest_delay_ms(self) -> float:
        """The longest gap before any turn (0 for none)."""
        return max(
            (t.delay_ms for s in self.sessions for a in s.agents for t in a.steps), default=0.0
        )


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else f"a {type(value).__name__}"


def _count(row: dict[str, Any], key: str, cap: int, where: str, default: int | None = None) -> int:
    """A whole number from 0 to `cap` (one line naming `key` otherwise)."""
    value = row.get(key, default)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(f"{where}: {key} must be a whole number >= 0, got {_shown(value)}")
    if value > cap:
        raise ConfigError(f"{where}: {key} {value} is over labkit's limit of {cap}")
    return value


def _delay(row: dict[str, Any], where: str) -> float:
    value = row.get("delay")
    if value is None:
        return 0.0
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise ConfigError(f"{where}: delay must be a number of ms >= 0, got {_shown(value)}")
    if value > MAX_DELAY_MS:
        raise ConfigError(
            f"{where}: delay {value} ms is over labkit's limit of {MAX_DELAY_MS:.0f} ms"
        )
    return float(value)


def _name(row: dict[str, Any], key: str, where: str, default: str | None) -> str | None:
    """A session id or an agent path: a string or a whole number, not long."""
    value = row.get(key)
    if value is None:  # absent, or null: the default
        value = default
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise ConfigError(f"{where}: {key} must be a string or a whole number")
    text = str(value)
    if not text or len(text) > MAX_NAME_CHARS:
        raise ConfigError(f"{where}: {key} must be 1 to {MAX_NAME_CHARS} characters")
    return text


def _hash_ids(row: dict[str, Any], where: str) -> list[int]:
    hash_ids = row.get("hash_ids")
    if hash_ids is None:
        return []
    if not isinstance(hash_ids, list) or not all(
        isinstance(h, int) and not isinstance(h, bool) for h in hash_ids
    ):
        raise ConfigError(f"{where}: hash_ids must be a list of whole numbers")
    if len(hash_ids) > MAX_PROMPT_TOKENS:
        raise ConfigError(
            f"{where}: {len(hash_ids)} hash_ids, over labkit's limit of {MAX_PROMPT_TOKENS}"
        )
    return hash_ids


def _new_agent(
    row: dict[str, Any], where: str, path: str, parent: str | None, joins: int | None
) -> TraceAgent:
    """The agent a row names first: the main agent ``0`` has no parent, every other one
    a parent and the parent's step it joins."""
    if (parent is None) != (joins is None):
        raise ConfigError(f"{where}: parent_agent and joins_step come together or not at all")
    if parent is None and path != "0":
        raise ConfigError(
            f'{where}: agent {path!r} has no parent_agent (only the main agent "0" has none)'
        )
    if parent is not None and path == "0":
        raise ConfigError(f'{where}: the main agent "0" cannot have a parent_agent')
    return TraceAgent(path=path, parent=parent, joins_step=joins)


def _read_row(
    path: Path,
    line: JsonLine,
    turns: int,
    sessions: dict[str, dict[str, TraceAgent]],
    first_row: dict[tuple[str, str], int],
) -> None:
    """Add one row of the trace (its `turns`-th) to `sessions`."""
    where = f"{path}:{line.number}"
    row = line.value
    if not isinstance(row, dict):
        raise ConfigError(f"{where}: not a JSON object")
    if turns > MAX_TURNS:
        raise ConfigError(f"{where}: more than labkit's limit of {MAX_TURNS} turns in a trace")
    session = _name(row, "session_id", where, f"row{line.number}")
    agent_path = _name(row, "agent", where, "0")
    parent = _name(row, "parent_agent", where, None)
    assert session is not None and agent_path is not None
    joins = None
    if row.get("joins_step") is not None:
        joins = _count(row, "joins_step", MAX_STEPS, where)
    agents = sessions.setdefault(session, {})
    agent = agents.get(agent_path)
    if agent is None:
        if len(agents) >= MAX_AGENTS:
            raise ConfigError(
                f"{where}: session {session!r} has more than labkit's limit of {MAX_AGENTS} agents"
            )
        agent = agents[agent_path] = _new_agent(row, where, agent_path, parent, joins)
        first_row[(session, agent_path)] = line.number
    elif ("parent_agent" in row or "joins_step" in row) and (parent, joins) != (
        agent.parent,
        agent.joins_step,
    ):
        raise ConfigError(
            f"{where}: agent {agent_path!r} of session {session!r} names another "
            f"parent_agent or joins_step than on line {first_row[(session, agent_path)]}"
        )
    if len(agent.steps) >= MAX_STEPS:
        raise ConfigError(
            f"{where}: agent {agent_path!r} has more than labkit's limit of {MAX_STEPS} steps"
        )
    agent.steps.append(
        TraceStep(
            input_tokens=_count(row, "input_length", MAX_PROMPT_TOKENS, where),
            output_tokens=_count(row, "output_length", MAX_OUTPUT_TOKENS, where, 1),
            delay_ms=_delay(row, where),
            hash_ids=_hash_ids(row, where),
            tool_calls=_count(row, "tool_calls", MAX_TOOL_CALLS, where, 0),
        )
    )


def read_agent_trace(path: Path) -> AgentTrace:
    """The sessions of an agent trace file (see the module's docstring), read a line at a
    time within labkit's limits; ConfigError, one line naming ``file:line``, for the first
    bad line, and for a session whose agents do not form one tree under ``"0"``."""
    sessions: dict[str, dict[str, TraceAgent]] = {}
    first_row: dict[tuple[str, str], int] = {}
    with contextlib.closing(iter_json_lines(path, "agent trace")) as lines:
        for turns, line in enumerate(lines, 1):
            _read_row(path, line, turns, sessions, first_row)
    if not sessions:
        raise ConfigError(f"agent trace {path} holds no turns")
    for session, agents in sessions.items():
        _check_tree(session, agents, functools.partial(_where, path, first_row, session))
    return AgentTrace(
        sessions=[TraceSession(id=k, agents=list(v.values())) for k, v in sessions.items()]
    )


def _where(path: Path, first_row: dict[tuple[str, str], int], session: str, name: str) -> str:
    """``file:line`` of agent `name`'s first row."""
    return f"{path}:{first_row[(session, name)]}"


def _check_tree(
    session: str, agents: dict[str, TraceAgent], where_of: Callable[[str], str]
) -> None:
    """Refuse, in one line, a session whose agents are not one tree under ``"0"``: no main
    agent, a parent with no turns in the session, a joined step the parent does not have,
    parents in a cycle, sub-agents nested deeper than `MAX_DEPTH` or a step waiting for more
    than `MAX_FANOUT`. Linear in the agents: each one's depth is found once."""
    if "0" not in agents:
        raise ConfigError(
            f'{where_of(next(iter(agents)))}: session {session!r} has no main agent "0"'
        )
    depth: dict[str, int] = {"0": 0}
    fanout: dict[tuple[str, int], int] = defaultdict(int)
    for name, agent in agents.items():
        where = where_of(name)
        if agent.parent is None or agent.joins_step is None:
            continue
        parent = agents.get(agent.parent)
        if parent is None:
            raise ConfigError(
                f"{where}: agent {name!r} of session {session!r} names parent_agent "
                f"{agent.parent!r}, which has no turns in the session"
            )
        if agent.joins_step >= len(parent.steps):
            raise ConfigError(
                f"{where}: agent {name!r} of session {session!r} joins step {agent.joins_step} "
                f"of agent {agent.parent!r}, which has steps 0 to {len(parent.steps) - 1}"
            )
        key = (agent.parent, agent.joins_step)
        fanout[key] += 1
        if fanout[key] > MAX_FANOUT:
            raise ConfigError(
                f"{where}: step {agent.joins_step} of agent {agent.parent!r} in session "
                f"{session!r} waits for more than labkit's limit of {MAX_FANOUT} sub-agents"
            )
        # Walk up to an agent of known depth; a walk that comes back on itself is a cycle.
        chain = [name]
        up = agent.parent
        while up not in depth:
            if up in chain:
                cycle = " -> ".join([*chain[chain.index(up) :], up])
                raise ConfigError(
                    f"{where}: the parent_agent links of session {session!r} form a cycle: {cycle}"
                )
            chain.append(up)
            next_up = agents[up].parent
            assert next_up is not None  # only "0" has none, and "0" has a depth
            up = next_up
        base = depth[up]
        for k, link in enumerate(reversed(chain), 1):
            depth[link] = base + k
        if depth[name] > MAX_DEPTH:
            raise ConfigError(
                f"{where}: session {session!r} nests sub-agents {depth[name]} deep, over "
                f"labkit's limit of {MAX_DEPTH}"
            )


class _Turn:
    """What `session_trace` takes from one record: its agent, step and sizes."""

    __slots__ = (
        "agent",
        "calls",
        "input_tokens",
        "joins",
        "output_tokens",
        "parent",
        "step",
        "tool_ms",
    )

    def __init__(self, r: RequestRecord) -> None:
        """ValueError (its reason) for tags or counts no trace row can hold."""
        tags = r.tags
        self.agent = str(tags["agent"])
        parent = tags.get("parent")
        self.parent = None if parent is None else str(parent)
        if len(self.agent) > MAX_NAME_CHARS or len(self.parent or "") > MAX_NAME_CHARS:
            raise ValueError("an agent path too long")
        self.step = _whole_tag(tags.get("step", 0), "step", MAX_STEPS * 4)
        joins = tags.get("joins_step")
        self.joins = None if joins is None else _whole_tag(joins, "joins_step", MAX_STEPS * 4)
        self.calls = _whole_tag(tags.get("calls", 0), "calls", MAX_TOOL_CALLS)
        tool_ms = tags.get("tool_ms", 0.0)
        if isinstance(tool_ms, bool) or not isinstance(tool_ms, int | float):
            raise ValueError("tool_ms is not a number")
        if not 0 <= tool_ms <= MAX_DELAY_MS:  # NaN fails both
            raise ValueError(f"tool_ms {tool_ms} is not from 0 to {MAX_DELAY_MS:.0f}")
        self.tool_ms = float(tool_ms)
        self.input_tokens = r.usage.input_tokens or 0
        self.output_tokens = r.usage.output_tokens or 0
        if not 0 <= self.input_tokens <= MAX_PROMPT_TOKENS:
            raise ValueError(f"input tokens {self.input_tokens} out of 0 to {MAX_PROMPT_TOKENS}")
        if not 0 <= self.output_tokens <= MAX_OUTPUT_TOKENS:
            raise ValueError(f"output tokens {self.output_tokens} out of 0 to {MAX_OUTPUT_TOKENS}")


def _whole_tag(value: Any, name: str, cap: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= cap:
        raise ValueError(f"tag {name} is not a whole number from 0 to {cap}")
    return value


def session_trace(
    records: list[RequestRecord],
    block_tokens: int = 512,
    on_skip: Callable[[str], None] | None = None,
) -> AgentTrace:
    """labkit's `session` records as an agent trace: per session and agent its successful
    steps in order, the tool gap before each, and hash ids where each step's prompt extends
    the step before it (a session's history is its prompt prefix). What a trace cannot hold
    is left out, with `on_skip` told why: a record with tags or counts out of range, a
    sub-agent whose parent (or the parent's joined step) never succeeded, a session without
    its main agent's turns. The trace written reads back with `read_agent_trace`."""
    skip = on_skip or (lambda _reason: None)
    by_agent: dict[tuple[int, str], list[_Turn]] = defaultdict(list)
    for r in records:
        session = r.tags.get("session")
        if r.warmup or r.error is not None or "agent" not in r.tags or not isinstance(session, int):
            continue
        try:
            turn = _Turn(r)
        except ValueError as exc:
            skip(f"session {session}: a turn left out ({exc})")
            continue
        by_agent[(session, turn.agent)].append(turn)
    turns_of: dict[int, dict[str, list[_Turn]]] = defaultdict(dict)
    for (session, path), turns in sorted(by_agent.items()):
        turns.sort(key=lambda t: t.step)
        turns_of[session][path] = turns
    sessions: list[TraceSession] = []
    next_id = 0
    for session, agents in sorted(turns_of.items()):
        if "0" not in agents:
            skip(f"session {session}: left out, no turn of its main agent succeeded")
            continue
        out = TraceSession(id=f"s{session}")
        for path, turns in agents.items():
            joins = _joined_step(path, turns[0], agents)
            if isinstance(joins, str):
                skip(f"session {session}: agent {path} left out ({joins})")
                continue
            agent = TraceAgent(
                path=path, parent=turns[0].parent if joins is not None else None, joins_step=joins
            )
            ids: list[int] = []
            for t in turns:
                blocks = t.input_tokens // block_tokens
                while len(ids) < blocks:
                    ids.append(next_id)
                    next_id += 1
                agent.steps.append(
                    TraceStep(
                        input_tokens=t.input_tokens,
                        output_tokens=t.output_tokens,
                        delay_ms=t.tool_ms,
                        hash_ids=ids[:blocks],
                        tool_calls=t.calls,
                    )
                )
            out.agents.append(agent)
        kept = {a.path for a in out.agents}
        while lost := [a for a in out.agents if a.parent is not None and a.parent not in kept]:
            for a in lost:  # sub-agents of an agent left out
                skip(f"session {session}: agent {a.path} left out (its parent {a.parent} is)")
                kept.discard(a.path)
            out.agents = [a for a in out.agents if a.path in kept]
        try:
            _check_tree(out.id, {a.path: a for a in out.agents}, lambda name: f"agent {name}")
        except ConfigError as exc:
            skip(f"session {session}: left out ({exc})")
            continue
        sessions.append(out)
    return AgentTrace(sessions=sessions)


def _joined_step(path: str, first: _Turn, agents: dict[str, list[_Turn]]) -> int | str | None:
    """The index, among its parent's successful turns, of the turn sub-agent `path` joins
    (None: the main agent; a string: why it cannot be written). A run counts failed turns
    in its steps, a trace only the successful ones: the joined turn is the parent's first
    success at or after the step the run names."""
    if path == "0":
        return None
    if first.parent is None or first.joins is None:
        return "it names no parent"
    parent = agents.get(first.parent)
    if parent is None:
        return f"no turn of its parent {first.parent} succeeded"
    index = sum(1 for t in parent if t.step < first.joins)
    if index >= len(parent):
        return f"the step of {first.parent} it joins never succeeded"
    return index


def agent_trace_text(trace: AgentTrace) -> str:
    """`trace` as JSONL rows (AIPerf's keys, labkit's three where there are branches)."""
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
    return "\n".join(rows) + "\n"


def write_agent_trace(trace: AgentTrace, path: Path) -> None:
    """Write `trace` as JSONL rows at `path` (`agent_trace_text`): a new file renamed into
    place, so a link planted at `path` is replaced, never written through."""
    write_new_file(path, agent_trace_text(trace))
