"""Experiments that pace their own measured requests (load levels), and what the runner
lends them.

Most experiments hand the runner a plan and let it send. A `PacedExperiment` plans only its
warm-ups; the runner then calls `drive` with a `RequestDriver`, and the experiment decides
when each request goes, in this process or split over worker processes (`run_share` in
each, after `restore`). The runner asks `isinstance(exp, PacedExperiment)`: a capability,
not a particular experiment.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from labkit.experiments.base import Experiment, PlannedRequest
from labkit.providers.base import Provider
from labkit.records import RequestRecord

__all__ = ["PacedExperiment", "RequestDriver", "SendFn", "connections_needed"]

SendFn = Callable[[PlannedRequest, float], Awaitable[None]]
"""Measure one planned request now; the float is its `client.queue_ms`."""


class RequestDriver(Protocol):
    """What the runner lends a `PacedExperiment` while it drives its requests."""

    def previous(self) -> list[RequestRecord]:
        """This experiment's records for this provider so far (a resumed run's included)."""
        ...

    async def send(self, planned: PlannedRequest, queue_ms: float) -> None:
        """Measure one request once (no retries: a retry would change the offered load)."""
        ...

    async def in_processes(self, job: dict[str, Any], processes: int) -> None:
        """Run `job` split over worker processes (`PacedExperiment.run_share` in each),
        keeping every record they measure."""
        ...

    def has_executor(self) -> bool:
        """Whether the run sends levels to an executor elsewhere (`executor:` in the config:
        Ray actors across a cluster) rather than to local worker processes."""
        ...

    async def in_executor(self, job: dict[str, Any], most: int | None) -> None:
        """Run `job` split over the executor's workers (at most `most`; `run_share` in
        each), keeping every record they measure."""
        ...

    def expect(self, requests: int) -> None:
        """Add `requests` to the provider's planned count (progress display)."""
        ...

    def message(self, text: str) -> None:
        """Tell the user something (one line)."""
        ...


class PacedExperiment(Experiment):
    """An experiment that sends its measured requests itself; `plan` holds its warm-ups."""

    @abstractmethod
    async def drive(self, provider: Provider, driver: RequestDriver) -> None:
        """Send the measured requests, after the runner has sent the warm-ups."""

    @abstractmethod
    async def run_share(
        self,
        provider: Provider,
        job: dict[str, Any],
        share: tuple[int, int],
        t0_ns: int,
        send: SendFn,
    ) -> None:
        """Run worker `share[0]` of `share[1]`'s part of `job`, starting at `t0_ns`
        (`time.perf_counter_ns`, shared by every process of the host). Called in a worker
        process; see `RequestDriver.in_processes`."""

    @abstractmethod
    def restore(self, job: dict[str, Any]) -> None:
        """Take back in a worker process the state `prepare` computed in the runner."""

    def connections_needed(self) -> int:
        """Requests this experiment keeps in flight in one process at most (0: the
        provider's `concurrency` decides)."""
        return 0


def connections_needed(experiments: list[Experiment]) -> int:
    """The HTTP pool a provider needs for these experiments (0: its `concurrency`)."""
    return max(
        (e.connections_needed() for e in experiments if isinstance(e, PacedExperiment)),
        default=0,
    )
