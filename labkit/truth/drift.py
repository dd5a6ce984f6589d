"""A provider that changes over days: the truth server's planted, time-varying behaviour.

A `Drift` (the schedule's ``drift`` key) plants changes a watch should find, each optional: a
daily queue bump, a prefill step, a front-end step no timing reports, a new fingerprint or
build. The time a request stands for is the header ``X-Labkit-Sim-Time: <epoch seconds>``
when it has one (a watch on a compressed clock sends it), else the wall clock. The server
logs it (``sim_time``) and what was in effect (``drift``: each change's kind, the component
it moves and its true size) in the request's truth line. Several simulated providers are
several servers, each with its own plan.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Protocol, Self, TypeVar

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

__all__ = [
    "SIM_TIME_HEADER",
    "Drift",
    "QueueBump",
    "Step",
    "TextStep",
    "drifted",
    "sim_time",
]

#: The request header a compressed clock's simulated time rides in (epoch seconds).
SIM_TIME_HEADER = "x-labkit-sim-time"
#: The longest planted delay (ms), as the schedule's waits.
_MAX_MS = 3_600_000.0


def _epoch(value: Any) -> Any:
    """An epoch-seconds time from a number, a datetime or an ISO 8601 text (UTC if naive)."""
    if isinstance(value, datetime):
        moment = value
    elif isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            moment = datetime.fromisoformat(value)
    else:
        return value
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


class _Part(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class QueueBump(_Part):
    """A queue of `ms` more, every day, from `start_hour` to `end_hour` (UTC; it wraps past
    midnight when `end_hour` < `start_hour`)."""

    start_hour: int = Field(ge=0, le=23)
    end_hour: int = Field(ge=0, le=24)
    ms: float = Field(gt=0, le=_MAX_MS, allow_inf_nan=False)

    def on(self, t: float) -> bool:
        """Whether the bump is in effect at epoch second `t`."""
        hour = datetime.fromtimestamp(t, UTC).hour
        if self.start_hour <= self.end_hour:
            return self.start_hour <= hour < self.end_hour
        return hour >= self.start_hour or hour < self.end_hour


class Step(_Part):
    """A change from `at` (epoch seconds, or an ISO 8601 time; UTC) on: a `factor` or `ms`."""

    at: float = Field(allow_inf_nan=False)
    factor: float = Field(default=2.0, gt=0, le=1_000, allow_inf_nan=False)
    ms: float = Field(default=0.0, ge=0, le=_MAX_MS, allow_inf_nan=False)

    @field_validator("at", mode="before")
    @classmethod
    def _at(cls, value: Any) -> Any:
        return _epoch(value)


class TextStep(_Part):
    """A text that is `before` until `at` and `after` from it (a fingerprint, a build)."""

    at: float = Field(allow_inf_nan=False)
    before: str = Field(min_length=1, max_length=128)
    after: str = Field(min_length=1, max_length=128)

    @field_validator("at", mode="before")
    @classmethod
    def _at(cls, value: Any) -> Any:
        return _epoch(value)

    def value(self, t: float) -> str:
        """The text in effect at epoch second `t`."""
        return self.after if t >= self.at else self.before


class Drift(_Part):
    """The planted changes of one simulated provider, each optional:

    - ``queue_bump``: a queue that grows at given hours of the day (UTC), e.g. +300 ms from
      17:00 to 19:00, every day: reported as the server's queue time where its shape has one;
    - ``prefill_step``: the prefill (the fixed wait to token 1 and each prompt token's cost)
      multiplied by ``factor`` from ``at`` on;
    - ``frontend_step``: a network / front-end delay of ``ms`` more from ``at`` on, which no
      timing the server reports holds (as the schedule's ``frontend_ms``);
    - ``fingerprint_step`` and ``build_step``: the ``system_fingerprint`` its Chat chunks
      carry, or the ``build_info`` its ``/props`` says, ``before`` until ``at`` and
      ``after`` from it.
    """

    queue_bump: QueueBump | None = None
    prefill_step: Step | None = None
    frontend_step: Step | None = None
    fingerprint_step: TextStep | None = None
    build_step: TextStep | None = None

    @model_validator(mode="before")
    @classmethod
    def _from_text(cls, value: Any) -> Any:
        """A JSON object's text (a command-line option, a URL segment) is read as one."""
        if isinstance(value, str):
            return json.loads(value)
        return value

    @model_validator(mode="after")
    def _frontend_ms(self) -> Drift:
        if self.frontend_step is not None and self.frontend_step.ms <= 0:
            raise ValueError("drift.frontend_step needs ms > 0 (the delay it adds)")
        return self

    def __str__(self) -> str:
        """The drift as JSON text, as the command line and a URL segment pass it."""
        return self.model_dump_json(exclude_none=True)


def sim_time(headers: Mapping[str, str], now: float | None = None) -> tuple[float, bool]:
    """The epoch second a request stands for, and whether its header said so (else the
    wall clock, or `now`). A header that is not a finite number is ignored."""
    raw = headers.get(SIM_TIME_HEADER)
    if raw is not None:
        try:
            t = float(raw)
        except ValueError:
            t = math.nan
        if math.isfinite(t) and 0 <= t < 32_503_680_000:  # before the year 3000
            return t, True
    return (time.time() if now is None else now), False


class _Drifting(Protocol):
    """What `drifted` reads of a schedule (`labkit.truth.schedule.TruthSchedule`)."""

    @property
    def drift(self) -> Drift | None: ...
    @property
    def queue_ms(self) -> float: ...
    @property
    def first_token_ms(self) -> float: ...
    @property
    def prefill_ms_per_token(self) -> float: ...
    @property
    def cached_ms_per_token(self) -> float: ...
    @property
    def frontend_ms(self) -> float: ...
    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        """The schedule with `update`'s values."""
        ...


S = TypeVar("S", bound=_Drifting)


def drifted(schedule: S, t: float) -> tuple[S, list[dict[str, Any]]]:
    """`schedule` as its drift makes it at epoch second `t`, and the changes in effect, each
    ``{"kind", "component", ...its true size}`` (none without a drift)."""
    drift = schedule.drift
    if drift is None:
        return schedule, []
    update: dict[str, Any] = {}
    effects: list[dict[str, Any]] = []
    bump = drift.queue_bump
    if bump is not None and bump.on(t):
        update["queue_ms"] = schedule.queue_ms + bump.ms
        effects.append({"kind": "queue_bump", "component": "queue", "ms": bump.ms})
    step = drift.prefill_step
    if step is not None and t >= step.at:
        update["first_token_ms"] = min(schedule.first_token_ms * step.factor, _MAX_MS)
        update["prefill_ms_per_token"] = min(schedule.prefill_ms_per_token * step.factor, _MAX_MS)
        update["cached_ms_per_token"] = min(schedule.cached_ms_per_token * step.factor, _MAX_MS)
        effects.append(
            {
                "kind": "prefill_step",
                "component": "processing",
                "factor": step.factor,
                "at": step.at,
            }
        )
    step = drift.frontend_step
    if step is not None and t >= step.at:
        update["frontend_ms"] = min(schedule.frontend_ms + step.ms, _MAX_MS)
        effects.append(
            {"kind": "frontend_step", "component": "network_frontend", "ms": step.ms, "at": step.at}
        )
    text = drift.fingerprint_step
    if text is not None:
        update["system_fingerprint"] = text.value(t)
        if t >= text.at:
            effects.append({"kind": "fingerprint", "value": text.after, "at": text.at})
    text = drift.build_step
    if text is not None:
        update["server_build"] = text.value(t)
        if t >= text.at:
            effects.append({"kind": "build", "value": text.after, "at": text.at})
    return schedule.model_copy(update=update), effects
