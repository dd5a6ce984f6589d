"""Where a paced experiment's levels run: the `Executor` seam.

The runner asks a `PacedExperiment` for its levels (`level_plans`) and hands each to the
executor it chose once for the run: this host's (`labkit.runner.workers.HostExecutor`: the
runner's own process, `InProcessExecutor`, or worker processes, as the level asks) or a Ray
cluster's (`labkit.runner.ray_executor.RayExecutor`). Every executor runs share ``(k, n)`` of the
level in each of its workers (`PacedExperiment.run_share`) and hands every record to the
runner's `LevelSink` as it completes.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from typing import Any, Protocol

from labkit.experiments import LevelPlan, PacedExperiment, PlannedRequest, Share
from labkit.providers import Provider
from labkit.records import RequestRecord

__all__ = ["Executor", "InProcessExecutor", "LevelSink"]


class LevelSink(Protocol):
    """The runner's side of a level: where its requests are measured or its records kept."""

    async def send(self, planned: PlannedRequest, queue_ms: float) -> None:
        """Measure one request in the runner's process, once (no retries: a retry would
        change the offered load), and keep its record."""
        ...

    def keep(self, record: RequestRecord) -> None:
        """Keep one record a worker elsewhere measured."""
        ...

    def message(self, text: str) -> None:
        """Tell the user something (one line)."""
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
    """The whole level in the runner's process, measured by the runner's own recorder."""

    async def run_level(
        self,
        experiment: PacedExperiment[Any, Any],
        provider: Provider,
        level: LevelPlan,
        sink: LevelSink,
    ) -> None:
        """Run the level's one share now."""
        share = Share(0, 1, level.processes.tags)
        await experiment.run_share(provider, level, share, time.perf_counter_ns(), sink.send)

    async def close(self) -> None:
        """Nothing held."""
