"""The body of a level worker, one code path for worker processes and Ray actors.

A worker builds its own provider and experiment from its `LevelJob` (`build_worker`), sends
the experiment's warm-ups, says it is ready, waits for the level's start and runs its share
(`PacedExperiment.run_share`), handing each record to its `WorkerLink` as it completes. A
subprocess worker's link writes `labkit.runner.jobs` messages as JSON lines
(`labkit.runner.worker_process`); a Ray actor's link queues them for the driver's long poll
(`labkit.runner.ray_executor`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from labkit.experiments import PacedExperiment, PlannedRequest, Share, experiment_class
from labkit.measurement.recorder import StreamRecorder
from labkit.providers import Provider, provider_class
from labkit.records import RequestRecord
from labkit.runner.executor import Measurer
from labkit.runner.gcpolicy import level_gc
from labkit.runner.jobs import LevelJob

if TYPE_CHECKING:
    from labkit.measurement.sdkpath import SDKRecorder

__all__ = ["WorkerLink", "build_worker", "run_worker"]


class WorkerLink(Protocol):
    """How a worker talks to the process that runs the level."""

    def sending(self, planned: PlannedRequest) -> None:
        """`planned` is about to be sent (its record follows when it completes)."""
        ...

    def emit(self, record: RequestRecord) -> None:
        """One finished record (a cancelled request's partial record included)."""
        ...

    async def ready(self) -> int:
        """Say the worker is ready; return the level's start in this worker's clock."""
        ...


def build_worker(job: LevelJob) -> tuple[Provider, PacedExperiment[Any, Any]]:
    """The provider and experiment `job` describes, the experiment's state restored; the
    API key is read here, from the variable the provider's settings name
    (ProviderUnavailable when unset); RunError where this process runs another read path
    than the runner (`LevelJob.check_read_path`)."""
    job.check_read_path()
    settings = job.provider
    provider = provider_class(settings.kind)(
        settings, api_key=settings.check_available(), pool_size=job.pool_size
    )
    provider.server_build = job.server_build
    experiment = experiment_class(job.experiment.kind)(job.experiment, job.experiment_index)
    if not isinstance(experiment, PacedExperiment):
        raise TypeError(f"{experiment.name} does not pace its own requests")
    experiment.restore(job.state)
    return provider, experiment


async def run_worker(
    provider: Provider,
    experiment: PacedExperiment[Any, Any],
    job: LevelJob,
    link: WorkerLink,
) -> None:
    """Warm up, wait for the start `link.ready()` gives, run worker `job.worker`'s share of
    the level; closes the provider at the end."""

    def emit(record: RequestRecord) -> None:
        if not job.store_text and record.output_text is not None:
            # Text kept for an `on_record` hook only (see PlannedRequest.on_record).
            record = record.model_copy(update={"output_text": None})
        link.emit(record)

    sdk: list[SDKRecorder] = []

    def sdk_recorder() -> SDKRecorder:
        if not sdk:  # made on first use: the SDKs are slow to import
            from labkit.measurement.sdkpath import SDKRecorder

            sdk.append(SDKRecorder(on_cancelled=emit))
        return sdk[0]

    recorder = StreamRecorder(on_cancelled=emit)
    measurer = Measurer(
        recorder,
        sdk_recorder,
        run_id=job.run_id,
        store_text=job.store_text,
        propagate_trace=job.propagate_trace,
        request_tags=job.request_tags,
        request_headers=job.request_headers,
    )

    async def send(planned: PlannedRequest, queue_ms: float) -> None:
        link.sending(planned)
        emit(await measurer.measure(provider, experiment.name, planned, queue_ms))

    try:
        await measurer.set_up(provider, experiment.paths_for(provider))
        # A fresh worker pays its first connection on its first request: the experiment's
        # warm-ups, sent again here (stored as warm-ups) before the level.
        where = f"{job.level.index}-w{job.worker}"
        for planned in experiment.requests_for(provider):
            if planned.warmup:
                planned.key += f"/{where}"
                await send(planned, 0.0)
        with level_gc():  # no full collection of start-up garbage in the middle of the level
            t0_ns = await link.ready()
            share = Share(job.worker, job.workers, job.tags)
            await experiment.run_share(provider, job.level, share, t0_ns, send)
    finally:
        for client in sdk:
            await client.aclose()
        await provider.aclose()
