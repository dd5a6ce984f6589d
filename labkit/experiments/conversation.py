"""`conversation`: multi-turn sessions, each turn sending the whole history.

A session is `turns` requests; turn ``t`` sends every earlier user message and the model's
own earlier answers, then a new user message of ``user_tokens`` tokens, so per turn the answer
sets the provider's cached tokens beside what a perfect prefix cache could reuse. Each cache
variant (``cache: [on, off]``) runs its own sessions with the provider's prompt cache switched
on or off (`Provider.prompt_cache_params`); every session opens with a nonce, so no session
reuses another's prefix. Pacing, plan keys and resume: docs/experiments.md, "Conversations".
"""

from __future__ import annotations

import asyncio
import random
import secrets
import time
from collections import defaultdict
from collections.abc import AsyncGenerator, Iterator
from typing import Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveInt,
    field_validator,
    model_validator,
)

from labkit.analysis.requests import cached_tokens
from labkit.analysis.selection import latest_pass
from labkit.analysis.stats import p_of
from labkit.experiments.base import ExperimentSettings, PlannedRequest, register_experiment
from labkit.experiments.paced import LevelContext, LevelPlan, PacedExperiment, SendFn, Share
from labkit.figures import LinearFit
from labkit.figures.conversation import ConversationFigures, ConversationTurn, ConversationVariant
from labkit.providers.base import ChatRequest, Provider, SamplingParams
from labkit.records import ErrorKind, LabAnswer, RequestRecord
from labkit.wording.conversation import conversation_answer
from labkit.workloads import PromptSizing, answered, build_history, measure_sizing, with_user

__all__ = [
    "ConversationExperiment",
    "ConversationPass",
    "ConversationSession",
    "ConversationSettings",
    "ConversationState",
    "cached_tokens",
]

CacheVariant = Literal["on", "off"]


def _both_variants() -> list[CacheVariant]:
    return ["on", "off"]


class ConversationSettings(ExperimentSettings):
    """Sessions of several turns, per prompt-cache variant."""

    kind: Literal["conversation"] = "conversation"
    sessions: PositiveInt = Field(default=4, description="Sessions per cache variant.")
    turns: PositiveInt = Field(default=4, description="Requests per session.")
    concurrency: PositiveInt = Field(default=2, description="Sessions in flight at once.")
    think_time_s: NonNegativeFloat | tuple[NonNegativeFloat, NonNegativeFloat] = Field(
        default=0.0,
        description="Pause between a turn's end and the next turn (or [min, max], drawn).",
    )
    user_tokens: PositiveInt = Field(
        default=48, description="Length of each turn's new user message, in tokens."
    )
    cache: list[CacheVariant] = Field(
        default_factory=_both_variants,
        min_length=1,
        description="Prompt-cache variants, run one after the other; `off` needs a provider "
        "with a cache switch (llama.cpp `cache_prompt`) and is skipped elsewhere.",
    )
    ignore_eos: bool = Field(
        default=True,
        description="Where the provider can (llama.cpp): every answer exactly max_tokens "
        "long, so the history grows by the same amount each turn.",
    )
    seed: int = Field(default=0, description="Seeds the user messages and think times.")
    repeats: PositiveInt = Field(default=1, description="Unused: `sessions` sets the count.")
    params: SamplingParams = Field(
        default_factory=lambda: SamplingParams(max_tokens=32, temperature=0)
    )

    @field_validator("cache", mode="before")
    @classmethod
    def _yaml_booleans(cls, value: Any) -> Any:
        # YAML reads a bare `on` / `off` as true / false.
        if isinstance(value, list):
            return [
                {True: "on", False: "off"}.get(v, v) if isinstance(v, bool) else v for v in value
            ]
        return value

    @model_validator(mode="after")
    def _check(self) -> ConversationSettings:
        if len(set(self.cache)) != len(self.cache):
            raise ValueError("cache lists on and/or off, each once")
        think = self.think_time_s
        if isinstance(think, tuple) and think[0] > think[1]:
            raise ValueError("think_time_s: [min, max] with min <= max")
        return self


