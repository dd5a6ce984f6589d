"""The experiment interface and its registry.

An experiment turns its YAML entry into a plan of requests for one provider, and turns the
records those requests produced into a `LabAnswer` computed from the measurements:

1. `prepare(provider)` — optional I/O before planning (token counts, sizing prompts);
2. `plan(provider)` — the requests, each with a stable `key`: a resumed run skips the recorded;
3. `analyze(provider_id, model, records)` — the answer, from non-warm-up records (via `judged`).

Experiments never send requests themselves: the runner does, with the recorder.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import ClassVar, Literal, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    field_validator,
)

from labkit.analysis.slo import SLO, judge, parse_slos
from labkit.clocksync import HostClock
from labkit.figures import Figures
from labkit.providers.base import (
    ChatRequest,
    ClientPath,
    Provider,
    ProviderSettings,
    SamplingParams,
    one_choice,
)
from labkit.records import LabAnswer, RequestRecord
from labkit.server_metrics import ServerMetricsSample
from labkit.wording import slo_sentence
from labkit.wording.common import SHARE_LOST, partial_run_sentence

__all__ = [
    "Experiment",
    "ExperimentSettings",
    "PlannedRequest",
    "experiment_class",
    "experiment_kinds",
    "register_experiment",
]


class ExperimentSettings(BaseModel):
    """Fields every experiment entry accepts; each kind adds its own."""

    model_config = ConfigDict(extra="forbid")

    kind: str = Field(description="Which experiment runs this entry.")
    repeats: PositiveInt = Field(default=3, description="Measured repeats of each request.")
    warmup: NonNegativeInt = Field(
        default=1, description="Warm-up requests per provider, stored but kept out of stats."
    )
    params: SamplingParams = Field(
        default_factory=dict, description="Sampling parameters sent with every request."
    )
    system: str | None = Field(default=None, description="Optional system message.")

    @field_validator("params")
    @classmethod
    def _one_choice(cls, value: SamplingParams) -> SamplingParams:
        return one_choice(value)

    paths: list[ClientPath] | None = Field(
        default=None,
        description="Client paths each planned request is sent on: `[wire]`, `[sdk]`, or "
        "`[wire, sdk]` (each request twice, in this order, the SDK copy keyed `/sdk`, both "
        "tagged `path`); null: the provider's `client`. Providers without an official SDK "
        "send only the wire copy.",
    )
    metrics_interval_s: PositiveFloat | None = Field(
        default=None,
        description="Seconds between scrapes of the server's /metrics during this "
        "experiment; null: the provider's `metrics_interval_s`.",
    )
    slo: dict[str, PositiveFloat] | None = Field(
        default=None,
        description="Service-level objectives, `<client metric>_p<percentile>: bound_ms` "
        "(`ttft_ms_p90: 500`): the answer gives the share of requests meeting each, and "
        "goodput (requests/s meeting all); see `labkit.analysis.slo`.",
    )

    @field_validator("slo")
    @classmethod
    def _known_slos(cls, value: dict[str, float] | None) -> dict[str, float] | None:
        if value is not None:
            parse_slos(value)
        return value

    def slos(self) -> list[SLO]:
        """The configured SLOs (empty: none)."""
        return parse_slos(self.slo or {})

    @field_validator("paths")
    @classmethod
    def _distinct_paths(cls, value: list[ClientPath] | None) -> list[ClientPath] | None:
        if value is not None and (not value or len(set(value)) != len(value)):
            raise ValueError("paths lists wire and/or sdk, each once")
        return value


@dataclass(slots=True)
class PlannedRequest:
    """One request an experiment wants sent."""

    key: str
    request: ChatRequest
    trial: int = 0
    warmup: bool = False
    tags: dict[str, str | int | float | bool] = field(default_factory=dict)
    on_record: Callable[[RequestRecord], None] | None = None
    """Called with each of this request's records before it is stored, its output text
    present even under `store_text: false` (the stored copy drops it): what an experiment
    whose next request depends on this one's answer (a conversation) reads."""
    pause_s: float = 0.0
    """Idle seconds before this request is sent (one at a time, not in load levels): so it
    finds the server and this host idle whatever came before it."""


