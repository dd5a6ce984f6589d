"""Where a paced experiment's levels run: the `Executor` seam.

The runner asks a `PacedExperiment` for its levels (`level_plans`) and hands each to the
executor it chose once for the run: this host's (`labkit.runner.workers.HostExecutor`: the
runner's own process, `InProcessExecutor`, or worker processes, as the level asks) or a Ray
cluster's (`labkit.runner.ray_executor.RayExecutor`). Every executor runs share ``(k, n)`` of the
level in each of its workers (`PacedExperiment.run_share`), measuring each request with a
`Measurer` of that worker's process, and hands every record to the runner's `LevelSink` as it
completes: control never passes back to the runner before a level ends.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from labkit.experiments import LevelPlan, PacedExperiment, PlannedRequest, Share
from labkit.experiments.paced import RecordTags
from labkit.measurement.recorder import BaseRecorder, RecordContext
from labkit.providers import Provider
from labkit.records import RequestRecord, new_record_id
from labkit.runner.gcpolicy import request_done
from labkit.tracing import request_trace, trace_headers

__all__ = ["Executor", "InProcessExecutor", "LevelSink", "Measurer"]


class Measurer:
    """Measures one planned request once: the one place its record's context is built, for
    the runner and every executor's workers (`recorder` for the wire path, `sdk()` for the
    SDK path, made when first needed)."""

    def __init__(
        self,
        recorder: BaseRecorder,
        sdk: Callable[[], BaseRecorder],
        *,
        run_id: str,
        store_text: bool,
        propagate_trace: bool = True,
        request_tags: RecordTags | None = None,
        request_headers: dict[str, str] | None = None,
    ) -> None:
        self._recorder = recorder
        self._sdk = sdk
        self._run_id = run_id
        self._store_text = store_text
        #: Whether requests carry their trace context (`tracing.headers` in the config).
        self.propagate_trace = propagate_trace
        #: Tags on every record and headers on every request of the run (a watch round's:
        #: `LabConfig.request_tags`, `LabConfig.request_headers`); an experiment's tag wins.
        self.request_tags: RecordTags = dict(request_tags or {})
        self.request_headers: dict[str, str] = dict(request_headers or {})

    async def set_up(self, provider: Provider, paths: Iterable[str]) -> None:
        """Do labkit's one-off set-up of each client path in `paths` for `provider` now
        (`BaseRecorder.set_up`), before the clock of any request that will use it."""
        for path in sorted(set(paths)):
            await (self._sdk() if path == "sdk" else self._recorder).set_up(provider)

    async def measure(
        self,
        provider: Provider,
        experiment: str,
        planned: PlannedRequest,
        queue_ms: float,
        *,
        attempt: int = 1,
    ) -> RequestRecord:
        """`planned`'s record (its `on_record` hook called, text kept for it)."""
        record_id = new_record_id()
        tags = {**self.request_tags, **planned.tags} if self.request_tags else planned.tags
        trace = request_trace(
            self._run_id,
            provider.id,
            experiment,
            tags,
            record_id,
            propagate=self.propagate_trace,
        )
        ctx = RecordContext(
            run_id=self._run_id,
            experiment=experiment,
            trial=planned.trial,
            attempt=attempt,
            warmup=planned.warmup,
            tags=tags,
            queue_ms=queue_ms,
            store_text=self._store_text or planned.on_record is not None,
            record_id=record_id,
            plan_key=planned.key,
            trace=trace,
            trace_headers=(
                {**trace_headers(trace), **self.request_headers}
                if self.request_headers
                else trace_headers(trace)
            ),
        )
        sdk_path = planned.request.client_path == "sdk"
        recorder = self._sdk() if sdk_path else self._recorder
        record = await recorder.record(provider, planned.request, ctx)
        request_done(record)  # the level's collector policy (gcpolicy)
        if planned.on_record is not None:
            planned.on_record(record)
        return record


class LevelSink(Protocol):
    """The runner's side of a level: where its records are kept."""

    def keep(self, record: RequestRecord) -> None:
        """Keep one finished record (a cancelled request's partial one included)."""
        ...

    def message(self, text: str) -> None:
        """Tell the user something (one line)."""
        ...

    def server_died(self) -> bool:
        """Whether the provider's managed server was found dead: send nothing more."""
        ...

    def check_server(self) -> None:
        """ProviderDied where the provider's managed server has exited."""
        ...

    def partial(self, died_what: str) -> None:
        """Some of the level's share never ran (`died_what` died: "a Ray actor", "a worker
        process"; whether or not a request was in flight): the provider's outcome stays
        unfinished, so --resume runs it again."""
        ...


class Executor(ABC):
    """Runs one level of a paced experiment, split over its workers."""

    @abstractmethod
    async def run_level(
        self,
        experiment: PacedExperiment[Any, Any],
        provider: Provider,
        level: LevelPlan,
        sink: LevelSink,
    ) -> None:
        """Run `level` (the runner has sent the experiment's warm-ups); every record goes to
        `sink` as it completes. Cancelled (Ctrl-C): the partial records are kept too."""

    @abstractmethod
    async def close(self) -> None:
        """Let go of what the executor holds for the run (a cluster connection)."""


class InProcessExecutor(Executor):
    """The whole level in the runner's process, measured by the runner's `Measurer` (its
    recorders)."""

    def __init__(self, measurer: Measurer) -> None:
        self._measurer = measurer

    async def run_level(
        self,
        experiment: PacedExperiment[Any, Any],
        provider: Provider,
        level: LevelPlan,
        sink: LevelSink,
    ) -> None:
        """Run the level's one share now; a failed request finds a dead managed server."""

        async def send(planned: PlannedRequest, queue_ms: float) -> None:
            # Once, no retries: a retry would change the offered load.
            if sink.server_died():
                return
            record = await self._measurer.measure(provider, experiment.name, planned, queue_ms)
            sink.keep(record)
            if record.error is not None:
                sink.check_server()

        share = Share(0, 1, level.processes.tags)
        await experiment.run_share(provider, level, share, time.perf_counter_ns(), send)

    async def close(self) -> None:
        """Nothing held."""