class ConversationSession(BaseModel):
    """One session's state: where it resumes and the history it carries."""

    model_config = ConfigDict(extra="forbid")

    cache: CacheVariant
    index: NonNegativeInt
    nonce: str
    run: str
    start_turn: NonNegativeInt = 0
    history: list[dict[str, str]] = Field(default_factory=list)


class ConversationState(BaseModel):
    """What `prepare` learnt from the provider, taken into every worker (`restore`)."""

    model_config = ConfigDict(extra="forbid")

    prompt_sizing: PromptSizing = Field(default_factory=PromptSizing)
    cache_params: dict[CacheVariant, SamplingParams] = Field(default_factory=dict)
    exact_length_params: SamplingParams = Field(default_factory=dict)
    path: str = "wire"


class ConversationPass(LevelPlan):
    """One cache variant's sessions still to run (all of them, or a resumed run's rest)."""

    cache: CacheVariant
    sessions: list[ConversationSession]


@register_experiment
class ConversationExperiment(PacedExperiment[ConversationState, ConversationPass]):
    """TTFT and prefix-cache reuse per turn of multi-turn sessions."""

    kind: ClassVar[str] = "conversation"
    settings_model: ClassVar[type[ExperimentSettings]] = ConversationSettings
    question: ClassVar[str] = (
        "In a multi-turn conversation that resends its history, how does TTFT grow with the "
        "turn number, how much of the prompt does the provider serve from its prefix cache, "
        "and what does turning that cache off change?"
    )
    state_model: ClassVar[type[BaseModel]] = ConversationState
    level_model: ClassVar[type[LevelPlan]] = ConversationPass

    def __init__(self, settings: ExperimentSettings, index: int = 0) -> None:
        super().__init__(settings, index)
        self._sizing = PromptSizing()
        self._cache_params: dict[CacheVariant, SamplingParams] = {"on": {}, "off": {}}
        self._exact: SamplingParams = {}
        self._path = "wire"

    @property
    def _s(self) -> ConversationSettings:
        assert isinstance(self.settings, ConversationSettings)
        return self.settings

    def connections_needed(self) -> int:
        """One connection per session in flight."""
        return self._s.concurrency

    def planned_per_path(self, provider: Provider) -> int | None:
        """The warm-ups only: the turns are counted as the sessions are driven."""
        return self._s.warmup

    async def prepare(self, provider: Provider) -> None:
        """Calibrate words per token, and take the provider's cache and length switches."""
        self._cache_params = {
            "on": provider.prompt_cache_params(True),
            "off": provider.prompt_cache_params(False),
        }
        self._exact = provider.exact_length_params() if self._s.ignore_eos else {}
        self._path = self.paths_for(provider)[0]
        self._sizing = await measure_sizing(provider)

    def plan(self, provider: Provider) -> list[PlannedRequest]:
        """Only the warm-ups: the sessions are paced by `drive`."""
        return self.warmups("conversation-warmup", self.user_message("warmup", 0, 0, 0))

    def user_message(self, nonce: str, cache_index: int, session: int, turn: int) -> str:
        """Turn `turn`'s new user message: the same text whenever it is rebuilt (resume)."""
        rng = random.Random(f"{self._s.seed}:{cache_index}:{session}:{turn}")
        head = f"[{nonce}] " if turn == 0 else ""
        words = self._sizing.filler(self._s.user_tokens, rng.randrange(1000))
        return f"{head}Turn {turn + 1}: " + words

    def variants(self) -> list[CacheVariant]:
        """The cache variants that can run on the prepared provider (`off` needs a switch)."""
        return [c for c in self._s.cache if c == "on" or self._cache_params["off"]]

    def request(
        self, session: ConversationSession, turn: int, messages: list[dict[str, str]]
    ) -> PlannedRequest:
        """The planned request of one turn."""
        params = {**self._s.params, **self._cache_params[session.cache], **self._exact}
        req = ChatRequest(messages, params, f"conversation-s{session.index}")
        req.client_path = self._path
        tags: dict[str, str | int | float | bool] = {
            "session": session.index,
            "turn": turn,
            "cache": session.cache,
            "session_run": session.run,
            "session_nonce": session.nonce,
            "path": self._path,
        }
        return PlannedRequest(
            key=f"{self.name}/{session.cache}/s{session.index}/t{turn}",
            request=req,
            trial=turn,
            tags=tags,
        )

    def resume_point(
        self, cache: CacheVariant, index: int, previous: list[RequestRecord]
    ) -> ConversationSession:
        """Where session `index` of `cache` starts: after its recorded turns when their
        output text was stored, else from turn 0 as a new pass."""
        cache_index = self._s.cache.index(cache)
        fresh = ConversationSession(
            cache=cache, index=index, nonce=secrets.token_hex(4), run=secrets.token_hex(3)
        )
        mine = _session_pass(
            [
                r
                for r in previous
                if not r.warmup and r.tags.get("cache") == cache and r.tags.get("session") == index
            ]
        )
        done: dict[int, RequestRecord] = {}
        for r in mine:
            if r.error is None and isinstance(r.tags.get("turn"), int):
                done[int(r.tags["turn"])] = r
        if not done:
            return fresh
        kept = 0
        while kept in done:
            kept += 1
        complete = kept >= self._s.turns
        has_text = all(done[t].output_text is not None for t in range(kept))
        if kept == 0 or (not complete and (len(done) > kept or not has_text)):
            # No stored text to rebuild the history from, or a recorded turn after a gap.
            return fresh
        first = done[0]
        session = ConversationSession(
            cache=cache,
            index=index,
            nonce=str(first.tags.get("session_nonce", "")),
            run=str(first.tags.get("session_run", "")),
            start_turn=kept,
        )
        if complete:
            return session
        session.history = build_history(
            self._s.system,
            (
                (self.user_message(session.nonce, cache_index, index, t), done[t].output_text or "")
                for t in range(kept)
            ),
        )
        return session

    async def level_plans(
        self, provider: Provider, context: LevelContext
    ) -> AsyncGenerator[ConversationPass, None]:
        """Each cache variant's sessions, `concurrency` at a time; on resume only what is
        missing (docs/experiments.md, "Conversations": a session's first missing turn, or turn
        0 as a new pass under ``store_text: false``)."""
        if "off" in self._s.cache and "off" not in self.variants():
            context.message(
                f"{self.name}: provider {provider.id!r} has no prompt-cache switch; "
                "the cache-off variant is skipped"
            )
        previous = context.previous()
        for cache in self.variants():
            todo = [self.resume_point(cache, i, previous) for i in range(self._s.sessions)]
            todo = [s for s in todo if s.start_turn < self._s.turns]
            if not todo:
                context.message(f"{self.name}: cache {cache} already measured, skipped")
                continue
            context.expect(sum(self._s.turns - s.start_turn for s in todo))
            yield ConversationPass(
                index=self._s.cache.index(cache),
                title=f"cache {cache}",
                most_workers=self._s.concurrency,
                cache=cache,
                sessions=todo,
            )

    def shard_state(self) -> ConversationState:
        """The calibration and the provider's switches `prepare` took."""
        return ConversationState(
            prompt_sizing=self._sizing,
            cache_params=self._cache_params,
            exact_length_params=self._exact,
            path=self._path,
        )

    def restore(self, state: ConversationState) -> None:
        """Take the runner's calibration and switches into a worker."""
        self._sizing = state.prompt_sizing
        self._cache_params = {"on": {}, "off": {}, **state.cache_params}
        self._exact = dict(state.exact_length_params)
        self._path = state.path

    async def run_share(
        self,
        provider: Provider,
        level: ConversationPass,
        share: Share,
        t0_ns: int,
        send: SendFn,
    ) -> None:
        """Every `share.of`-th session from `share.index`, on every `share.of`-th stream."""
        streams = len(range(share.index, self._s.concurrency, share.of))
        mine = [s for pos, s in enumerate(level.sessions) if pos % share.of == share.index]
        if not streams or not mine:
            return
        wait_ns = t0_ns - time.perf_counter_ns()
        if wait_ns > 0:
            await asyncio.sleep(wait_ns / 1e9)

        async def tagged(planned: PlannedRequest, queue_ms: float) -> None:
            planned.tags.update(share.tags)
            await send(planned, queue_ms)

        await self.run_sessions(iter(mine), tagged, streams)

    async def run_sessions(
        self, sessions: Iterator[ConversationSession], send: SendFn, streams: int
    ) -> None:
        """Run `sessions` on `streams` streams, each taking the next when one ends."""

        async def stream() -> None:
            for session in sessions:
                await self.run_session(session, send)

        await asyncio.gather(*(stream() for _ in range(streams)))

    async def run_session(self, session: ConversationSession, send: SendFn) -> None:
        """Send a session's turns from its start; a failed turn ends the session (the next
        turn would carry an answer the model never gave)."""
        cache_index = self._s.cache.index(session.cache)
        history = session.history or build_history(self._s.system)
        for turn in range(session.start_turn, self._s.turns):
            if turn > session.start_turn:
                await asyncio.sleep(self._think_time(cache_index, session.index, turn))
            user = self.user_message(session.nonce, cache_index, session.index, turn)
            messages = with_user(history, user)
            planned = self.request(session, turn, messages)
            answers: list[RequestRecord] = []
            planned.on_record = answers.append
            await send(planned, 0.0)
            if not answers or answers[-1].error is not None:
                return
            history = answered(messages, answers[-1].output_text or "")

    def _think_time(self, cache_index: int, session: int, turn: int) -> float:
        think = self._s.think_time_s
        if isinstance(think, tuple):
            rng = random.Random(f"{self._s.seed}:think:{cache_index}:{session}:{turn}")
            return rng.uniform(think[0], think[1])
        return float(think)

    def analyze(self, provider_id: str, model: str, records: list[RequestRecord]) -> LabAnswer:
        """Per cache variant and turn: TTFT, cached tokens and reuse; per variant: growth."""
        s = self._s
        by_session: dict[tuple[str, object], list[RequestRecord]] = defaultdict(list)
        for r in records:
            if not r.warmup and r.tags.get("cache") in ("on", "off"):
                by_session[(str(r.tags["cache"]), r.tags.get("session"))].append(r)
        turns: dict[tuple[str, int], list[RequestRecord]] = defaultdict(list)
        reusable: dict[str, float] = {}
        for recs in by_session.values():
            kept = _one_per_turn(_session_pass(recs))
            reusable.update(_reusable_shares(kept))
            for r in kept:
                turns[(str(r.tags["cache"]), int(r.tags["turn"]))].append(r)
        rows: list[ConversationTurn] = []
        variants: list[ConversationVariant] = []
        ran = [c for c in s.cache if any(k[0] == c for k in turns)]
        for cache in ran:
            mine = [
                _turn_row(cache, t, turns[(cache, t)], reusable)
                for t in range(s.turns)
                if turns.get((cache, t))
            ]
            rows.extend(mine)
            variants.append(_variant_row(cache, mine, by_session, s.turns))
        figures = ConversationFigures(
            turns=rows, variants=variants, cache_switch="off" in ran or "off" not in s.cache
        )
        done = [v for v in variants if v.sessions]
        if not done:
            return self.answer(
                provider_id, model, "No conversation turn succeeded.", figures, "failed"
            )
        text = conversation_answer(figures, "off" in s.cache)
        complete = all(v.complete_sessions == s.sessions for v in variants)
        return self.answer(provider_id, model, text, figures, "ok" if complete else "partial")


