"""`prompt_cache`: does the provider's prompt cache keep a repeated prefix, from what length,
for how long, under concurrency and routing, and what does a hit save?

Every probe sends a priming request whose prefix opens with a fresh nonce (so no earlier
request can have cached it) and then repeats it; the provider's cached-token usage says
whether the repeat was served from the cache (`labkit.analysis.prompt_cache`). The phases,
one level each, vary one thing: ``length``, ``gap``, ``evict``, ``concurrency``, ``routing``
(docs/experiments.md, "A prompt cache's life"). Requests go one at a time (a level's one
worker), so the gaps are the idle times asked.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import AsyncGenerator
from typing import Any, ClassVar, Literal

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

from labkit.analysis.prompt_cache import prompt_cache_figures
from labkit.experiments.base import ExperimentSettings, PlannedRequest, register_experiment
from labkit.experiments.paced import LevelContext, LevelPlan, PacedExperiment, SendFn, Share
from labkit.figures.prompt_cache import CachePhase
from labkit.providers.base import ChatRequest, Provider
from labkit.records import LabAnswer, RequestRecord
from labkit.wording.prompt_cache import prompt_cache_answer
from labkit.workloads.sizing import PromptSizing, measure_sizing

__all__ = [
    "CachePrices",
    "PromptCacheExperiment",
    "PromptCachePhase",
    "PromptCacheSettings",
    "PromptCacheState",
]

#: The phases in the order they run (and their rows appear).
PHASES: tuple[CachePhase, ...] = ("length", "gap", "evict", "concurrency", "routing")


class CachePrices(BaseModel):
    """Prices in USD per million tokens, from the provider's price list (labkit ships none)."""

    model_config = ConfigDict(extra="forbid")

    input: PositiveFloat = Field(description="An uncached input token's price.")
    cached_input: NonNegativeFloat = Field(description="A cached input token's (a cache read).")

    @model_validator(mode="after")
    def _cheaper(self) -> CachePrices:
        if self.cached_input > self.input:
            raise ValueError("prices: cached_input costs more than input")
        return self


class PromptCacheSettings(ExperimentSettings):
    """Probes of the provider's prompt cache; `repeats` probes of each setting."""

    kind: Literal["prompt_cache"] = "prompt_cache"
    repeats: PositiveInt = Field(default=3, description="Probes of each setting of each phase.")
    params: dict[str, Any] = Field(default_factory=lambda: {"temperature": 0, "max_tokens": 8})
    min_tokens: NonNegativeInt | None = Field(
        default=None,
        description="The documented shortest cacheable prompt (tokens); null: the provider's "
        "(OpenAI and Anthropic 1,024 — Anthropic's Haiku 2,048; llama.cpp 0).",
    )
    prefix_tokens: list[PositiveInt] | None = Field(
        default=None,
        description="Prefix lengths of the length phase; null: around the minimum m "
        "(m − 128, m + 128, 2m), or 64 and 256 where there is none; []: no length phase.",
    )
    probe_tokens: PositiveInt | None = Field(
        default=None,
        description="The prefix length of the other phases; null: the longest prefix length.",
    )
    gaps_s: list[PositiveFloat] = Field(
        default_factory=lambda: [0.5, 2.0, 8.0],
        description="Idle gaps, prime start to repeat start (s); hosted caches live minutes "
        "(OpenAI: 5 to 10 minutes idle, Anthropic: 5 minutes), so probe e.g. "
        "[120, 300, 600, 900]; []: no gap phase.",
    )
    evict_after: list[NonNegativeInt] = Field(
        default_factory=lambda: [0, 1, 4],
        description="Other prompts of the same length sent between prime and repeat; []: none.",
    )
    concurrency: list[PositiveInt] = Field(
        default_factory=lambda: [4],
        description="Repeats sent at once after the prime; []: no concurrency phase.",
    )
    routing_key: str | None = Field(
        default=None,
        min_length=1,
        description="The body field that routes a request to a cache (OpenAI: "
        "`prompt_cache_key`): every probe's requests carry one key of their own, except in "
        "the routing phase's probes without a key; null: no key and no routing phase.",
    )
    hit_share: float = Field(
        default=0.5,
        gt=0,
        le=1,
        description="A repeat is a hit when at least this share of its prompt was cached "
        "(a chat template's shared opening alone is not).",
    )
    prices: CachePrices | None = Field(
        default=None, description="USD per million tokens, for the money a hit saves."
    )

    @model_validator(mode="after")
    def _distinct(self) -> PromptCacheSettings:
        for name in ("prefix_tokens", "gaps_s", "evict_after", "concurrency"):
            values = getattr(self, name) or []
            if len(set(values)) != len(values):
                raise ValueError(f"{name} lists each value once")
        return self


class PromptCacheState(BaseModel):
    """What a worker needs to build the prompts: the provider's sizing."""

    model_config = ConfigDict(extra="forbid")

    sizing: PromptSizing = Field(default_factory=PromptSizing)


