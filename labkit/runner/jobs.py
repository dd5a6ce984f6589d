"""What crosses to a level's workers and back: the typed level job and worker messages.

A worker (a process, `labkit.runner.worker_process`, or a Ray actor,
`labkit.runner.ray_executor`) builds its provider and its share from a `LevelJob`: settings
and names only, never a key (each worker reads the key from the variable the settings name).
Everything between a worker and the process that runs the level is one `WorkerMessage` (a
union tagged by `type`), one JSON line each way (`encode`, `decode`), over a pipe or Ray.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    NonNegativeInt,
    PositiveInt,
    SerializeAsAny,
    TypeAdapter,
    model_validator,
)

from labkit.errors import RunError
from labkit.experiments import ExperimentSettings, LevelPlan, PacedExperiment, experiment_class
from labkit.experiments.paced import RecordTags
from labkit.manifest import ReadPathManifest
from labkit.providers import Provider, ProviderSettings, SamplingParams, provider_class
from labkit.records import RequestRecord
from labkit.wire.readpath import READ_PATH

__all__ = [
    "JobMessage",
    "LevelJob",
    "Ready",
    "Recorded",
    "Sending",
    "Start",
    "WorkerMessage",
    "decode",
    "encode",
]


class LevelJob(BaseModel):
    """One level for one worker: its provider, its experiment and the experiment's state
    (`PacedExperiment.shard_state`), the level, and which share is the worker's."""

    model_config = ConfigDict(extra="forbid")

    provider: SerializeAsAny[ProviderSettings]
    pool_size: NonNegativeInt = Field(description="The provider's HTTP pool (0: concurrency).")
    server_build: str | None = None
    experiment: SerializeAsAny[ExperimentSettings]
    experiment_index: NonNegativeInt
    state: SerializeAsAny[BaseModel]
    level: SerializeAsAny[LevelPlan]
    run_id: str
    store_text: bool
    worker: NonNegativeInt = 0
    workers: PositiveInt = 1
    tags: RecordTags = Field(
        default_factory=dict, description="Added to each record of the share (`Share.tags`)."
    )
    propagate_trace: bool = Field(
        default=True, description="Send each request's trace context (`tracing.headers`)."
    )
    request_tags: RecordTags = Field(
        default_factory=dict, description="The run's tags on every record (`Measurer`)."
    )
    request_headers: dict[str, str] = Field(
        default_factory=dict, description="The run's headers on every request (`Measurer`)."
    )
    read_path: ReadPathManifest | None = Field(
        default=None,
        description="The runner's read path, which the worker must run too (`check_read_path`).",
    )

    @classmethod
    def of(
        cls,
        provider: Provider,
        experiment: PacedExperiment[Any, Any],
        level: LevelPlan,
        *,
        run_id: str,
        store_text: bool,
        tags: RecordTags | None = None,
        propagate_trace: bool = True,
        request_tags: RecordTags | None = None,
        request_headers: dict[str, str] | None = None,
    ) -> LevelJob:
        """The job of `level` (for worker 0 of 1: `for_worker` sets the share)."""
        settings = provider.settings
        if "managed" in type(settings).model_fields:
            # The runner runs the server; base_url already points at it.
            settings = settings.model_copy(update={"managed": False})
        return cls(
            provider=settings,
            pool_size=provider.connections.pool_size,
            server_build=provider.server_build,
            experiment=experiment.settings,
            experiment_index=experiment.index,
            state=experiment.shard_state(),
            level=level,
            run_id=run_id,
            store_text=store_text,
            tags=tags or {},
            propagate_trace=propagate_trace,
            request_tags=request_tags or {},
            request_headers=request_headers or {},
            read_path=READ_PATH,
        )

    def check_read_path(self) -> None:
        """RunError where this process runs another read path than the runner that sent
        the job (a Ray node without labkit's C build, a worker with another
        ``LABKIT_READPATH``): a run's records are all measured on the one its manifest
        names."""
        wanted = self.read_path
        if wanted is None or wanted.implementation == READ_PATH.implementation:
            return
        raise RunError(
            f"this worker runs the {READ_PATH.describe()} read path, the runner the "
            f"{wanted.describe()} one: build labkit's C read path here too, or run with "
            "LABKIT_READPATH=python everywhere"
        )

    def for_worker(self, worker: int, workers: int) -> LevelJob:
        """This job for worker `worker` of `workers`."""
        return self.model_copy(update={"worker": worker, "workers": workers})

    @model_validator(mode="before")
    @classmethod
    def _kinds(cls, data: Any) -> Any:
        """Read each part as the model its kind names (a provider's settings, the
        experiment's settings, state and level)."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        provider = data.get("provider")
        if isinstance(provider, dict):
            data["provider"] = provider_class(
                str(provider.get("kind"))
            ).settings_model.model_validate(provider)
        experiment = data.get("experiment")
        if isinstance(experiment, dict):
            exp_cls = experiment_class(str(experiment.get("kind")))
            data["experiment"] = exp_cls.settings_model.model_validate(experiment)
            if not issubclass(exp_cls, PacedExperiment):
                raise ValueError(f"experiment kind {exp_cls.kind!r} does not pace levels")
            if isinstance(data.get("state"), dict):
                data["state"] = exp_cls.state_model.model_validate(data["state"])
            if isinstance(data.get("level"), dict):
                data["level"] = exp_cls.level_model.model_validate(data["level"])
        return data


class JobMessage(BaseModel):
    """Runner → worker process, first: the job."""

    type: Literal["job"] = "job"
    job: LevelJob


class Start(BaseModel):
    """Runner → worker process, after its `Ready`: the level's start on the worker's clock."""

    type: Literal["start"] = "start"
    t0_ns: int


class Ready(BaseModel):
    """Worker → runner: warm-ups done, waiting for `Start`."""

    type: Literal["ready"] = "ready"


class Recorded(BaseModel):
    """Worker → runner: one finished record (a cancelled request's partial one included)."""

    type: Literal["record"] = "record"
    record: RequestRecord


class Sending(BaseModel):
    """Worker → runner: a request is about to be sent; what its record says should it be
    lost with its worker (a Ray actor whose node dies)."""

    type: Literal["sending"] = "sending"
    key: str
    trial: int
    warmup: bool
    tags: RecordTags
    prompt_id: str
    prompt_chars: int
    prompt_bytes: int
    params: SamplingParams
    started_at: datetime
    t_mono_ns: int


WorkerMessage = Annotated[
    JobMessage | Start | Ready | Recorded | Sending, Field(discriminator="type")
]
"""Every message between a worker and the process that runs its level."""

_MESSAGE: TypeAdapter[WorkerMessage] = TypeAdapter(WorkerMessage)


def encode(message: JobMessage | Start | Ready | Recorded | Sending) -> str:
    """One message as one JSON line (no newline)."""
    return message.model_dump_json()


def decode(line: str | bytes) -> WorkerMessage:
    """The message of one JSON line (ValidationError where it is none)."""
    return _MESSAGE.validate_json(line)