def _session_pass(records: list[RequestRecord]) -> list[RequestRecord]:
    """One session's records of its latest pass (a resume from turn 0 starts a new one)."""
    return latest_pass(records, "session_run")


def _one_per_turn(records: list[RequestRecord]) -> list[RequestRecord]:
    """Per turn, the successful record (a resumed turn also has its cancelled one)."""
    best: dict[int, RequestRecord] = {}
    for r in sorted(records, key=lambda r: r.started_at):
        turn = r.tags.get("turn")
        if not isinstance(turn, int):
            continue
        if turn not in best or best[turn].error is not None:
            best[turn] = r
    cancelled = ErrorKind.CANCELLED
    return [r for r in best.values() if not (r.error is not None and r.error.kind == cancelled)]


def _reuse(r: RequestRecord) -> float | None:
    cached, total = cached_tokens(r), r.usage.input_tokens
    return cached / total if cached is not None and total else None


def _reusable_shares(records: list[RequestRecord]) -> dict[str, float]:
    """Per record id, the previous turn's prompt and answer as a share of this prompt: what
    a perfect prefix cache could serve (records of one session pass)."""
    by_turn = {int(r.tags["turn"]): r for r in records if r.error is None}
    shares: dict[str, float] = {}
    for turn, r in by_turn.items():
        prev = by_turn.get(turn - 1)
        total = r.usage.input_tokens
        if turn == 0 and total:
            shares[r.record_id] = 0.0
        elif prev is not None and total and prev.usage.input_tokens is not None:
            shares[r.record_id] = min(
                1.0, (prev.usage.input_tokens + (prev.usage.output_tokens or 0)) / total
            )
    return shares


