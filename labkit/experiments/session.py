"""`session`: agent sessions — tool loops, sub-agents, compaction — measured as whole jobs.

Each session loops: a request offers tools in the provider's own format
(`Provider.tool_format`); a reply's calls run simulated tools (`tool_latency`,
`tool_result_tokens`) or fan out to sub-agents, and the next turn carries the calls and their
results, up to a final answer or `max_steps`; or the turns come from an agent trace. A failed
turn costs that turn only. Sessions run `concurrency` at a time (or at `rate`) as one level on
every executor; a resumed session replays its recorded turns and sends from its first
unfinished step. See docs/experiments.md, "Agent sessions".
"""

from __future__ import annotations

import asyncio
import random
import secrets
import time
from collections import defaultdict
from collections.abc import AsyncGenerator, Callable
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    model_validator,
)

from labkit.analysis.selection import latest_pass
from labkit.analysis.sessions import session_figures
from labkit.errors import ConfigError
from labkit.experiments.base import ExperimentSettings, PlannedRequest, register_experiment
from labkit.experiments.paced import LevelContext, LevelPlan, PacedExperiment, SendFn, Share
from labkit.providers.base import ChatRequest, Provider, ProviderSettings, SamplingParams
from labkit.providers.tools import ToolChoice, ToolFormat, ToolResult, ToolSpec
from labkit.records import ErrorKind, LabAnswer, RecordToolCall, RequestRecord
from labkit.wording.session import session_answer
from labkit.workloads import PromptSizing, measure_sizing
from labkit.workloads.agent_traces import (
    MAX_DELAY_MS,
    MAX_FANOUT,
    MAX_PROMPT_TOKENS,
    MAX_STEPS,
    AgentTrace,
    TraceAgent,
    TraceSession,
    read_agent_trace,
)
from labkit.workloads.sizing import filler_text
from labkit.workloads.traces import TraceEntry, trace_prompt

__all__ = [
    "SessionExperiment",
    "SessionPlan",
    "SessionSettings",
    "SessionState",
    "StepMemo",
    "ToolLatency",
]

Message = dict[str, Any]

#: Sessions one experiment runs (each is planned up front).
MAX_SESSIONS = 100_000


class ToolLatency(BaseModel):
    """How long a simulated tool takes: fixed, uniform, exponential, or a fixed script."""

    model_config = ConfigDict(extra="forbid")

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    distribution: Literal["fixed", "uniform", "exponential"] = "fixed"
    ms: NonNegativeFloat = Field(
        default=100.0, le=MAX_DELAY_MS, description="Fixed value, or the mean."
    )
    max_ms: NonNegativeFloat | None = Field(
        default=None, le=MAX_DELAY_MS, description="Uniform: upper bound."
    )
    script: list[Annotated[NonNegativeFloat, Field(le=MAX_DELAY_MS)]] | None = Field(
        default=None,
        max_length=MAX_STEPS,
        description="Latency of each call in order (cycled); overrides the rest.",
    )

    def draw(self, rng: random.Random, n: int) -> float:
        """The latency in ms of a session's `n`-th call (at most `MAX_DELAY_MS`: an
        exponential draw's tail is cut there)."""
        if self.script:
            return self.script[n % len(self.script)]
        if self.distribution == "uniform":
            return rng.uniform(self.ms, self.max_ms if self.max_ms is not None else self.ms)
        if self.distribution == "exponential":
            return min(rng.expovariate(1.0 / self.ms), MAX_DELAY_MS) if self.ms else 0.0
        return self.ms


def _default_tools() -> list[ToolSpec]:
    return [ToolSpec(name="lookup", description="Look a fact up; returns text.")]


