"""`load`: how a provider behaves under load — concurrency levels and request rates.

Each level runs after the previous one ends: ``concurrency: [1, 8, 32]`` is a closed loop
(that many streams in flight), ``rate: [2, 8]`` an open loop (requests per second,
``constant`` or ``poisson`` arrivals from a seeded schedule on absolute times,
`labkit.experiments.pacing`, optionally capped by ``max_concurrency``). A level ends after
``requests`` requests or ``duration_s`` seconds, whichever comes first. Prompts are fixed
(``prompts``) or synthetic (``input_tokens``, seeded). One Python process reading many fast
streams falls behind them, so streams can be spread over ``workers`` processes, and a level
whose stamps ran late is flagged client-bound (docs/experiments.md, "Load levels").
"""

from __future__ import annotations

import asyncio
import itertools
import math
import random
import secrets
import time
from collections.abc import AsyncGenerator
from typing import ClassVar, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    model_validator,
)

from labkit.analysis.levels import Level, level_figures
from labkit.analysis.selection import latest_pass
from labkit.clocksync import clock_note
from labkit.errors import ConfigError
from labkit.experiments.base import ExperimentSettings, PlannedRequest, register_experiment
from labkit.experiments.common import Prompt, prompt_list
from labkit.experiments.paced import (
    HostProcesses,
    LevelContext,
    LevelPlan,
    PacedExperiment,
    SendFn,
    Share,
)
from labkit.experiments.pacing import arrival_offsets_ns, closed_loop, open_loop
from labkit.figures.load import LoadFigures
from labkit.measurement.capacity import (
    WorkersChoice,
    choose_workers,
    free_cpus,
    needs_calibration,
    process_capacity,
)
from labkit.measurement.capacity import stream_events_per_s as warmup_events_per_s
from labkit.providers.base import ChatRequest, Provider, ProviderSettings, SamplingParams
from labkit.records import ErrorKind, LabAnswer, RequestRecord
from labkit.wording import cache_sentence, goodput_sentence, server_queue_sentence, slo_sentence
from labkit.wording.common import RAY_NODE, SHARE_LOST, partial_sentence
from labkit.wording.load import load_answer
from labkit.workloads import PromptSizing, SharedPrefix, measure_sizing

__all__ = [
    "LoadExperiment",
    "LoadLevelPlan",
    "LoadSettings",
    "LoadState",
    "server_queue_sentence",
]

_DEFAULT_REQUESTS = 32
_NS = 1_000_000_000
# An open loop without max_concurrency may have any number of requests in flight.
_UNCAPPED_CONNECTIONS = 1024
#: The generator of a request whose plan draws nothing (no token ranges): never drawn from.
_NO_DRAWS = random.Random(0)
_SETTLE_S = 0.02  # the set-up's pending callbacks run before the first request's clock

TokenTarget = PositiveInt | tuple[PositiveInt, PositiveInt]


def _default_prompts() -> list[str | Prompt]:
    return ["Explain what a token is."]