class Experiment(ABC):
    """One configured experiment."""

    kind: ClassVar[str]
    settings_model: ClassVar[type[ExperimentSettings]]
    question: ClassVar[str]
    #: True where `analyze` judges the SLOs itself (per load level), so `judged` does not.
    judges_slos: ClassVar[bool] = False
    #: True where `analyze` says which of its levels are partial (`partial_levels`), so
    #: `judged` does not say it for the whole run.
    says_partial_levels: ClassVar[bool] = False

    def __init__(self, settings: ExperimentSettings, index: int = 0) -> None:
        self.settings = settings
        self.index = index
        #: Each provider's scrapes of its server's /metrics (`labkit.server_metrics`), set
        #: by the runner before `analyze`; empty where the server exposes none.
        self.server_metrics: dict[str, list[ServerMetricsSample]] = {}
        #: The hosts' clock estimates around each level run across machines (the run
        #: folder's clock log, `labkit.clocksync`), set by the runner before `analyze`.
        self.host_clocks: list[HostClock] = []
        #: (provider id, level label) of each level whose Ray actor or worker process died
        #: mid-level in its latest run, to what died ("a Ray node", "a worker process"; the
        #: run folder's level logs, `labkit.runner.levellog`), set by the runner before a
        #: (resumed) run plans its levels, which runs such a level again, and before
        #: `analyze`: partial whether or not a request was in flight when it died.
        self.partial_levels: dict[tuple[str, str], str] = {}
        #: Every provider's records of this experiment (non-warm-up and warm-up alike), by
        #: provider id, set by the runner before `analyze`: what an experiment that compares
        #: providers with each other reads (empty: only the one provider's are known).
        self.all_records: dict[str, list[RequestRecord]] = {}

    @property
    def name(self) -> str:
        """Unique name within a run: kind, plus the position when a kind repeats."""
        return self.kind if self.index == 0 else f"{self.kind}#{self.index}"

    def messages(self, prompt: str) -> list[dict[str, str]]:
        """The chat messages for one prompt, with the optional system message."""
        msgs = [{"role": "system", "content": self.settings.system}] if self.settings.system else []
        msgs.append({"role": "user", "content": prompt})
        return msgs

    def warmups(self, prompt_id: str, prompt: str) -> list[PlannedRequest]:
        """The configured warm-up requests, sent before the measured ones."""
        return [
            PlannedRequest(
                key=f"{self.name}/warmup/{i}",
                request=ChatRequest(self.messages(prompt), dict(self.settings.params), prompt_id),
                trial=i,
                warmup=True,
            )
            for i in range(self.settings.warmup)
        ]

    async def prepare(self, provider: Provider) -> None:  # noqa: B027 - optional hook
        """I/O needed before planning for `provider` (default: none)."""

    @abstractmethod
    def plan(self, provider: Provider) -> Iterable[PlannedRequest]:
        """The requests to send to `provider`, warm-ups first. The runner draws them one at a
        time, so a plan that can grow large (repeats) is best a generator."""

    def requests_for(self, provider: Provider) -> Iterator[PlannedRequest]:
        """The plan as the runner sends it: `plan`, on the client paths of `paths_for`, each
        request tagged with what rules its server queue out (`server_tags`)."""
        return self.on_paths(provider, self.server_tagged(provider, self.plan(provider)))

    def server_tagged(
        self, provider: Provider, plan: Iterable[PlannedRequest]
    ) -> Iterator[PlannedRequest]:
        """`plan` with `server_slots` and `in_flight_max` tagged where labkit alone uses the
        server (`Provider.exclusive_slots`): the one rule by which every experiment on that
        server knows its queue is 0 (`labkit.analysis.split.queues`), sent one at a time or
        up to the provider's `concurrency`."""
        slots = provider.exclusive_slots()
        if slots is None:
            yield from plan
            return
        tags = {"server_slots": slots, "in_flight_max": provider.settings.concurrency}
        for planned in plan:
            yield dataclasses.replace(planned, tags={**planned.tags, **tags})

    def planned_count(self, provider: Provider) -> int | None:
        """How many requests `requests_for` will yield, when that is known without drawing
        them (progress displays); None: unknown, counted as they are drawn."""
        per_path = self.planned_per_path(provider)
        return None if per_path is None else per_path * len(self.paths_for(provider))

    def planned_per_path(self, provider: Provider) -> int | None:
        """How many requests `plan` yields, warm-ups included (None: unknown)."""
        return None

    def paths_for(self, provider: Provider) -> list[str]:
        """The client paths of this experiment on `provider` (`wire`, `sdk`): the experiment's
        `paths`, else the provider's `client`; `sdk` is dropped where the provider has no
        official SDK."""
        paths: list[str] = [*(self.settings.paths or [provider.settings.client])]
        if not provider.has_sdk:
            paths = [p for p in paths if p != "sdk"] or ["wire"]
        return paths

    def on_paths(
        self, provider: Provider, plan: Iterable[PlannedRequest]
    ) -> Iterator[PlannedRequest]:
        """`plan` with every request's client path set, drawn as lazily as `plan`.

        On two paths each planned request becomes two, one per path in `paths` order (A B
        A B, warm-ups included: the SDK's first request pays its imports); the SDK copy's
        key gains ``/sdk``, and both are tagged ``path``.
        """
        paths = self.paths_for(provider)
        for planned in plan:
            if len(paths) == 1:
                planned.request.client_path = paths[0]
                yield planned
                continue
            for path in paths:
                request = dataclasses.replace(
                    planned.request, params=dict(planned.request.params), client_path=path
                )
                yield dataclasses.replace(
                    planned,
                    key=planned.key + "/sdk" if path == "sdk" else planned.key,
                    request=request,
                    tags={**planned.tags, "path": path},
                )

    async def finalize(self, provider: Provider, records: list[RequestRecord]) -> None:  # noqa: B027
        """I/O after this experiment's requests, while the provider is still up (default: none).

        `records` are this experiment's records for `provider`, resumed ones included.
        """

    def answer(
        self,
        provider_id: str,
        model: str,
        text: str,
        figures: Figures,
        status: Literal["ok", "partial", "failed"] = "ok",
    ) -> LabAnswer:
        """This experiment's `LabAnswer` for one provider."""
        return LabAnswer(
            experiment=self.name,
            provider=provider_id,
            model=model,
            question=self.question,
            answer=text,
            figures=figures,
            status=status,
        )

    @abstractmethod
    def analyze(self, provider_id: str, model: str, records: list[RequestRecord]) -> LabAnswer:
        """The answer for one provider from its records of this experiment."""

    def judged(self, provider_id: str, model: str, records: list[RequestRecord]) -> LabAnswer:
        """`analyze`, with the SLOs judged over the measured records added to the answer
        (`figures.slo` and a sentence), unless it judges them itself (`judges_slos`); and
        partial where a process that ran one of its levels died (`partial_levels`), unless
        it says so itself (`says_partial_levels`)."""
        ans = self._partial(provider_id, self.analyze(provider_id, model, records))
        slos = self.settings.slos()
        if not slos or self.judges_slos or ans.figures is None:
            return ans
        report = judge(slos, records)
        if report is None or not report.requests:
            return ans
        figures = ans.figures.model_copy(update={"slo": report})
        return ans.model_copy(
            update={"figures": figures, "answer": f"{ans.answer} {slo_sentence(report)}"}
        )

    def _partial(self, provider_id: str, ans: LabAnswer) -> LabAnswer:
        """`ans` said partial where a process that ran its levels for `provider_id` died."""
        if self.says_partial_levels or ans.status == "failed":
            return ans
        died = sorted(
            {what for (pid, _), what in self.partial_levels.items() if pid == provider_id}
        )
        if not died:
            return ans
        said = partial_run_sentence(died, SHARE_LOST)
        return ans.model_copy(update={"answer": f"{ans.answer} {said}", "status": "partial"})

    def cite(self, answer: LabAnswer, others: list[LabAnswer]) -> LabAnswer:
        """`answer` amended from the run's other answers for the same provider (one that
        proves or qualifies it); default: unchanged."""
        return answer

    def validate_for(self, settings: ProviderSettings) -> None:  # noqa: B027 - optional hook
        """Raise ConfigError when this experiment cannot run on a provider.

        Called for every provider before the run folder is made and any request is sent.
        """


_REGISTRY: dict[str, type[Experiment]] = {}

E = TypeVar("E", bound=type[Experiment])


def register_experiment(cls: E) -> E:
    """Class decorator: make an experiment available under its `kind`."""
    _REGISTRY[cls.kind] = cls
    return cls


def experiment_class(kind: str) -> type[Experiment]:
    """The class registered for `kind` (KeyError when unknown)."""
    return _REGISTRY[kind]


def experiment_kinds() -> list[str]:
    """All registered experiment kinds, sorted."""
    return sorted(_REGISTRY)
