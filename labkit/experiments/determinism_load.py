"""`determinism_load`: the same prompt, many at once — do the replies stay identical?

At each level of `concurrency` the prompt is sent `repeats` times as a closed loop with that
many streams (`labkit.experiments.pacing.closed_loop`: stream j sends requests j, j + c,
...), so up to `concurrency` identical requests are in flight together and a server that
batches them decodes them side by side. The replies are compared per level
(`labkit.analysis.determinism_load`), with each token's candidates where the provider can
return logprobs; the answer says per level whether they stayed identical, where they first
differed and how close the top two candidates were there, and what the server reports about
its batches (llama-server's slots), its build and any determinism mode.
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncGenerator
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveInt, model_validator

from labkit.analysis.determinism_load import (
    batch_changed,
    decode_batch,
    decode_counters,
    level_rows,
)
from labkit.analysis.next_token import NOT_INSPECTED
from labkit.analysis.selection import latest_pass
from labkit.experiments.base import ExperimentSettings, PlannedRequest, register_experiment
from labkit.experiments.paced import LevelContext, LevelPlan, PacedExperiment, SendFn, Share
from labkit.experiments.pacing import closed_loop
from labkit.experiments.variants import logprob_request
from labkit.figures.determinism_load import DeterminismLoadFigures
from labkit.providers.base import ChatRequest, Provider
from labkit.records import MAX_TOP_LOGPROBS, ErrorKind, LabAnswer, RequestRecord
from labkit.wire.connections import DESCRIBE, own_request
from labkit.wording.common import partial_sentence
from labkit.wording.determinism_load import determinism_load_answer

__all__ = [
    "DeterminismLoadExperiment",
    "DeterminismLoadPass",
    "DeterminismLoadSettings",
    "DeterminismLoadState",
]


class DeterminismLoadSettings(ExperimentSettings):
    """One prompt, `repeats` identical sends at each concurrency level."""

    kind: Literal["determinism_load"] = "determinism_load"
    prompt: str = Field(
        default="Write a short, original story about a lighthouse keeper in three sentences.",
        min_length=1,
    )
    repeats: PositiveInt = Field(
        default=8, ge=2, description="Identical requests per level (2 or more)."
    )
    concurrency: list[PositiveInt] = Field(
        default_factory=lambda: [1, 4, 8],
        min_length=1,
        description="Levels, one after another: that many of the level's requests in flight.",
    )
    params: dict[str, Any] = Field(default_factory=lambda: {"temperature": 0, "max_tokens": 64})
    top_logprobs: int | None = Field(
        default=2,
        ge=2,
        le=MAX_TOP_LOGPROBS,
        description="Candidates asked per output token where the provider can return them "
        "(the top-two margin where the replies split); None: off.",
    )

    @model_validator(mode="after")
    def _levels(self) -> DeterminismLoadSettings:
        if len(set(self.concurrency)) != len(self.concurrency):
            raise ValueError("concurrency lists each level once")
        if max(self.concurrency) > self.repeats:
            raise ValueError(
                f"concurrency {max(self.concurrency)} with only {self.repeats} repeats per "
                "level leaves streams idle; raise `repeats`"
            )
        return self


class DeterminismLoadState(BaseModel):
    """Nothing for a worker to take back: every request is built from the settings."""

    model_config = ConfigDict(extra="forbid")


class DeterminismLoadPass(LevelPlan):
    """One pass of one concurrency level."""

    concurrency: PositiveInt
    level_run: str = Field(description="The pass's tag (`level_run`): new for every pass.")

    def record_label(self) -> str:
        """``c<concurrency>``, as this pass's records carry it."""
        return f"c{self.concurrency}"