class LoadSettings(ExperimentSettings):
    """Levels of concurrency (closed loop) or request rate (open loop)."""

    kind: Literal["load"] = "load"
    concurrency: list[PositiveInt] | None = Field(
        default=None,
        min_length=1,
        description="Closed loop: streams in flight, one level after another.",
    )
    rate: list[PositiveFloat] | None = Field(
        default=None, min_length=1, description="Open loop: requests per second per level."
    )
    arrival: Literal["constant", "poisson"] = Field(
        default="poisson", description="Open-loop arrivals: evenly spaced, or a Poisson process."
    )
    max_concurrency: PositiveInt | None = Field(
        default=None, description="Open loop: cap on requests in flight (waits count as queue)."
    )
    requests: PositiveInt | None = Field(
        default=None,
        description=f"Requests per level (default {_DEFAULT_REQUESTS} unless duration_s is set).",
    )
    duration_s: PositiveFloat | None = Field(
        default=None, description="Seconds per level; with `requests`, whichever comes first."
    )
    warmup: NonNegativeInt = Field(
        default=1, description="Warm-up requests, one at a time, before the first level."
    )
    prompts: list[str | Prompt] = Field(
        default_factory=_default_prompts,
        min_length=1,
        description="Fixed prompts, used in turn (ignored when input_tokens is set).",
    )
    input_tokens: TokenTarget | None = Field(
        default=None,
        description="Synthetic prompts of this many tokens (or [min, max], drawn per request).",
    )
    output_tokens: TokenTarget | None = Field(
        default=None,
        description="max_tokens per request (or [min, max], drawn), decoded exactly where the "
        "provider can (llama.cpp ignores EOS).",
    )
    shared_prefix: SharedPrefix | None = Field(
        default=None,
        description="Every request of a level opens with the same prefix (new per level); "
        "the suffix is the prompt (fixed or synthetic). Each level reports the provider's "
        "cache hits beside TTFT.",
    )
    seed: int = Field(default=0, description="Seeds arrivals and synthetic prompts.")
    workers: PositiveInt | Literal["auto"] = Field(
        default="auto",
        description="Processes reading the streams; auto: the fewest whose measured capacity "
        "(events/s one process reads on this host, `labkit.capacity`) covers the level's "
        "expected events/s (streams × the warm-up's rate), never more than the CPUs the "
        "provider's server leaves free; 1 whenever one process holds the level.",
    )
    streams_per_worker: PositiveInt = Field(
        default=16,
        description="`auto` without a measured rate (no warm-up): streams per process.",
    )
    connections: Literal["warm", "cold"] = Field(
        default="warm",
        description="`warm`: a connection per stream is opened before each level's clock "
        "starts, and one a request needs mid-level is opened before its own t_start (both "
        "outside TTFT, `client.connect_ms` and `client.new_connection` say so); `cold`: "
        "every request opens a fresh connection inside its measurement, as a client that "
        "keeps none alive sees it.",
    )
    params: SamplingParams = Field(default_factory=lambda: SamplingParams(max_tokens=64))

    @model_validator(mode="after")
    def _one_loop(self) -> LoadSettings:
        if (self.concurrency is None) == (self.rate is None):
            raise ValueError(
                "give either `concurrency` (closed loop) or `rate` (open loop), not "
                + ("both; cap an open loop with max_concurrency" if self.concurrency else "neither")
            )
        if self.max_concurrency is not None and self.rate is None:
            raise ValueError("max_concurrency applies to `rate` levels only")
        for name in ("input_tokens", "output_tokens"):
            value = getattr(self, name)
            if isinstance(value, tuple) and value[0] > value[1]:
                raise ValueError(f"{name}: [min, max] with min <= max")
        return self

    def max_requests(self) -> int | None:
        """Requests per level (None: bounded by duration only)."""
        if self.requests is None and self.duration_s is None:
            return _DEFAULT_REQUESTS
        return self.requests


def _draw(target: int | tuple[int, int], rng: random.Random) -> int:
    return target if isinstance(target, int) else rng.randint(target[0], target[1])


class LoadState(BaseModel):
    """What `prepare` learnt from the provider, taken into every worker (`restore`)."""

    model_config = ConfigDict(extra="forbid")

    prompt_sizing: PromptSizing = Field(default_factory=PromptSizing)
    exact_length_params: SamplingParams = Field(default_factory=dict)
    paths: list[str] = Field(default_factory=lambda: ["wire"])
    cache_on: SamplingParams = Field(default_factory=dict)


class LoadLevelPlan(LevelPlan):
    """One pass of one load level (`Level`), as every share of it builds its requests."""

    mode: Literal["concurrency", "rate"]
    target: float
    level_run: str = Field(description="The pass's tag (`level_run`): new for every pass.")
    requests: int | None = Field(
        default=None,
        description="This pass's requests, instead of the settings' (a sweep's longer pass).",
    )

    def level(self) -> Level:
        """The level this pass runs."""
        return Level(self.index, self.mode, self.target)

    def record_label(self) -> str:
        """`Level.label`, as this pass's records carry it."""
        return self.level().label


