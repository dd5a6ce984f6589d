"""`trace`: replay a request trace — arrival times and input/output lengths — on its
absolute schedule.

A trace is Mooncake JSONL (``.jsonl``) or CSV (``.csv``). Request ``i`` is sent at
``(timestamp_i - timestamp_0) / speedup`` after the replay starts, on the absolute clock
(`labkit.experiments.pacing.open_loop`: a late send never delays the next), with prompts
built to the stated lengths; a Mooncake block's text is the same wherever its hash id
appears, so the prefix cache sees the trace's sharing. The answer's figures are one load
level (`TraceFigures.replay`). Formats, prompts, outputs: docs/experiments.md, "Trace replay".
"""

from __future__ import annotations

import gc
import secrets
from collections.abc import AsyncGenerator
from functools import cached_property
from pathlib import Path
from typing import ClassVar, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
)

from labkit.analysis.levels import Level, level_figures
from labkit.analysis.selection import latest_pass
from labkit.errors import ConfigError
from labkit.experiments.base import ExperimentSettings, PlannedRequest, register_experiment
from labkit.experiments.paced import LevelContext, LevelPlan, PacedExperiment, SendFn, Share
from labkit.experiments.pacing import open_loop
from labkit.figures.trace import TraceFigures
from labkit.providers.base import ChatRequest, Provider, ProviderSettings, SamplingParams
from labkit.records import ErrorKind, LabAnswer, RequestRecord
from labkit.wording.trace import trace_answer
from labkit.workloads import (
    PromptSizing,
    TraceEntry,
    count_tokens,
    filler_text,
    measure_sizing,
    read_trace,
    trace_prompt,
)

__all__ = ["TraceEntry", "TraceExperiment", "TraceSettings", "read_trace"]

_NS = 1_000_000_000
_UNCAPPED_CONNECTIONS = 1024
_DEFAULT_HEADER_TOKENS = 6
_WARMUP_PROMPT = filler_text(16)
_LABEL = "trace"


class TraceSettings(ExperimentSettings):
    """A trace file and how to replay it."""

    kind: Literal["trace"] = "trace"
    path: Path = Field(
        description="The trace: Mooncake `.jsonl` or `.csv` (relative: to the working directory)."
    )
    time_unit: Literal["ms", "s"] = Field(
        default="ms", description="CSV timestamps' unit (Mooncake's are ms)."
    )
    speedup: PositiveFloat = Field(
        default=1.0, description="Replay this many times faster than recorded (0.5: slower)."
    )
    max_requests: PositiveInt | None = Field(
        default=None, description="Replay only the first this many requests."
    )
    duration_s: PositiveFloat | None = Field(
        default=None, description="Stop sending after this many seconds of replay."
    )
    max_concurrency: PositiveInt | None = Field(
        default=None, description="Cap on requests in flight (waits count as queue)."
    )
    block_tokens: PositiveInt = Field(default=512, description="Tokens per Mooncake hash block.")
    warmup: NonNegativeInt = Field(default=1, description="Warm-up requests before the replay.")
    repeats: PositiveInt = Field(default=1, description="Unused: the trace sets the requests.")
    params: SamplingParams = Field(default_factory=lambda: SamplingParams(temperature=0))


class TraceState(BaseModel):
    """What `prepare` and the warm-ups taught about sizing prompts, taken into every
    worker (`restore`)."""

    model_config = ConfigDict(extra="forbid")

    prompt_sizing: PromptSizing = Field(default_factory=PromptSizing)
    header_tokens: int = _DEFAULT_HEADER_TOKENS
    framing_tokens: int = 0
    exact_length_params: SamplingParams = Field(default_factory=dict)
    path: str = "wire"


class TracePass(LevelPlan):
    """One replay pass of the trace."""

    run: str = Field(description="The pass's salt: six digits, new for every pass.")

    def record_label(self) -> str:
        """The trace's one level, as its records carry it."""
        return _LABEL