@register_experiment
class DeterminismLoadExperiment(PacedExperiment[DeterminismLoadState, DeterminismLoadPass]):
    """Whether temperature-0 replies to one prompt stay identical as more share the server."""

    kind: ClassVar[str] = "determinism_load"
    says_partial_levels: ClassVar[bool] = True
    settings_model: ClassVar[type[ExperimentSettings]] = DeterminismLoadSettings
    question: ClassVar[str] = (
        "Sent the same prompt many times at once, do the replies stay identical as "
        "concurrency grows, where do they first differ, and how close was the call there?"
    )
    state_model: ClassVar[type[BaseModel]] = DeterminismLoadState
    level_model: ClassVar[type[LevelPlan]] = DeterminismLoadPass

    def __init__(self, settings: ExperimentSettings, index: int = 0) -> None:
        super().__init__(settings, index)
        self._asked: dict[str, bool] = {}  # provider -> logprobs asked (it can return them)
        self._slots: dict[str, int | None] = {}
        self._mode: dict[str, str | None] = {}
        self._build: dict[str, str | None] = {}
        #: provider -> concurrency -> mean sequences per decode call during that level
        self._decode_batch: dict[str, dict[int, float | None]] = {}

    @property
    def _s(self) -> DeterminismLoadSettings:
        assert isinstance(self.settings, DeterminismLoadSettings)
        return self.settings

    async def prepare(self, provider: Provider) -> None:
        """What the server says about its batches and determinism (best-effort), and
        whether it can return logprobs."""
        top_k = self._s.top_logprobs
        self._asked[provider.id] = top_k is not None and bool(provider.logprob_params(top_k))
        try:
            described = await provider.describe()
        except Exception:  # describing is best-effort: the levels run without it
            described = {}
        slots = described.get("total_slots")
        self._slots[provider.id] = slots if isinstance(slots, int) else provider.exclusive_slots()
        mode = described.get("determinism_mode")
        self._mode[provider.id] = mode if isinstance(mode, str) else None
        build = described.get("build_info")
        self._build[provider.id] = build if isinstance(build, str) else None

    async def _decode_counters(self, provider: Provider) -> tuple[float, float] | None:
        """The server's decode calls and the sequences they decoded so far, from its
        /metrics where it counts them (llama-server); None: not reported (best-effort)."""
        url = provider.metrics_url()
        if url is None:
            return None
        try:
            resp = await own_request(provider.client, "GET", url, DESCRIBE)
        except Exception:  # counting is best-effort: the level's replies are the measurement
            return None
        return decode_counters(resp.text) if resp.status_code == 200 else None

    def plan(self, provider: Provider) -> list[PlannedRequest]:
        """Only the warm-ups: the levels are paced by `run_share`."""
        return self.warmups("determinism_load", self._s.prompt)

    def connections_needed(self) -> int:
        """The largest level's streams."""
        return max(self._s.concurrency)

    def request(
        self, provider: Provider, concurrency: int, i: int, level_run: str
    ) -> PlannedRequest:
        """Request `i` of a level: the prompt, with candidates asked where the provider can."""
        request = ChatRequest(
            self.messages(self._s.prompt), dict(self._s.params), "determinism_load"
        )
        request = logprob_request(provider, request, self._s.top_logprobs)
        paths = self.paths_for(provider)
        request.client_path = paths[i % len(paths)]
        tags: dict[str, str | int | float | bool] = {
            "level": f"c{concurrency}",
            "concurrency": concurrency,
            "level_run": level_run,
            "path": request.client_path,
        }
        return PlannedRequest(
            key=f"{self.name}/c{concurrency}/{i}", request=request, trial=i, tags=tags
        )

    async def level_plans(
        self, provider: Provider, context: LevelContext
    ) -> AsyncGenerator[DeterminismLoadPass, None]:
        """The levels one after another; on resume, skip the levels already complete."""
        previous = context.previous()
        for index, c in enumerate(self._s.concurrency):
            partial = (provider.id, f"c{c}") in self.partial_levels
            if not partial and _complete(c, previous, self._s.repeats):
                context.message(f"{self.name}: concurrency {c} already measured, skipped")
                continue
            context.expect(self._s.repeats)
            before = await self._decode_counters(provider)
            yield DeterminismLoadPass(
                index=index,
                title=f"concurrency {c}",
                most_workers=c,
                concurrency=c,
                level_run=secrets.token_hex(3),
            )
            after = await self._decode_counters(provider)
            self._decode_batch.setdefault(provider.id, {})[c] = decode_batch(before, after)

    def shard_state(self) -> DeterminismLoadState:
        """Nothing: a worker builds every request from the settings."""
        return DeterminismLoadState()

    def restore(self, state: DeterminismLoadState) -> None:
        """Nothing to take back."""

    async def run_share(
        self,
        provider: Provider,
        level: DeterminismLoadPass,
        share: Share,
        t0_ns: int,
        send: SendFn,
    ) -> None:
        """This worker's streams of the level: stream j sends requests j, j + c, ..."""
        c, n = level.concurrency, self._s.repeats

        def make(i: int) -> PlannedRequest:
            planned = self.request(provider, c, i, level.level_run)
            planned.tags["workers"] = share.of
            planned.tags.update(share.tags)
            return planned

        mine = range(share.index, c, share.of)
        provider.connections.reserve(len(mine))
        await closed_loop([range(j, n, c) for j in mine], make, send)

    def analyze(self, provider_id: str, model: str, records: list[RequestRecord]) -> LabAnswer:
        """Per level: identical or not, the first different token, the candidates there."""
        s = self._s
        asked = self._asked.get(provider_id, s.top_logprobs is not None)
        levels = [
            (c, [r for r in records if r.tags.get("level") == f"c{c}"]) for c in s.concurrency
        ]
        batches = self._decode_batch.get(provider_id, {})
        rows = [
            r.model_copy(update={"decode_batch": batches.get(r.concurrency)})
            for r in level_rows(dict(s.params), levels, logprobs=asked)
        ]
        slots = self._slots.get(provider_id)
        inspected = any(r.logprobs and r.logprobs.steps for r in records if not r.warmup)
        why = None
        if s.top_logprobs is not None and not inspected:
            why = "no reply carried logprobs" if asked else NOT_INSPECTED
        figures = DeterminismLoadFigures(
            params=dict(s.params),
            top_k=s.top_logprobs,
            inspected=inspected,
            not_inspected_because=why,
            levels=rows,
            server_slots=slots,
            determinism_mode=self._mode.get(provider_id),
            server_build=self._build.get(provider_id),
            batch_changed_selection=batch_changed(rows, slots),
        )
        judged = [r for r in rows if r.identical is not None]
        if not judged:
            return self.answer(
                provider_id,
                model,
                "Too few successful replies to compare (need 2 per level).",
                figures,
                status="failed",
            )
        died: dict[str, list[str]] = {}
        for c in s.concurrency:
            if (what := self.partial_levels.get((provider_id, f"c{c}"))) is not None:
                died.setdefault(what, []).append(f"concurrency {c}")
        whole = len(judged) == len(rows) and not any(r.failed for r in rows) and not died
        text = determinism_load_answer(figures)
        if died:
            text += " " + partial_sentence(died, "its share of the replies not compared")
        return self.answer(provider_id, model, text, figures, status="ok" if whole else "partial")


def _complete(concurrency: int, previous: list[RequestRecord], repeats: int) -> bool:
    """Whether a pass of this level finished in an earlier (resumed) run."""
    recs = latest_pass([r for r in previous if r.tags.get("level") == f"c{concurrency}"])
    if any(r.stop_reason == "cancelled" for r in recs):
        return False
    if any(r.error is not None and r.error.kind == ErrorKind.LOST for r in recs):
        return False
    return len(recs) >= repeats