@register_experiment
class LoadExperiment(PacedExperiment[LoadState, LoadLevelPlan]):
    """Throughput and latency percentiles per load level."""

    kind: ClassVar[str] = "load"
    settings_model: ClassVar[type[ExperimentSettings]] = LoadSettings
    question: ClassVar[str] = (
        "Under load, how do TTFT and decode speed change, what aggregate throughput does the "
        "provider reach, and could labkit itself keep up?"
    )
    judges_slos: ClassVar[bool] = True
    says_partial_levels: ClassVar[bool] = True
    state_model: ClassVar[type[BaseModel]] = LoadState
    level_model: ClassVar[type[LevelPlan]] = LoadLevelPlan

    def __init__(self, settings: ExperimentSettings, index: int = 0) -> None:
        super().__init__(settings, index)
        self._sizing = PromptSizing()
        self._exact_length: SamplingParams = {}
        self._paths: list[str] = ["wire"]
        self._cache_on: SamplingParams = {}
        # What `workers: auto` weighs (`labkit.capacity`), measured in `drive`.
        self._free_cpus = free_cpus(0)
        self._stream_eps: float | None = None
        self._request_events: float | None = None
        self._capacity_eps: float | None = None
        self._prompts: list[Prompt] | None = None  # the settings' prompts, with their ids

    @property
    def _s(self) -> LoadSettings:
        assert isinstance(self.settings, LoadSettings)
        return self.settings

    def levels(self) -> list[Level]:
        """The levels in the order they run."""
        if self._s.concurrency is not None:
            return [Level(i, "concurrency", c) for i, c in enumerate(self._s.concurrency)]
        assert self._s.rate is not None
        return [Level(i, "rate", r) for i, r in enumerate(self._s.rate)]

    def workers_for(self, level: Level) -> int:
        """Processes reading this level's streams."""
        closed = level.mode == "concurrency"
        if self._s.workers != "auto":
            # A closed loop cannot use more processes than it has streams.
            return min(self._s.workers, int(level.target)) if closed else self._s.workers
        return self.workers_choice(level).processes

    def workers_choice(self, level: Level) -> WorkersChoice:
        """What `workers: auto` chooses for `level` from what `drive` measured (before it:
        one process per `streams_per_worker` streams within the free CPUs)."""
        closed = level.mode == "concurrency"
        streams = int(level.target) if closed else self._s.max_concurrency
        load: float | None = None
        if self._stream_eps is not None:
            if closed:
                load = level.target * self._stream_eps
            elif self._request_events is not None:
                load = level.target * self._request_events
                if streams is not None:
                    load = min(load, streams * self._stream_eps)
        return choose_workers(
            streams,
            load,
            self._capacity_eps,
            self._free_cpus,
            streams_per_worker=self._s.streams_per_worker,
        )

    async def _measure_for_workers(self, provider: Provider, previous: list[RequestRecord]) -> None:
        """`workers: auto`: the CPUs the provider's server leaves free, the warm-up's events
        per second, and (where more than one process could help) this host's capacity."""
        self._free_cpus = free_cpus(provider.settings.host_cpus_used())
        warmups = [r for r in previous if r.warmup]
        self._stream_eps = warmup_events_per_s(warmups)
        events = [len(r.client.event_offsets_ms) for r in warmups if r.error is None]
        self._request_events = float(max(events)) if events else None
        most = self._s.output_tokens
        if most is not None:
            self._request_events = float(most if isinstance(most, int) else most[1])
        if self._free_cpus > 1 and self._stream_eps is not None:
            peak = max((self.workers_choice(lv).load_eps or 0.0) for lv in self.levels())
            if needs_calibration(peak):
                self._capacity_eps = (await process_capacity()).events_per_s

    def connections_needed(self) -> int:
        """The most streams one process reads at once (an uncapped open loop: many); under
        `workers: auto`, all of a level's, as auto may choose one process."""
        most = 0
        for level in self.levels():
            if level.mode == "concurrency":
                streams = int(level.target)
            else:
                streams = self._s.max_concurrency or _UNCAPPED_CONNECTIONS
            workers = 1 if self._s.workers == "auto" else self.workers_for(level)
            most = max(most, math.ceil(streams / workers))
        return most

    def validate_for(self, settings: ProviderSettings) -> None:
        """A closed loop with more streams than requests leaves streams idle: refuse it."""
        n = self._s.max_requests()
        if self._s.concurrency and n is not None and max(self._s.concurrency) > n:
            raise ConfigError(
                f"{self.name}: concurrency {max(self._s.concurrency)} with only {n} requests "
                "per level; raise `requests` (or use duration_s)"
            )

    async def prepare(self, provider: Provider) -> None:
        """Size synthetic prompts with the provider's counter (`labkit.workloads`)."""
        self._exact_length = provider.exact_length_params()
        self._paths = self.paths_for(provider)
        self._cache_on = provider.prompt_cache_params(True)
        if self._s.input_tokens is None and self._s.shared_prefix is None:
            return
        self._sizing = await measure_sizing(provider)

    def plan(self, provider: Provider) -> list[PlannedRequest]:
        """Only the warm-ups: the levels are paced by `drive`."""
        prompt = prompt_list(self._s.prompts)[0]
        return self.warmups(prompt.id, prompt.text)

    def request(self, level: Level, i: int, level_run: str) -> PlannedRequest:
        """Request `i` of a level: the same in every process that builds it."""
        s = self._s
        params = dict(s.params)
        tags: dict[str, str | int | float | bool] = {
            "level": level.label,
            "mode": level.mode,
            "target": level.target,
            "level_run": level_run,
        }
        # Seeding costs more than the rest of a request's plan: only where a draw needs it.
        drawn = s.input_tokens is not None or s.output_tokens is not None
        rng = random.Random(f"{s.seed}:{level.index}:{i}") if drawn else _NO_DRAWS
        if s.input_tokens is not None:
            n_in = _draw(s.input_tokens, rng)
            # A unique head per request keeps prompt caches from serving one from another.
            text = f"[{rng.getrandbits(32):08x}] " + self._sizing.filler(n_in, rng.randrange(1000))
            prompt = Prompt(id=f"synthetic-{n_in}", text=text)
            tags["target_input_tokens"] = n_in
        else:
            if self._prompts is None:
                self._prompts = prompt_list(s.prompts)
            prompt = self._prompts[i % len(self._prompts)]
        if s.output_tokens is not None:
            n_out = _draw(s.output_tokens, rng)
            params["max_tokens"] = tags["target_output_tokens"] = n_out
            for name, value in self._exact_length.items():
                params.setdefault(name, value)
        messages, prompt_id = self.messages(prompt.text), prompt.id
        if s.shared_prefix is not None:
            messages, prompt_id = self._shared_prefix_messages(level, i, level_run, tags)
            for name, value in self._cache_on.items():
                params.setdefault(name, value)
        req = ChatRequest(messages, params, prompt_id)
        req.warm_connection = s.connections == "warm"
        req.fresh_connection = s.connections == "cold"
        # With `paths: [wire, sdk]` the requests alternate, so both paths meet the same load.
        req.client_path = self._paths[i % len(self._paths)]
        tags["path"] = req.client_path
        return PlannedRequest(key=f"{self.name}/{level.label}/{i}", request=req, trial=i, tags=tags)

    def _shared_prefix_messages(
        self,
        level: Level,
        i: int,
        level_run: str,
        tags: dict[str, str | int | float | bool],
    ) -> tuple[list[dict[str, str]], str]:
        """Request `i`'s messages and prompt id under `shared_prefix`: the level's prefix,
        then suffix number ``i × distinct_suffixes`` (rounded down: consecutive requests
        share one)."""
        shared = self._s.shared_prefix
        assert shared is not None
        # The level's own head keeps a warm server's earlier levels (and runs) from serving it.
        head = f"[{level_run}:{level.index}]"
        prefix = shared.prefix_text(self._sizing, head, self._s.seed, self._s.system)
        suffix_id = shared.suffix_of(i)
        rng = random.Random(f"{self._s.seed}:{level.index}:suffix:{suffix_id}")
        if self._s.input_tokens is not None:
            n_in = _draw(self._s.input_tokens, rng)
            suffix = f"[{suffix_id}] " + self._sizing.filler(n_in, rng.randrange(1000))
            tags["target_input_tokens"] = shared.tokens + n_in
        else:
            prompts = prompt_list(self._s.prompts)
            suffix = f"[{suffix_id}] " + prompts[suffix_id % len(prompts)].text
        tags["shared_prefix_tokens"] = shared.tokens
        tags["suffix"] = suffix_id
        prompt_id = f"shared-{shared.tokens}-s{suffix_id}"
        return shared.messages(prefix, suffix), prompt_id

    async def level_plans(
        self, provider: Provider, context: LevelContext
    ) -> AsyncGenerator[LoadLevelPlan, None]:
        """The levels one after another; on resume, skip the levels already complete."""
        previous = context.previous()
        if self._s.workers == "auto":
            await self._measure_for_workers(provider, previous)
        for level in self.levels():
            partial = (provider.id, level.label) in self.partial_levels
            if not partial and _complete(level, previous, self._s.max_requests()):
                context.message(f"{self.name}: {level.title} already measured, skipped")
                continue
            yield self.level_plan(level, context)

    def level_plan(
        self, level: Level, context: LevelContext, requests: int | None = None
    ) -> LoadLevelPlan:
        """One pass of `level`: counted, and read by how many processes of this host
        (`requests`: this pass's requests, instead of the settings')."""
        n = requests if requests is not None else self._s.max_requests()
        if n is not None:
            context.expect(n)
        processes = HostProcesses(count=self.workers_for(level))
        if self._s.workers == "auto":
            choice = self.workers_choice(level)
            processes = HostProcesses(
                count=processes.count, reason=choice.reason, tags=choice.tags()
            )
        # A closed loop cannot use more workers than it has streams, nor a capped open
        # loop more than its cap.
        most = int(level.target) if level.mode == "concurrency" else self._s.max_concurrency
        return LoadLevelPlan(
            index=level.index,
            title=level.title,
            processes=processes,
            most_workers=most,
            mode=level.mode,
            target=level.target,
            level_run=secrets.token_hex(3),
            requests=requests,
        )

    def shard_state(self) -> LoadState:
        """The calibration and the provider's switches `prepare` took."""
        return LoadState(
            prompt_sizing=self._sizing,
            exact_length_params=self._exact_length,
            paths=self._paths,
            cache_on=self._cache_on,
        )

    def restore(self, state: LoadState) -> None:
        """Take the runner's calibration into a worker."""
        self._sizing = state.prompt_sizing
        self._exact_length = dict(state.exact_length_params)
        self._paths = list(state.paths)
        self._cache_on = dict(state.cache_on)

    async def run_share(
        self,
        provider: Provider,
        plan: LoadLevelPlan,
        share: Share,
        t0_ns: int,
        send: SendFn,
    ) -> None:
        """This worker's part of one level: every `share.of`-th request from `share.index`."""
        level = plan.level()
        level_run = plan.level_run
        k, of = share.index, share.of
        s = self._s
        n = plan.requests if plan.requests is not None else s.max_requests()
        workers = f"{of}"

        def make(i: int) -> PlannedRequest:
            planned = self.request(level, i, level_run)
            planned.tags["workers"] = workers
            planned.tags.update(share.tags)
            return planned

        if level.mode == "concurrency":
            # Stream j sends requests j, j + c, j + 2c, ...; this process reads every
            # `of`-th stream.
            c = int(level.target)
            mine_streams = len(range(k, c, of))
            t0_ns = await _settled(provider, mine_streams, mine_streams, t0_ns, s.connections)
            streams = [
                range(j, n, c) if n is not None else itertools.count(j, c) for j in range(k, c, of)
            ]
            deadline = None if s.duration_s is None else t0_ns + int(s.duration_s * _NS)
            await closed_loop(streams, make, send, deadline_ns=deadline)
            return
        offsets = arrival_offsets_ns(
            level.target,
            s.arrival,
            seed=f"{s.seed}:{level.index}",
            max_requests=n,
            duration_s=s.duration_s,
        )
        cap = s.max_concurrency
        share_cap = None if cap is None else max(1, cap // of + (1 if k < cap % of else 0))
        mine = ((i, off) for i, off in enumerate(offsets) if i % of == k)
        clients = share_cap or min(len(offsets), _UNCAPPED_CONNECTIONS) // of
        # Pre-open only what the first second's arrivals will take: an idle connection can
        # hold one of the server's threads (llama-server) until a request comes on it.
        soon = sum(1 for i, off in enumerate(offsets) if i % of == k and off < _NS)
        early = max(1, min(clients, soon))
        t0_ns = await _settled(provider, clients, early, t0_ns, s.connections)
        deadline = None if s.duration_s is None else t0_ns + int(s.duration_s * _NS)
        await open_loop(mine, t0_ns, make, send, max_in_flight=share_cap, deadline_ns=deadline)

    def analyze(self, provider_id: str, model: str, records: list[RequestRecord]) -> LabAnswer:
        """Per level: achieved rate, ok/failed, TTFT and decode percentiles, throughput."""
        rows = []
        scraped = self.server_metrics.get(provider_id, [])
        by_level: dict[Level, list[RequestRecord]] = {}
        chosen: list[str] = []
        for level in self.levels():
            recs = latest_pass([r for r in records if r.tags.get("level") == level.label])
            clocks = [c for c in self.host_clocks if c.level == level.label]
            by_level[level] = recs
            rows.append(
                level_figures(
                    level, recs, self._s.arrival, scraped, slos=self.settings.slos(), clocks=clocks
                )
            )
            chosen += _workers_choice_words(level, recs)
        figures = LoadFigures(levels=rows, mode=self.levels()[0].mode)
        done = [r for r in rows if r.ok]
        if not done:
            return self.answer(
                provider_id, model, "No level had a successful request.", figures, "failed"
            )
        died: dict[str, list[str]] = {}
        for level in self.levels():
            what = self.partial_levels.get((provider_id, level.label))
            if what is None and any(
                r.error is not None and r.error.kind == ErrorKind.LOST for r in by_level[level]
            ):
                what = RAY_NODE
            if what is not None:
                died.setdefault(what, []).append(level.title)
        extras = [
            partial_sentence(died, SHARE_LOST),
            "".join(clock_note(r.title, r.clock_uncertainty_ms, r.ttft_ms_p50) for r in rows),
            server_queue_sentence(done),
            cache_sentence(done[-1].cache),
            goodput_sentence(done),
            slo_sentence(done[0].slo) if len(done) == 1 and done[0].slo is not None else "",
            f"workers: auto read {'; '.join(chosen)}." if chosen else "",
        ]
        text = load_answer(rows, extras)
        whole = len(done) == len(rows) and not died
        status: Literal["ok", "partial", "failed"] = "ok" if whole else "partial"
        return self.answer(provider_id, model, text, figures, status)


async def _settled(
    provider: Provider,
    streams: int,
    connect: int,
    t0_ns: int,
    connections: Literal["warm", "cold"] = "warm",
) -> int:
    """Build the level's clients for `streams`, open `connect` connections when they are
    `warm`, and let the loop catch up; returns the level's start (`t0_ns`, or now if that
    has passed).

    Connections opened here are ready before any request's clock starts (a first wave that
    opened its own would count the connects, and the other streams' set-up, in TTFT).
    Set-up work (a full garbage collection, new HTTP clients) holds the loop; a short settle
    lets what it queued run before the first request's clock starts, not inside its stamps.
    """
    provider.connections.reserve(streams)
    if connections == "warm":
        await provider.connections.preconnect(connect)
    await asyncio.sleep(_SETTLE_S)
    return max(t0_ns, time.perf_counter_ns())


def _workers_choice_words(level: Level, records: list[RequestRecord]) -> list[str]:
    """`c32 with 1 process (14,200 events/s expected, 18,000 per process, 1 CPU free)`, from
    the tags `workers: auto` left on the level's records (empty: a fixed `workers`)."""
    tags = next((r.tags for r in records if "workers_free_cpus" in r.tags), None)
    if tags is None:
        return []
    load, capacity = tags.get("workers_load_eps"), tags.get("workers_capacity_eps")
    choice = WorkersChoice(
        processes=int(tags.get("workers", 1)),
        load_eps=float(load) if load is not None else None,
        capacity_eps=float(capacity) if capacity is not None else None,
        free_cpus=int(tags["workers_free_cpus"]),
    )
    plural = "es" if choice.processes > 1 else ""
    return [f"{level.label} with {choice.processes} process{plural} ({choice.reason})"]


def _complete(level: Level, previous: list[RequestRecord], n: int | None) -> bool:
    """Whether a pass of this level finished in an earlier (resumed) run."""
    recs = latest_pass([r for r in previous if r.tags.get("level") == level.label])
    if not recs or any(r.stop_reason == "cancelled" for r in recs):
        return False
    if any(r.error is not None and r.error.kind == ErrorKind.LOST for r in recs):
        return False  # a Ray actor died mid-level: the level is partial
    return n is None or len(recs) >= n