class SessionSettings(ExperimentSettings):
    """Agent sessions: tool loops with sub-agents and compaction, or a replayed trace."""

    model_config = ConfigDict(allow_inf_nan=False)

    kind: Literal["session"] = "session"
    sessions: PositiveInt = Field(default=4, le=MAX_SESSIONS, description="Sessions to run.")
    concurrency: PositiveInt = Field(
        default=2, le=MAX_FANOUT, description="Sessions in flight at once."
    )
    rate: PositiveFloat | None = Field(
        default=None,
        ge=1000.0 / MAX_DELAY_MS,
        description="Sessions started per second (open loop; at least one an hour); null: "
        "closed loop.",
    )
    max_steps: PositiveInt = Field(
        default=8, le=MAX_STEPS, description="Model turns per agent at most."
    )
    tool_steps: NonNegativeInt | None = Field(
        default=2,
        description="Turns that must call a tool before the answer (then tool_choice none); "
        "null: the model decides (tool_choice auto).",
    )
    tools: list[ToolSpec] = Field(default_factory=_default_tools, min_length=1)
    tool_latency: ToolLatency = Field(default_factory=ToolLatency)
    tool_result_tokens: PositiveInt = Field(
        default=48, le=MAX_PROMPT_TOKENS, description="Each tool result's size."
    )
    parallel_tools: bool = Field(
        default=True, description="Run one turn's calls side by side (false: one by one)."
    )
    subagents: NonNegativeInt = Field(
        default=0,
        le=MAX_FANOUT,
        description="Sub-agents the main agent's first tool step fans out to.",
    )
    subagent_tool_steps: NonNegativeInt = Field(
        default=1, le=MAX_STEPS, description="Forced tool turns of each sub-agent."
    )
    compact_at_tokens: PositiveInt | None = Field(
        default=None,
        le=MAX_PROMPT_TOKENS,
        description="Compact the history once a turn's prompt passes this.",
    )
    summary_tokens: PositiveInt = Field(
        default=32, le=MAX_PROMPT_TOKENS, description="A compaction's summary size."
    )
    task_tokens: PositiveInt = Field(
        default=32, le=MAX_PROMPT_TOKENS, description="The task message's size."
    )
    session_slo_ms: PositiveFloat | None = Field(
        default=None, description="Session completion SLO: goodput counts sessions within it."
    )
    trace: Path | None = Field(default=None, description="An agent trace to replay instead.")
    trace_block_tokens: PositiveInt = Field(default=512, description="Tokens per hash id.")
    speedup: PositiveFloat = Field(default=1.0, description="A trace's gaps divided by this.")
    seed: int = 0
    params: SamplingParams = Field(
        default_factory=lambda: SamplingParams(max_tokens=48, temperature=0)
    )

    @model_validator(mode="after")
    def _check(self) -> SessionSettings:
        if self.tool_steps is not None and self.tool_steps >= self.max_steps:
            raise ValueError("tool_steps must be below max_steps (the answer needs a turn)")
        if len({t.name for t in self.tools}) != len(self.tools):
            raise ValueError("tools: each name once")
        return self


class StepMemo(BaseModel):
    """A turn a resumed session replays instead of sending: what it answered."""

    model_config = ConfigDict(extra="forbid")

    text: str = ""
    calls: list[RecordToolCall] = Field(default_factory=list)
    input_tokens: int | None = None
    failed: bool = Field(default=False, description="The turn failed: its retry follows.")


class SessionState(BaseModel):
    """What `prepare` learnt, for every worker."""

    model_config = ConfigDict(extra="forbid")

    prompt_sizing: PromptSizing = Field(default_factory=PromptSizing)
    exact_length_params: SamplingParams = Field(default_factory=dict)
    trace: AgentTrace | None = None


class SessionTodo(BaseModel):
    """One session still to run, with the turns it replays."""

    model_config = ConfigDict(extra="forbid")

    index: NonNegativeInt
    nonce: str
    run: str
    memo: dict[str, StepMemo] = Field(default_factory=dict)


class SessionPlan(LevelPlan):
    """The sessions still to run."""

    sessions: list[SessionTodo]


#: A turn's errors that are no answer of the provider's: the request was cut by a kill or
#: lost with its Ray node; a resume sends it again.
_NOT_ANSWERED = (ErrorKind.CANCELLED, ErrorKind.LOST)