@register_experiment
class TraceExperiment(PacedExperiment[TraceState, TracePass]):
    """A trace replayed open loop: latency percentiles and cache hits, as one load level."""

    kind: ClassVar[str] = "trace"
    settings_model: ClassVar[type[ExperimentSettings]] = TraceSettings
    question: ClassVar[str] = (
        "Replaying a recorded trace's arrivals and lengths, what TTFT, decode speed and "
        "throughput does the provider give, and how many prompt tokens does it serve from "
        "its cache?"
    )
    state_model: ClassVar[type[BaseModel]] = TraceState
    level_model: ClassVar[type[LevelPlan]] = TracePass

    def __init__(self, settings: ExperimentSettings, index: int = 0) -> None:
        super().__init__(settings, index)
        self._sizing = PromptSizing()
        self._header_tokens = _DEFAULT_HEADER_TOKENS
        self._warmup_tokens: int | None = None
        self._framing_tokens = 0
        self._exact: SamplingParams = {}
        self._path = "wire"

    @property
    def _s(self) -> TraceSettings:
        assert isinstance(self.settings, TraceSettings)
        return self.settings

    @cached_property
    def entries(self) -> list[TraceEntry]:
        """The trace's requests that the bounds let through (`duration_s` at send time)."""
        entries = read_trace(self._s.path, self._s.time_unit)
        return entries[: self._s.max_requests] if self._s.max_requests else entries

    def offsets_ns(self) -> list[int]:
        """Each request's due time from the replay's start, time-scaled."""
        t0 = self.entries[0].timestamp_ms
        return [round((e.timestamp_ms - t0) / self._s.speedup * 1e6) for e in self.entries]

    def level(self) -> Level:
        """The replay as one rate level: the trace's mean rate, time-scaled."""
        offsets = self.offsets_ns()
        span_s = offsets[-1] / _NS
        rate = (len(offsets) - 1) / span_s if span_s > 0 else float(len(offsets))
        return Level(0, "rate", round(rate, 3))

    def validate_for(self, settings: ProviderSettings) -> None:
        """The trace must read, and its longest request fit the provider's context."""
        limit = settings.context_size()
        longest = max(e.input_tokens + e.output_tokens for e in self.entries)
        if limit is not None and longest > limit:
            raise ConfigError(
                f"{self.name}: a trace request of {longest} tokens does not fit provider "
                f"{settings.id!r}'s context of {limit}; raise the context size or bound "
                "max_requests"
            )

    def connections_needed(self) -> int:
        """Requests in flight at most: the cap, else (at most) every request at once."""
        return self._s.max_concurrency or min(len(self.entries), _UNCAPPED_CONNECTIONS)

    def planned_per_path(self, provider: Provider) -> int | None:
        """Warm-ups only: the replay is counted when it starts."""
        return self._s.warmup

    async def prepare(self, provider: Provider) -> None:
        """Calibrate words per token, and a block header's tokens, with the provider's
        counter; take its length switch."""
        self._exact = provider.exact_length_params()
        self._path = self.paths_for(provider)[0]
        self._sizing = await measure_sizing(provider)
        if self._sizing.source is not None:
            header = await count_tokens(provider, "[123456:000789] ")
            self._header_tokens = header or _DEFAULT_HEADER_TOKENS
            self._warmup_tokens = await count_tokens(provider, _WARMUP_PROMPT)
            # Words join into tokens a little differently inside a long prompt: one built
            # prompt, counted, corrects the rate.
            target = 4 * self._s.block_tokens
            sample = TraceEntry(0.0, target, 1, (0, 1))
            built = await count_tokens(provider, self.prompt(sample, 0, "123456"))
            if built is not None:
                self._sizing = self._sizing.corrected(built, target)

    def plan(self, provider: Provider) -> list[PlannedRequest]:
        """Only the warm-ups: the replay is paced by `drive`."""
        return self.warmups("trace-warmup", _WARMUP_PROMPT)

    def prompt(self, entry: TraceEntry, i: int, salt: str) -> str:
        """A prompt of about `entry.input_tokens` tokens as the provider counts its input
        (the chat template the warm-ups showed included): its hash blocks' texts (the same
        for the same id within a pass), then words of its own for any rest."""
        return trace_prompt(
            entry,
            i,
            salt,
            self._sizing,
            block_tokens=self._s.block_tokens,
            header_tokens=self._header_tokens,
            framing_tokens=self._framing_tokens,
        )

    def learn_framing(self, warmups: list[RequestRecord]) -> None:
        """The tokens the provider's chat template adds to a prompt: a warm-up's input
        tokens less its counted prompt (0 without a warm-up or a count)."""
        seen = [
            r.usage.input_tokens
            for r in warmups
            if r.warmup and r.error is None and r.usage.input_tokens is not None
        ]
        if seen and self._warmup_tokens is not None:
            self._framing_tokens = max(0, min(seen) - self._warmup_tokens)

    def request(self, i: int, run: str) -> PlannedRequest:
        """Request `i` of the replay."""
        entry = self.entries[i]
        params = {**self._s.params, "max_tokens": entry.output_tokens, **self._exact}
        messages = [{"role": "user", "content": self.prompt(entry, i, run)}]
        if self._s.system:
            messages.insert(0, {"role": "system", "content": self._s.system})
        req = ChatRequest(messages, params, f"trace-{i}")
        req.client_path = self._path
        tags: dict[str, str | int | float | bool] = {
            "level": _LABEL,
            "mode": "rate",
            "level_run": run,
            "target_input_tokens": entry.input_tokens,
            "target_output_tokens": entry.output_tokens,
            "trace_ms": entry.timestamp_ms,
            "path": self._path,
        }
        return PlannedRequest(key=f"{self.name}/{i}", request=req, trial=i, tags=tags)

    async def level_plans(
        self, provider: Provider, context: LevelContext
    ) -> AsyncGenerator[TracePass, None]:
        """Replay the trace once; on resume, again only if no pass completed (a pass a
        process died in, `partial_levels`, did not)."""
        self.learn_framing(context.previous())
        previous = latest_pass([r for r in context.previous() if not r.warmup])
        cut = any(r.error is not None and r.error.kind == ErrorKind.CANCELLED for r in previous)
        died = any(pid == provider.id for pid, _ in self.partial_levels)
        if previous and not cut and not died:
            context.message(f"{self.name}: the trace was already replayed, skipped")
            return
        context.expect(len(self.entries))
        gc.collect()
        # Digits only, fixed width: every header of every pass counts the same tokens.
        run = f"{secrets.randbelow(10**6):06d}"
        yield TracePass(title="the replay", most_workers=self._s.max_concurrency, run=run)

    def shard_state(self) -> TraceState:
        """The prompt sizing `prepare` and the warm-ups measured, and the provider's switch."""
        return TraceState(
            prompt_sizing=self._sizing,
            header_tokens=self._header_tokens,
            framing_tokens=self._framing_tokens,
            exact_length_params=self._exact,
            path=self._path,
        )

    def restore(self, state: TraceState) -> None:
        """Take the runner's prompt sizing into a worker."""
        self._sizing = state.prompt_sizing
        self._header_tokens = state.header_tokens
        self._framing_tokens = state.framing_tokens
        self._exact = dict(state.exact_length_params)
        self._path = state.path

    async def run_share(
        self,
        provider: Provider,
        level: TracePass,
        share: Share,
        t0_ns: int,
        send: SendFn,
    ) -> None:
        """Send every `share.of`-th request from `share.index` at its due time."""
        k, of = share.index, share.of
        run = level.run
        cap = self._s.max_concurrency
        share_cap = None if cap is None else max(1, cap // of + (1 if k < cap % of else 0))

        def make(i: int) -> PlannedRequest:
            planned = self.request(i, run)
            planned.tags.update(share.tags)
            return planned

        arrivals = [(i, off) for i, off in enumerate(self.offsets_ns()) if i % of == k]
        provider.connections.reserve(share_cap or min(len(arrivals), _UNCAPPED_CONNECTIONS))
        deadline = None if self._s.duration_s is None else t0_ns + int(self._s.duration_s * _NS)
        await open_loop(arrivals, t0_ns, make, send, max_in_flight=share_cap, deadline_ns=deadline)

    def analyze(self, provider_id: str, model: str, records: list[RequestRecord]) -> LabAnswer:
        """The replay's latest pass as one load level, with the provider's cache hits."""
        recs = latest_pass([r for r in records if not r.warmup])
        row = level_figures(self.level(), recs, "trace")
        figures = TraceFigures(trace=self._s.path.name, speedup=self._s.speedup, replay=row)
        if not row.ok:
            return self.answer(provider_id, model, "No trace request succeeded.", figures, "failed")
        status: Literal["ok", "partial", "failed"] = "ok" if not row.failed else "partial"
        return self.answer(
            provider_id,
            model,
            trace_answer(self._s.path.name, self._s.speedup, row),
            figures,
            status,
        )