def _turn_row(
    cache: CacheVariant, turn: int, records: list[RequestRecord], reusable: dict[str, float]
) -> ConversationTurn:
    ok = [r for r in records if r.error is None]

    return ConversationTurn(
        cache=cache,
        turn=turn,
        ok=len(ok),
        failed=len(records) - len(ok),
        input_tokens_p50=p_of(ok, lambda r: r.usage.input_tokens, 50),
        cached_tokens_p50=p_of(ok, cached_tokens, 50),
        reuse_p50=p_of(ok, _reuse, 50),
        reusable_p50=p_of(ok, lambda r: reusable.get(r.record_id), 50),
        ttft_ms_p50=p_of(ok, lambda r: r.client.ttft_ms, 50),
        ttft_ms_p90=p_of(ok, lambda r: r.client.ttft_ms, 90),
        prefill_ms_p50=p_of(ok, lambda r: r.provider_timings.prefill_ms, 50),
    )


def _variant_row(
    cache: CacheVariant,
    rows: list[ConversationTurn],
    by_session: dict[tuple[str, object], list[RequestRecord]],
    turns: int,
) -> ConversationVariant:
    sessions = complete = 0
    xs: list[float] = []
    ys: list[float] = []
    for (c, _), recs in by_session.items():
        if c != cache:
            continue
        ok = [r for r in _one_per_turn(_session_pass(recs)) if r.error is None]
        sessions += bool(ok)
        complete += len(ok) == turns
        for r in ok:
            if r.usage.input_tokens is not None and r.client.ttft_ms is not None:
                xs.append(float(r.usage.input_tokens))
                ys.append(r.client.ttft_ms)
    first = rows[0] if rows else None
    last = rows[-1] if rows else None
    return ConversationVariant(
        cache=cache,
        sessions=sessions,
        complete_sessions=complete,
        first_ttft_ms=first.ttft_ms_p50 if first else None,
        last_ttft_ms=last.ttft_ms_p50 if last else None,
        first_input_tokens=first.input_tokens_p50 if first else None,
        last_input_tokens=last.input_tokens_p50 if last else None,
        last_reuse=last.reuse_p50 if last else None,
        ttft_fit=LinearFit.least_squares(xs, ys),
    )