@register_experiment
class SessionExperiment(PacedExperiment[SessionState, SessionPlan]):
    """Agent sessions as jobs: completion time and its critical-path split."""

    kind: ClassVar[str] = "session"
    settings_model: ClassVar[type[ExperimentSettings]] = SessionSettings
    question: ClassVar[str] = (
        "How long does an agent's whole job (tool loops, sub-agents) take on this provider, "
        "and how much of it is the provider's queue, prefill and decode, the tools, and labkit?"
    )
    state_model: ClassVar[type[BaseModel]] = SessionState
    level_model: ClassVar[type[LevelPlan]] = SessionPlan

    def __init__(self, settings: ExperimentSettings, index: int = 0) -> None:
        super().__init__(settings, index)
        self._sizing = PromptSizing()
        self._exact: SamplingParams = {}
        self._format: ToolFormat | None = None
        self._trace: AgentTrace | None = None

    @property
    def _s(self) -> SessionSettings:
        assert isinstance(self.settings, SessionSettings)
        return self.settings

    def connections_needed(self) -> int:
        """One connection per session in flight, each with its sub-agents."""
        return self._s.concurrency * (1 + self._s.subagents)

    def planned_per_path(self, provider: Provider) -> int | None:
        """The warm-ups only: the turns are counted as they are sent."""
        return self._s.warmup

    def validate_for(self, settings: ProviderSettings) -> None:
        """A generated session needs a provider that takes tools; a trace must read, and
        its longest gap, divided by `speedup`, stay within `MAX_DELAY_MS`."""
        if self._s.trace is not None:
            self._check_trace(read_agent_trace(self._s.trace))

    def _check_trace(self, trace: AgentTrace) -> AgentTrace:
        longest = trace.longest_delay_ms() / self._s.speedup
        if longest > MAX_DELAY_MS:
            raise ConfigError(
                f"{self.name}: the trace's longest gap at speedup {self._s.speedup:g} is "
                f"{longest:.0f} ms, over labkit's limit of {MAX_DELAY_MS:.0f} ms"
            )
        return trace

    async def prepare(self, provider: Provider) -> None:
        """Calibrate words per token; take the provider's tool format (or the trace, read
        in a thread: a long one must not hold up the loop, nor a SIGTERM with it)."""
        self._format = provider.tool_format()
        if self._s.trace is not None:
            self._trace = self._check_trace(
                await asyncio.to_thread(read_agent_trace, self._s.trace)
            )
            self._exact = provider.exact_length_params()
        self._sizing = await measure_sizing(provider)

    def plan(self, provider: Provider) -> list[PlannedRequest]:
        """Only the warm-ups: the sessions are run by `run_share`."""
        return self.warmups("session-warmup", self._sizing.filler(self._s.task_tokens))

    def shard_state(self) -> SessionState:
        """The calibration and the trace."""
        return SessionState(
            prompt_sizing=self._sizing, exact_length_params=self._exact, trace=self._trace
        )

    def restore(self, state: SessionState) -> None:
        """Take the runner's calibration into a worker (the tool format is the provider's)."""
        self._sizing = state.prompt_sizing
        self._exact = dict(state.exact_length_params)
        self._trace = state.trace

    def session_count(self) -> int:
        """Sessions to run: the configured count, or the trace's."""
        return len(self._trace.sessions) if self._trace is not None else self._s.sessions

    # --- resume ------------------------------------------------------------------------

    def resume_point(self, index: int, previous: list[RequestRecord]) -> SessionTodo | None:
        """Session `index` still to run, with its recorded turns to replay (None: done)."""
        mine = latest_pass(
            [r for r in previous if not r.warmup and r.tags.get("session") == index],
            "session_run",
        )
        if not mine:
            return SessionTodo(index=index, nonce=secrets.token_hex(4), run=secrets.token_hex(3))
        done = [r for r in mine if r.error is None and r.plan_key]
        if any(r.tags.get("agent") == "0" and r.tags.get("final") for r in done):
            return None
        first = mine[0]
        # A turn that failed stays failed, so the resumed loop goes on to its retry as the
        # first run did; one cut by the kill, or lost with the Ray node that sent it, was no
        # answer of the provider's and is sent again.
        memo = {
            str(r.plan_key): StepMemo(failed=True)
            for r in mine
            if r.plan_key and r.error is not None and r.error.kind not in _NOT_ANSWERED
        }
        memo.update(
            (
                str(r.plan_key),
                StepMemo(
                    text=r.output_text or "",
                    calls=list(r.tool_calls or []),
                    input_tokens=r.usage.input_tokens,
                ),
            )
            for r in done
        )
        return SessionTodo(
            index=index,
            nonce=str(first.tags.get("session_nonce", "")),
            run=str(first.tags.get("session_run", "")),
            memo=memo,
        )

    async def level_plans(
        self, provider: Provider, context: LevelContext
    ) -> AsyncGenerator[SessionPlan, None]:
        """One level: every session not yet finished."""
        if self._trace is None and provider.tool_format() is None:
            context.message(f"{self.name}: provider {provider.id!r} takes no tools, skipped")
            return
        by_session: dict[int, list[RequestRecord]] = defaultdict(list)
        for record in context.previous():  # grouped once: linear in records and sessions
            session = record.tags.get("session")
            if isinstance(session, int) and not isinstance(session, bool):
                by_session[session].append(record)
        left: list[SessionTodo] = []
        for i in range(self.session_count()):
            todo = self.resume_point(i, by_session.get(i, []))
            if todo is not None:
                left.append(todo)
            if i % 4096 == 4095:
                await asyncio.sleep(0)  # let a signal's handler run
        if not left:
            context.message(f"{self.name}: every session already measured, skipped")
            return
        yield SessionPlan(
            title=f"{len(left)} sessions", most_workers=self._s.concurrency, sessions=left
        )

    # --- running -----------------------------------------------------------------------

    async def run_share(
        self, provider: Provider, level: SessionPlan, share: Share, t0_ns: int, send: SendFn
    ) -> None:
        """Every `share.of`-th session, `concurrency / share.of` at a time (or at `rate`)."""
        self._format = provider.tool_format()
        mine = [s for pos, s in enumerate(level.sessions) if pos % share.of == share.index]
        streams = len(range(share.index, self._s.concurrency, share.of))
        if not mine or (not streams and self._s.rate is None):
            return
        wait_ns = t0_ns - time.perf_counter_ns()
        if wait_ns > 0:
            await asyncio.sleep(wait_ns / 1e9)

        async def tagged(planned: PlannedRequest, queue_ms: float) -> None:
            planned.tags.update(share.tags)
            await send(planned, queue_ms)

        rate = self._s.rate
        if rate is not None:
            start = time.perf_counter()

            async def at(pos: int, todo: SessionTodo) -> None:
                # Session `pos` of this share is the level's session pos * of + index.
                delay = start + (pos * share.of + share.index) / rate - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                await self.run_session(todo, tagged)

            await asyncio.gather(*(at(p, t) for p, t in enumerate(mine)))
            return
        queue = iter(mine)

        async def stream() -> None:
            for todo in queue:
                await self.run_session(todo, tagged)

        await asyncio.gather(*(stream() for _ in range(streams)))

    async def run_session(self, todo: SessionTodo, send: SendFn) -> None:
        """One session: its main agent (and, through it, any sub-agents)."""
        if self._trace is not None:
            await self._replay_agent(todo, self._trace.sessions[todo.index], "0", send)
            return
        task = f"[{todo.nonce}] Task {todo.index}: " + self._sizing.filler(
            self._s.task_tokens, todo.index
        )
        await self.run_agent(todo, "0", task, send)

    def _system(self) -> str:
        return self._s.system or (
            "You are an agent. Call a tool to look facts up, then give a short final answer."
        )

    def _choice(self, step: int, forced: int | None) -> ToolChoice:
        if forced is None:
            return "auto"
        return "required" if step < forced else "none"

    def _tags(self, todo: SessionTodo, agent: str) -> dict[str, str | int | float | bool]:
        return {
            "session": todo.index,
            "agent": agent,
            "session_run": todo.run,
            "session_nonce": todo.nonce,
        }

    async def _send_turn(
        self,
        todo: SessionTodo,
        planned: PlannedRequest,
        send: SendFn,
        calls_of: Callable[[RequestRecord], list[Any]],
        last: bool | None = None,
    ) -> tuple[RequestRecord | None, StepMemo | None]:
        """Send one turn (or replay it from the memo): its record, or its memo."""
        memo = todo.memo.get(planned.key)
        if memo is not None:
            return None, memo
        answers: list[RequestRecord] = []

        def keep(record: RequestRecord) -> None:
            # When labkit has the reply in hand (its record built): the session's clock
            # runs on from here, so reading the reply is labkit's time, not the provider's.
            record.tags["read_ns"] = time.perf_counter_ns()
            if record.error is None:
                calls = calls_of(record)
                record.tags["calls"] = len(calls)
                record.tags["final"] = not calls if last is None else last
            answers.append(record)

        planned.on_record = keep
        await send(planned, 0.0)
        return (answers[-1] if answers else None), None

    async def run_agent(
        self,
        todo: SessionTodo,
        agent: str,
        task: str,
        send: SendFn,
        parent: str | None = None,
        joins_step: int | None = None,
    ) -> str:
        """One agent's tool loop; its final answer (empty at the step limit)."""
        fmt = self._format
        assert fmt is not None
        s = self._s
        t0 = time.perf_counter_ns()
        history: list[Message] = [
            {"role": "system", "content": self._system()},
            {"role": "user", "content": task},
        ]
        forced = s.tool_steps if parent is None else s.subagent_tool_steps
        tool_ms, subagents, compacted, tool_step, call_no = 0.0, 0, False, 0, 0
        rng = random.Random(f"{s.seed}:{todo.index}:{agent}")
        for step in range(s.max_steps):
            choice = self._choice(tool_step, forced)
            params = {**s.params, **fmt.params(s.tools, choice)}
            key = f"{self.name}/s{todo.index}/{agent}/k{step}"
            tags = {
                **self._tags(todo, agent),
                "resumed": bool(todo.memo),
                "step": step,
                "agent_t0_ns": t0,
                "tool_ms": tool_ms,
                "subagents": subagents,
                "compacted": compacted,
            }
            if parent is not None:
                tags.update(parent=parent, joins_step=joins_step if joins_step is not None else 0)
            turn = [*history, *fmt.closing(choice)]
            request = ChatRequest(turn, params, f"session-s{todo.index}")
            planned = PlannedRequest(key=key, request=request, trial=step, tags=tags)
            record, memo = await self._send_turn(todo, planned, send, fmt.calls_in)
            tool_ms, subagents, compacted = 0.0, 0, False
            failed = record is None or record.error is not None
            if memo.failed if memo is not None else failed:
                continue  # a failed turn costs this step; the same turn is sent again
            text = memo.text if memo is not None else (record.output_text or "" if record else "")
            calls = memo.calls if memo is not None else fmt.calls_in(record) if record else []
            prompt = (
                memo.input_tokens
                if memo is not None
                else (record.usage.input_tokens if record else None)
            )
            if not calls:
                return text
            replayed = f"{self.name}/s{todo.index}/{agent}/k{step + 1}" in todo.memo
            started = time.perf_counter_ns()
            if parent is None and s.subagents and tool_step == 0:
                answers = await asyncio.gather(
                    *(
                        self.run_agent(
                            todo,
                            f"{agent}.{i + 1}",
                            f"Sub-task {i + 1} of: {task}",
                            send,
                            parent=agent,
                            joins_step=step + 1,
                        )
                        for i in range(s.subagents)
                    )
                )
                joined = "\n".join(a or "(no answer)" for a in answers)
                results = [ToolResult(call=c, content=joined) for c in calls]
                subagents = s.subagents
            else:
                results = await self._run_tools(calls, rng, call_no, replayed)
            call_no += len(calls)
            tool_step += 1
            tool_ms = (time.perf_counter_ns() - started) / 1e6
            history = [*history, *fmt.assistant(text, calls), *fmt.results(results)]
            if s.compact_at_tokens and prompt and prompt > s.compact_at_tokens:
                summary = "Summary of the work so far: " + self._sizing.filler(
                    s.summary_tokens, step
                )
                history = [*history[:2], {"role": "user", "content": summary}]
                compacted = True
        return ""

    async def _run_tools(
        self, calls: list[RecordToolCall], rng: random.Random, first: int, replayed: bool
    ) -> list[ToolResult]:
        """The simulated tools of one turn: each sleeps its drawn latency (not when the
        turn after it was already recorded) and returns its result text."""
        s = self._s
        latencies = [s.tool_latency.draw(rng, first + i) for i in range(len(calls))]

        async def one(i: int, call: RecordToolCall) -> ToolResult:
            if not replayed and latencies[i]:
                await asyncio.sleep(latencies[i] / 1000.0)
            text = filler_text(self._sizing.words_for(s.tool_result_tokens), first + i)
            return ToolResult(call=call, content=f"Result of {call.name}: {text}")

        if s.parallel_tools:
            return list(await asyncio.gather(*(one(i, c) for i, c in enumerate(calls))))
        return [await one(i, c) for i, c in enumerate(calls)]

    async def _replay_agent(
        self,
        todo: SessionTodo,
        session: TraceSession,
        path: str,
        send: SendFn,
    ) -> None:
        """One agent of a trace: each turn at its recorded lengths after its recorded gap,
        the sub-agents a turn waits for run side by side first."""
        agent: TraceAgent | None = session.agent(path)
        if agent is None:
            return
        s = self._s
        t0 = time.perf_counter_ns()
        for step, turn in enumerate(agent.steps):
            started = time.perf_counter_ns()
            children = session.children(path, step)
            if children:
                await asyncio.gather(
                    *(self._replay_agent(todo, session, c.path, send) for c in children)
                )
            key = f"{self.name}/s{todo.index}/{path}/k{step}"
            left = turn.delay_ms / s.speedup - (time.perf_counter_ns() - started) / 1e6
            if left > 0 and key not in todo.memo and step > 0:
                await asyncio.sleep(left / 1000.0)
            tool_ms = (time.perf_counter_ns() - started) / 1e6 if step > 0 else 0.0
            entry = TraceEntry(0.0, turn.input_tokens, turn.output_tokens, tuple(turn.hash_ids))
            prompt = trace_prompt(
                entry, step, f"{todo.nonce}{path}", self._sizing,
                block_tokens=s.trace_block_tokens, header_tokens=4,
            )  # fmt: skip
            params = {**s.params, **self._exact, "max_tokens": max(turn.output_tokens, 1)}
            tags = {
                **self._tags(todo, path),
                "resumed": bool(todo.memo),
                "step": step,
                "agent_t0_ns": t0,
                "tool_ms": tool_ms,
                "subagents": len(children),
                "trace_calls": turn.tool_calls,
            }
            if agent.parent is not None:
                tags.update(parent=agent.parent, joins_step=agent.joins_step or 0)
            planned = PlannedRequest(
                key=key,
                request=ChatRequest(self.messages(prompt), params, f"session-s{todo.index}"),
                trial=step,
                tags=tags,
            )
            last = step == len(agent.steps) - 1

            def calls_of(record: RequestRecord, n: int = turn.tool_calls) -> list[Any]:
                return [None] * n

            await self._send_turn(todo, planned, send, calls_of, last)

    # --- analysis ----------------------------------------------------------------------

    def analyze(self, provider_id: str, model: str, records: list[RequestRecord]) -> LabAnswer:
        """Per session its job figures, and the critical path over the run."""
        source = self._s.trace.name if self._s.trace is not None else "generated"
        figures = session_figures(records, self._s.session_slo_ms, source)
        if not figures.sessions:
            return self.answer(provider_id, model, "No session turn succeeded.", figures, "failed")
        complete = sum(r.complete for r in figures.sessions)
        status: Literal["ok", "partial"] = "ok" if complete == self.session_count() else "partial"
        return self.answer(
            provider_id, model, session_answer(provider_id, figures), figures, status
        )
