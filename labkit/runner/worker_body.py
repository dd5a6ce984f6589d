"""The body of a level worker, one code path for worker processes and Ray actors.

A worker builds its own provider and experiment from the job document (`build_worker`),
sends the experiment's warm-ups, says it is ready, waits for the level's start and runs its
share (`PacedExperiment.run_share`), handing each record to its `WorkerLink` as it
completes. A subprocess worker's link writes JSON lines (`labkit.runner.worker_process`); a
Ray actor's link feeds its streaming generator (`labkit.runner.ray_executor`).
"""

from __future__ import annotations

import gc
from typing import Any, Protocol

from labkit.experiments import PacedExperiment, PlannedRequest, experiment_class
from labkit.measurement.recorder import RecordContext, StreamRecorder
from labkit.providers import Provider, provider_class
from labkit.records import RequestRecord

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


def build_worker(document: dict[str, Any]) -> tuple[Provider, PacedExperiment]:
    """The provider and experiment a job document describes; the API key is read here,
    from the variable the provider's settings name (ProviderUnavailable when unset)."""
    settings_data = document["provider"]
    cls = provider_class(settings_data["kind"])
    settings = cls.settings_model.model_validate(settings_data)
    provider = cls(
        settings, api_key=settings.check_available(), pool_size=int(document["pool_size"])
    )
    provider.server_build = document.get("server_build")
    exp_data = document["experiment"]
    exp_cls = experiment_class(exp_data["settings"]["kind"])
    experiment = exp_cls(
        exp_cls.settings_model.model_validate(exp_data["settings"]), int(exp_data["index"])
    )
    if not isinstance(experiment, PacedExperiment):
        raise TypeError(f"{experiment.name} does not pace its own requests")
    experiment.restore(document["job"])
    return provider, experiment


async def run_worker(
    provider: Provider,
    experiment: PacedExperiment,
    document: dict[str, Any],
    link: WorkerLink,
    *,
    clock_skew_ns: int = 0,
) -> None:
    """Warm up, wait for the start `link.ready()` gives, run worker `document["worker"]`'s
    share of the level; closes the provider at the end.

    `clock_skew_ns` (a test hook) shifts this worker's clock: its records' `t_start_mono_ns`
    and its view of the start time, as if its host's monotonic clock read that much more.
    """

    def emit(record: RequestRecord) -> None:
        if clock_skew_ns and record.t_start_mono_ns is not None:
            record.t_start_mono_ns += clock_skew_ns
        link.emit(record)

    recorder = StreamRecorder(on_cancelled=emit)
    sdk: Any = None
    run_id = str(document["run_id"])
    store_text = bool(document["store_text"])

    async def send(planned: PlannedRequest, queue_ms: float) -> None:
        nonlocal sdk
        link.sending(planned)
        ctx = RecordContext(
            run_id=run_id,
            experiment=experiment.name,
            trial=planned.trial,
            warmup=planned.warmup,
            tags=planned.tags,
            queue_ms=queue_ms,
            store_text=store_text,
        )
        if planned.request.client_path == "sdk":
            if sdk is None:
                from labkit.measurement.sdkpath import SDKRecorder

                sdk = SDKRecorder(on_cancelled=emit)
            record = await sdk.record(provider, planned.request, ctx)
        else:
            record = await recorder.record(provider, planned.request, ctx)
        record.plan_key = planned.key
        emit(record)

    try:
        # A fresh worker pays its first connection and lazy imports on its first request:
        # the experiment's warm-ups, sent again here (stored as warm-ups) before the level.
        where = f"{document['job'].get('level', 0)}-w{document['worker']}"
        for planned in experiment.requests_for(provider):
            if planned.warmup:
                planned.key += f"/{where}"
                await send(planned, 0.0)
        gc.collect()
        gc.freeze()  # no full collection of start-up garbage in the middle of the level
        t0_ns = await link.ready() - clock_skew_ns
        share = (int(document["worker"]), int(document["processes"]))
        await experiment.run_share(provider, document["job"], share, t0_ns, send)
    finally:
        if sdk is not None:
            await sdk.aclose()
        await provider.aclose()