class PromptCachePhase(LevelPlan):
    """One phase: the settings it probes and the prefix length of its probes."""

    phase: CachePhase
    settings: list[float]
    tokens: list[int] = Field(description="The prefix length of each setting's probes.")
    level_run: str

    def record_label(self) -> str:
        """The phase, as this pass's records carry it."""
        return self.phase


def setting_label(phase: str, setting: float) -> str:
    """A row's setting in words."""
    if phase == "length":
        return f"{setting:,.0f} tokens"
    if phase == "gap":
        return f"{setting:g} s idle"
    if phase == "evict":
        return f"after {setting:g} other prompt{'' if setting == 1 else 's'}"
    if phase == "concurrency":
        return f"{setting:g} at once"
    return "with a routing key" if setting else "without a routing key"


@register_experiment
class PromptCacheExperiment(PacedExperiment[PromptCacheState, PromptCachePhase]):
    """Probes of a provider's prompt cache: length, lifetime, eviction, concurrency, routing."""

    kind: ClassVar[str] = "prompt_cache"
    settings_model: ClassVar[type[ExperimentSettings]] = PromptCacheSettings
    question: ClassVar[str] = (
        "Does the provider's prompt cache keep a repeated prefix — from what length, for how "
        "long, under concurrency and with a routing key — and what does a hit save?"
    )
    state_model: ClassVar[type[BaseModel]] = PromptCacheState
    level_model: ClassVar[type[LevelPlan]] = PromptCachePhase

    def __init__(self, settings: ExperimentSettings, index: int = 0) -> None:
        super().__init__(settings, index)
        self._state = PromptCacheState()
        self._min: dict[str, int | None] = {}
        self._slots: dict[str, int | None] = {}
        self._context: dict[str, int | None] = {}

    @property
    def _s(self) -> PromptCacheSettings:
        assert isinstance(self.settings, PromptCacheSettings)
        return self.settings

    def minimum(self, provider: Provider) -> int | None:
        """The shortest cacheable prompt: the config's, else the provider's documented one."""
        if self._s.min_tokens is not None:
            return self._s.min_tokens
        return provider.prompt_cache_min_tokens

    def lengths(self, provider: Provider) -> list[int]:
        """The length phase's prefix lengths (each repeat sent at once after its prime)."""
        if self._s.prefix_tokens is not None:
            return list(self._s.prefix_tokens)
        m = self.minimum(provider)
        if m:
            return [max(m - 128, 16), m + 128, 2 * m]
        return [64, 256]

    def probe_length(self, provider: Provider) -> int:
        """The prefix length of the phases other than length."""
        if self._s.probe_tokens is not None:
            return self._s.probe_tokens
        return max(self.lengths(provider), default=256)

    async def prepare(self, provider: Provider) -> None:
        """The provider's sizing (prompts of a given length), and its slots and context
        where it reports them (best-effort)."""
        self._state = PromptCacheState(sizing=await measure_sizing(provider))
        self._min[provider.id] = self.minimum(provider)
        try:
            described = await provider.describe()
        except Exception:  # describing is best-effort: the probes run without it
            described = {}
        slots = described.get("total_slots")
        self._slots[provider.id] = slots if isinstance(slots, int) else None
        self._context[provider.id] = provider.settings.context_size()

    def plan(self, provider: Provider) -> list[PlannedRequest]:
        """Only the warm-ups (each its own nonce): the phases are paced by `run_share`."""
        return self.warmups("prompt_cache", self.prompt(secrets.token_hex(4), 64))

    def prompt(self, nonce: str, tokens: int, offset: int = 0) -> str:
        """A prompt of about `tokens` tokens that opens with `nonce`."""
        return f"Probe {nonce}. " + self._state.sizing.filler(max(tokens - 8, 1), offset)

    def connections_needed(self) -> int:
        """The largest number of repeats in flight at once."""
        return max([1, *self._s.concurrency])

    def phases(self, provider: Provider) -> list[tuple[CachePhase, list[float], list[int]]]:
        """Each phase with settings: its settings and their probes' prefix lengths."""
        s, n = self._s, self.probe_length(provider)
        out: list[tuple[CachePhase, list[float], list[int]]] = []
        lengths = self.lengths(provider)
        if lengths:
            out.append(("length", [float(t) for t in lengths], lengths))
        for phase, values in (
            ("gap", s.gaps_s),
            ("evict", [float(k) for k in s.evict_after]),
            ("concurrency", [float(c) for c in s.concurrency]),
            ("routing", [1.0, 0.0] if s.routing_key else []),
        ):
            if values:
                out.append((phase, [float(v) for v in values], [n] * len(values)))  # type: ignore[arg-type]
        return out

    def _requests(self, phase: str, setting: float) -> int:
        per = {"evict": 2 + setting, "concurrency": 1 + setting}.get(phase, 2)
        return int(per) * self._s.repeats

    async def level_plans(
        self, provider: Provider, context: LevelContext
    ) -> AsyncGenerator[PromptCachePhase, None]:
        """The phases one after another; on resume, skip the phases already complete."""
        previous = [r for r in context.previous() if r.error is None and not r.warmup]
        for index, (phase, values, tokens) in enumerate(self.phases(provider)):
            expected = sum(self._requests(phase, v) for v in values)
            done = sum(1 for r in previous if r.tags.get("phase") == phase)
            if done >= expected:
                context.message(f"{self.name}: phase {phase} already measured, skipped")
                continue
            context.expect(expected)
            yield PromptCachePhase(
                index=index,
                title=f"prompt cache: {phase}",
                most_workers=1,
                phase=phase,
                settings=values,
                tokens=tokens,
                level_run=secrets.token_hex(3),
            )

    def shard_state(self) -> PromptCacheState:
        """The sizing, so a worker builds prompts of the same length."""
        return self._state

    def restore(self, state: PromptCacheState) -> None:
        """Take the sizing back."""
        self._state = state

    def _planned(
        self,
        level: PromptCachePhase,
        setting: float,
        trial: int,
        role: str,
        i: int,
        text: str,
        probe: str,
        extra: dict[str, Any] | None = None,
    ) -> PlannedRequest:
        params = {**self._s.params, **(extra or {})}
        request = ChatRequest(self.messages(text), params, f"prompt_cache/{level.phase}")
        tags: dict[str, str | int | float | bool] = {
            "phase": level.phase,
            "setting": setting,
            "probe": probe,
            "role": role,
            "level": level.phase,
            "level_run": level.level_run,
        }
        return PlannedRequest(
            key=f"{self.name}/{level.phase}/{setting:g}/{trial}/{role}{i}",
            request=request,
            trial=trial,
            tags=tags,
        )

    async def run_share(
        self,
        provider: Provider,
        level: PromptCachePhase,
        share: Share,
        t0_ns: int,
        send: SendFn,
    ) -> None:
        """The phase's probes, one request at a time (the concurrency phase's repeats at
        once): every trial of every setting, settings interleaved within a trial."""
        if share.index != 0:
            return
        provider.connections.reserve(self.connections_needed())
        for trial in range(self._s.repeats):
            for setting, tokens in zip(level.settings, level.tokens, strict=True):
                await self._probe(level, setting, tokens, trial, send)

    async def _probe(
        self, level: PromptCachePhase, setting: float, tokens: int, trial: int, send: SendFn
    ) -> None:
        nonce = secrets.token_hex(4)
        probe = f"{level.level_run}-{nonce}"
        text = self.prompt(nonce, tokens, offset=trial)
        extra: dict[str, Any] | None = None
        keyless = level.phase == "routing" and not setting
        if self._s.routing_key and not keyless:  # the probe's key on all of its requests
            extra = {self._s.routing_key: f"labkit-{nonce}"}

        def one(role: str, i: int = 0, body: str = text) -> PlannedRequest:
            return self._planned(level, setting, trial, role, i, body, probe, extra)

        started = time.monotonic()
        await send(one("prime"), 0.0)
        if level.phase == "gap":
            await asyncio.sleep(max(0.0, started + setting - time.monotonic()))
        elif level.phase == "evict":
            for k in range(int(setting)):
                other = self.prompt(secrets.token_hex(4), tokens, offset=trial + k + 1)
                await send(one("filler", k, other), 0.0)
        if level.phase == "concurrency":
            await asyncio.gather(*(send(one("repeat", i), 0.0) for i in range(int(setting))))
        else:
            await send(one("repeat"), 0.0)

    def analyze(self, provider_id: str, model: str, records: list[RequestRecord]) -> LabAnswer:
        """The rows, the lifetime bracket, the TTFT and the money a hit saves."""
        s = self._s
        order: dict[str, int] = {p: k for k, p in enumerate(PHASES)}
        seen: set[tuple[CachePhase, float]] = set()
        for r in records:
            phase, value = r.tags.get("phase"), r.tags.get("setting")
            if phase in order and isinstance(value, int | float):
                seen.add((PHASES[order[str(phase)]], float(value)))
        settings = [
            (phase, value, setting_label(phase, value))
            for phase, value in sorted(
                seen, key=lambda pv: (order[pv[0]], -pv[1] if pv[0] == "routing" else pv[1])
            )
        ]
        prices = (s.prices.input, s.prices.cached_input) if s.prices else None
        figures = prompt_cache_figures(
            settings,
            records,
            hit_share=s.hit_share,
            min_tokens=self._min.get(provider_id, s.min_tokens),
            prices=prices,
            server_slots=self._slots.get(provider_id),
            context_tokens=self._context.get(provider_id),
        )
        judged = sum(r.repeats for r in figures.rows)
        if not judged:
            why = (
                "The provider reported no cached-token count on any repeat."
                if not figures.cached_reported
                else "No probe completed: no repeat to judge."
            )
            return self.answer(provider_id, model, why, figures, status="failed")
        failed = any(r.error is not None for r in records if not r.warmup)
        return self.answer(
            provider_id,
            model,
            prompt_cache_answer(figures),
            figures,
            status="partial" if failed else "ok",
        )
