"""Experiments that pace their own measured requests (load levels), split into shares.

Most experiments hand the runner a plan and let it send. A `PacedExperiment` plans only its
warm-ups and then its levels (`level_plans`, one `LevelPlan` at a time); the runner hands
each level to its executor (`labkit.runner.executors`: this process, worker processes or
Ray actors), which runs share ``(k, n)`` of it in each worker (`run_share`, after `restore`
of the experiment's `shard_state`). The experiment never calls the runner back to run a
level, and every paced experiment runs on every executor. The runner asks
`isinstance(exp, PacedExperiment)`: a capability, not a particular experiment.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import ClassVar, Generic, Protocol, TypeVar

from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt, PositiveInt

from labkit.experiments.base import Experiment, PlannedRequest
from labkit.providers.base import Provider
from labkit.records import RequestRecord

__all__ = [
    "HostProcesses",
    "LevelContext",
    "LevelPlan",
    "PacedExperiment",
    "RecordTags",
    "SendFn",
    "Share",
    "connections_needed",
]

SendFn = Callable[[PlannedRequest, float], Awaitable[None]]
"""Measure one planned request now; the float is its `client.queue_ms`."""

RecordTags = dict[str, str | int | float | bool]
"""A record's `tags`."""


class HostProcesses(BaseModel):
    """How many processes of the runner's host read a level, and why (`workers: auto`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    count: PositiveInt = Field(default=1, description="1: the runner's own process.")
    reason: str | None = Field(default=None, description="Why, said when the level starts.")
    tags: RecordTags = Field(
        default_factory=dict, description="Added to the level's records (the choice's inputs)."
    )


class LevelPlan(BaseModel):
    """One level as its experiment plans it; each experiment adds what its shares need."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    index: NonNegativeInt = Field(
        default=0, description="The level's number: in worker warm-up keys and log names."
    )
    title: str = Field(description="The level in a sentence: `concurrency 8`, `2.5 req/s`.")
    processes: HostProcesses = Field(default_factory=HostProcesses)
    most_workers: PositiveInt | None = Field(
        default=None,
        description="The most workers elsewhere (Ray actors) the level can use: a closed "
        "loop's streams, a cap on requests in flight (None: no limit).",
    )

    def record_label(self) -> str | None:
        """The label its records carry (`tags["level"]`), which the level logs key it by;
        None where they carry none (the logs then name it by its number:
        `labkit.runner.levellog.level_label`)."""
        return None


@dataclass(frozen=True, slots=True)
class Share:
    """Worker `index` of `of`'s part of a level; `tags` go on each of its records."""

    index: int = 0
    of: int = 1
    tags: RecordTags = field(default_factory=dict)


class LevelContext(Protocol):
    """What the runner tells a `PacedExperiment` while it plans its levels."""

    def previous(self) -> list[RequestRecord]:
        """This experiment's records for this provider so far (a resumed run's and the
        levels run so far included)."""
        ...

    def expect(self, requests: int) -> None:
        """Add `requests` to the provider's planned count (progress display)."""
        ...

    def message(self, text: str) -> None:
        """Tell the user something (one line)."""
        ...


StateT = TypeVar("StateT", bound=BaseModel)
LevelT = TypeVar("LevelT", bound=LevelPlan)


class PacedExperiment(Experiment, Generic[StateT, LevelT]):
    """An experiment that plans its measured requests as levels, each run in shares.

    `state_model` is what `prepare` computes in the runner and every worker takes back
    (`shard_state`, `restore`); `level_model` is one level (`level_plans`). Both travel in
    the level's job (`labkit.runner.jobs.LevelJob`), so they are Pydantic models.
    """

    state_model: ClassVar[type[BaseModel]]
    level_model: ClassVar[type[LevelPlan]]

    @abstractmethod
    def level_plans(
        self, provider: Provider, context: LevelContext
    ) -> AsyncGenerator[LevelT, None]:
        """The levels to run, one after another, after the runner has sent the warm-ups;
        the next is asked for once the previous one's records are in `context.previous()`."""

    @abstractmethod
    def shard_state(self) -> StateT:
        """What `prepare` computed (and the warm-ups taught), for `restore` in a worker."""

    @abstractmethod
    def restore(self, state: StateT) -> None:
        """Take back in a worker the state `shard_state` gave in the runner."""

    @abstractmethod
    async def run_share(
        self, provider: Provider, level: LevelT, share: Share, t0_ns: int, send: SendFn
    ) -> None:
        """Run `share` of `level`, starting at `t0_ns` (`time.perf_counter_ns` on this
        worker's host)."""

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
