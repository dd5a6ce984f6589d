"""`sweep`: the largest request rate (or concurrency) at which a provider meets the SLOs.

A sweep is a sequence of load levels (`labkit.experiments.load`, the same requests, pacing
and worker processes), each chosen from the ones before it:

1. **baseline** — concurrency 1, one request at a time: the service time alone. If it
   misses the SLOs, no load meets them and the sweep stops.
2. **throughput** — a closed loop of `throughput_concurrency` streams: the most requests
   per second the provider completes, the top of the search.
3. **bisection** — open-loop levels between the baseline's rate (which met) and the
   first rate that misses: the first is the throughput probe's rate, and while the top
   level still meets, the next is `_EXPAND` times higher (a closed loop's completed rate
   is only an estimate of the ceiling); once one misses, each level halves the interval.
   A level that meets every SLO without saturating raises the bottom, any other lowers
   the top. In ``mode: concurrency`` the bisection is over closed-loop stream counts
   between 1 and `throughput_concurrency`.

A rate level *saturates* when labkit could not send at the rate, when the requests complete
more slowly than they arrive, or when TTFT keeps growing through the level (the provider's
queue grows): such a rate cannot be held however good its first requests were. The sweep
stops when the interval is narrower than `resolution` (one stream in concurrency mode),
after `max_probes` levels, or once `max_duration_s` has passed; the answer gives the knee
(the largest level that met) and the interval the true one lies in.

Every choice is computed from the records, so `analyze` retraces the sweep, and a resumed
run reuses the levels it finished (a finished probe is not redone).
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import AsyncGenerator, Callable, Sequence
from dataclasses import dataclass
from typing import ClassVar, Literal

from pydantic import Field, PositiveFloat, PositiveInt, model_validator

from labkit.clocksync import driver_start_ns
from labkit.errors import ConfigError
from labkit.experiments.base import ExperimentSettings, register_experiment
from labkit.experiments.common import latest_pass
from labkit.experiments.load import (
    Level,
    LoadExperiment,
    LoadLevelPlan,
    LoadSettings,
    level_figures,
)
from labkit.experiments.paced import LevelContext
from labkit.figures import LoadLevel, SweepFigures, SweepProbe
from labkit.providers.base import Provider, ProviderSettings
from labkit.records import LabAnswer, RequestRecord
from labkit.server_metrics import ServerMetricsSample

__all__ = ["SweepExperiment", "SweepSettings"]

_NS = 1_000_000_000
# A rate level saturates when requests complete below this share of the target rate...
_COMPLETION_SHARE = 0.9
# ... or when the TTFT of its last third exceeds its first third's by this factor and margin.
_QUEUE_GROWTH = 2.0
_QUEUE_GROWTH_MIN_MS = 50.0
# While no rate has missed, the next rate probed is this much above the highest that met.
_EXPAND = 1.2

Role = Literal["baseline", "throughput", "bisect"]


class SweepSettings(LoadSettings):
    """A load search: the SLOs to hold, the search bounds, and the load levels' workload."""

    kind: Literal["sweep"] = "sweep"  # type: ignore[assignment]
    mode: Literal["rate", "concurrency"] = Field(
        default="rate", description="Search open-loop request rates, or closed-loop streams."
    )
    arrival: Literal["constant", "poisson"] = Field(
        default="constant",
        description="Arrivals of the rate levels (constant: the knee is the capacity itself, "
        "not how well the provider absorbs bursts).",
    )
    throughput_concurrency: PositiveInt = Field(
        default=32,
        description="Streams of the throughput probe (at least the provider's parallel slots); "
        "in concurrency mode, the top of the search.",
    )
    max_probes: PositiveInt = Field(
        default=10, description="Levels in all, baseline and throughput probe included."
    )
    max_duration_s: PositiveFloat = Field(
        default=300.0, description="No level starts after this many seconds of sweeping."
    )
    resolution: PositiveFloat = Field(
        default=0.1,
        ge=0.01,
        lt=1,
        description="Rate mode: stop when the interval is narrower than this share of its top.",
    )

    @model_validator(mode="after")
    def _one_loop(self) -> SweepSettings:
        """Replaces the load levels' check: a sweep chooses its levels itself."""
        if self.concurrency is not None or self.rate is not None:
            raise ValueError(
                "a sweep chooses its own levels: set `mode` (rate or concurrency) and "
                "`throughput_concurrency`, not `concurrency` or `rate`"
            )
        if self.max_concurrency is not None:
            raise ValueError("a sweep's rate levels are uncapped: drop max_concurrency")
        if not self.slo:
            raise ValueError("a sweep needs `slo:`, e.g. {ttft_ms_p90: 500}")
        for name in ("input_tokens", "output_tokens"):
            value = getattr(self, name)
            if isinstance(value, tuple) and value[0] > value[1]:
                raise ValueError(f"{name}: [min, max] with min <= max")
        return self


@dataclass(frozen=True, slots=True)
class _Next:
    """The sweep's next level, or (level None) why it stops."""

    role: Role | None
    level: Level | None
    stop: str = ""


@register_experiment
class SweepExperiment(LoadExperiment):
    """The knee: the largest load meeting the SLOs, by baseline, throughput probe, bisection."""

    kind: ClassVar[str] = "sweep"
    settings_model: ClassVar[type[ExperimentSettings]] = SweepSettings
    question: ClassVar[str] = (
        "What is the largest request rate (or concurrency) at which the provider still meets "
        "the SLOs, and what goodput does it deliver there?"
    )

    @property
    def _sw(self) -> SweepSettings:
        assert isinstance(self.settings, SweepSettings)
        return self.settings

    def levels(self) -> list[Level]:
        """The largest levels the sweep may run (they size the connection pool and workers)."""
        top = [Level(0, "concurrency", 1), Level(1, "concurrency", self._sw.throughput_concurrency)]
        if self._sw.mode == "rate":
            top.append(Level(2, "rate", 1.0))
        return top

    def validate_for(self, settings: ProviderSettings) -> None:
        """The throughput probe needs at least one request per stream."""
        n = self._s.max_requests()
        if n is not None and self._sw.throughput_concurrency > n:
            raise ConfigError(
                f"{self.name}: throughput_concurrency {self._sw.throughput_concurrency} with "
                f"only {n} requests per level; raise `requests` (or use duration_s)"
            )

    def next_level(self, done: list[SweepProbe]) -> _Next:
        """The level after the probes in `done`, or why the sweep stops there."""
        s = self._sw
        step = len(done)
        if step == 0:
            return _Next("baseline", Level(0, "concurrency", 1))
        if not done[0].met:
            return _Next(None, None, "the synchronous baseline already misses the SLOs")
        if step == 1:
            return _Next("throughput", Level(1, "concurrency", s.throughput_concurrency))
        low, high = self.interval(done)
        if low is None:
            return _Next(None, None, "the throughput probe completed no request")
        if s.mode == "concurrency" and done[1].met:
            return _Next(None, None, "even the throughput probe met the SLOs")
        if high is not None and s.mode == "concurrency" and high - low <= 1:
            return _Next(None, None, "the interval is one stream wide")
        if high is not None and s.mode == "rate" and high - low <= s.resolution * high:
            return _Next(None, None, f"the interval is within {s.resolution:.0%} of its top")
        if step >= s.max_probes:
            return _Next(None, None, f"max_probes ({s.max_probes}) reached")
        if high is None:  # rate mode, nothing has missed yet: look higher
            top = done[1].level.completed_rps or low
            target = top if step == 2 else low * _EXPAND
            return _Next("bisect", Level(step, "rate", _round_rate(max(target, low))))
        if s.mode == "concurrency":
            return _Next("bisect", Level(step, "concurrency", float((int(low) + int(high)) // 2)))
        return _Next("bisect", Level(step, "rate", _round_rate((low + high) / 2)))

    def interval(self, done: list[SweepProbe]) -> tuple[float | None, float | None]:
        """The interval [low, high) the knee lies in after `done` (None: not known yet; a
        rate sweep's top is unknown until a rate misses)."""
        if len(done) < 2:
            return None, None
        high: float | None
        if self._sw.mode == "concurrency":
            low, high = 1.0, float(self._sw.throughput_concurrency)
        else:
            if done[0].level.completed_rps is None or done[1].level.completed_rps is None:
                return None, None
            low, high = done[0].level.completed_rps, None
        for probe in done[2:]:
            if probe.met:
                low = max(low, probe.level.target)
            else:
                high = probe.level.target if high is None else min(high, probe.level.target)
        return low, high

    async def level_plans(
        self, provider: Provider, context: LevelContext
    ) -> AsyncGenerator[LoadLevelPlan, None]:
        """The sweep's levels one after another, reusing those a resumed run finished."""
        started = time.monotonic()
        done: list[SweepProbe] = []
        while True:
            nxt = self.next_level(done)
            if nxt.level is None or nxt.role is None:
                context.message(f"{self.name}: stopped: {nxt.stop}")
                return
            recs = self._pass_of(nxt.level, context.previous())
            if recs is None:
                if time.monotonic() - started >= self._sw.max_duration_s:
                    context.message(f"{self.name}: stopped: max_duration_s reached")
                    return
                yield self.level_plan(nxt.level, context)
                recs = self._pass_of(nxt.level, context.previous()) or []
            else:
                context.message(f"{self.name}: {nxt.level.title} already measured, skipped")
            done.append(self.probe(len(done), nxt.role, nxt.level, recs))

    def _pass_of(self, level: Level, records: list[RequestRecord]) -> list[RequestRecord] | None:
        """The records of the latest complete pass of `level` (None: none finished)."""
        recs = latest_pass(
            [r for r in records if r.tags.get("level") == level.label and not r.warmup]
        )
        n = self._s.max_requests()
        if not recs or any(r.stop_reason == "cancelled" for r in recs):
            return None
        return recs if n is None or len(recs) >= n else None

    def probe(
        self,
        step: int,
        role: Role,
        level: Level,
        records: list[RequestRecord],
        scraped: Sequence[ServerMetricsSample] = (),
    ) -> SweepProbe:
        """What one level says: its row (with the server's scraped metrics over it), and
        whether it met the SLOs without saturating."""
        row = level_figures(level, records, self._sw.arrival, scraped, slos=self.settings.slos())
        saturated = _saturation(level, row, records) if level.mode == "rate" else ""
        missed = [c.name for c in row.slo.checks if not c.passed] if row.slo else []
        why = "; ".join(
            [
                *([f"missed {', '.join(missed)}"] if missed else []),
                *([saturated] if saturated else []),
            ]
        )
        if not row.ok:
            why = "no request succeeded"
        return SweepProbe(
            step=step,
            role=role,
            level=row,
            met=not why,
            saturated=bool(saturated),
            why=why,
        )

    def analyze(self, provider_id: str, model: str, records: list[RequestRecord]) -> LabAnswer:
        """Retrace the sweep from its records: the probes, the knee and its interval."""
        s = self._sw
        scraped = self.server_metrics.get(provider_id, [])
        done: list[SweepProbe] = []
        while True:
            nxt = self.next_level(done)
            if nxt.level is None or nxt.role is None:
                stopped = nxt.stop
                break
            recs = self._pass_of(nxt.level, records)
            if recs is None:
                stopped = (
                    f"{nxt.level.title} was not measured (max_duration_s reached, or the run "
                    "was interrupted)"
                )
                break
            done.append(self.probe(len(done), nxt.role, nxt.level, recs, scraped))
        low, high = self.interval(done)
        knee_probe = self._knee_probe(done)
        figures = SweepFigures(
            mode=s.mode,
            probes=done,
            knee=None if knee_probe is None else _load_of(s.mode, knee_probe.level),
            knee_low=low if done and done[0].met else None,
            knee_high=high if done and done[0].met else None,
            knee_goodput_rps=(
                knee_probe.level.slo.goodput_rps
                if knee_probe is not None and knee_probe.level.slo
                else None
            ),
            throughput_rps=done[1].level.completed_rps if len(done) > 1 else None,
            stopped=stopped,
        )
        if not done or not any(p.level.ok for p in done):
            return self.answer(
                provider_id, model, "No level had a successful request.", figures, "failed"
            )
        text = _sweep_text(figures, s.mode)
        status: Literal["ok", "partial", "failed"] = "ok" if figures.knee is not None else "partial"
        return self.answer(provider_id, model, text, figures, status)

    def _knee_probe(self, done: list[SweepProbe]) -> SweepProbe | None:
        """The largest level that met the SLOs (the baseline when no bisection level did)."""
        if not done or not done[0].met:
            return None
        candidates = [p for p in done if p.met and p.role != "throughput"]
        if self._sw.mode == "concurrency" and len(done) > 1 and done[1].met:
            candidates.append(done[1])
        return max(candidates, key=lambda p: _load_of(self._sw.mode, p.level))


def _load_of(mode: str, row: LoadLevel) -> float:
    """Where a level sits on the sweep's axis (the baseline: its completed rate)."""
    if mode == "rate" and row.mode == "concurrency":
        return row.completed_rps or 0.0
    return row.target


def _round_rate(rate: float) -> float:
    """A bisection rate to three significant digits: stable, readable level labels."""
    digits = 2 - math.floor(math.log10(abs(rate))) if rate > 0 else 0
    return round(rate, digits)


def _saturation(level: Level, row: LoadLevel, records: list[RequestRecord]) -> str:
    """Why a rate level saturated, in words (empty: it did not)."""
    sent = row.achieved_rate_rps
    if sent is not None and sent < _COMPLETION_SHARE * level.target:
        return f"labkit sent only {sent:.2f} of {level.target:g} req/s"
    ok = sorted(
        (r for r in records if r.error is None and r.t_start_mono_ns is not None),
        key=lambda r: driver_start_ns(r) or 0,
    )
    ends = sorted(
        (driver_start_ns(r) or 0) + (r.client.e2e_ms or 0.0) * 1e6
        for r in ok
        if r.client.e2e_ms is not None
    )
    if len(ends) >= 3 and ends[-1] > ends[0]:
        completion_rps = (len(ends) - 1) / ((ends[-1] - ends[0]) / _NS)
        if completion_rps < _COMPLETION_SHARE * level.target:
            return f"completed {completion_rps:.2f} of {level.target:g} req/s"
    third = len(ok) // 3
    if third >= 2:
        early = _median([r.client.ttft_ms for r in ok[:third]])
        late = _median([r.client.ttft_ms for r in ok[-third:]])
        if (
            early is not None
            and late is not None
            and late > _QUEUE_GROWTH * early
            and late - early > _QUEUE_GROWTH_MIN_MS
        ):
            return f"TTFT grew from {early:.0f} to {late:.0f} ms through the level (queue growing)"
    return ""


def _median(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def _axis(mode: str) -> Callable[[float], str]:
    return (lambda v: f"{v:.0f} streams") if mode == "concurrency" else (lambda v: f"{v:.2f} req/s")


def _sweep_text(f: SweepFigures, mode: str) -> str:
    fmt = _axis(mode)
    base = f.probes[0]
    if not base.met:
        return (
            f"Even one request at a time misses the SLOs ({base.why}): no load meets them. "
            f"Sweep stopped: {f.stopped}."
        )
    parts = [
        f"The synchronous baseline completed {base.level.completed_rps or 0:.2f} req/s "
        "within the SLOs."
    ]
    if f.throughput_rps is not None:
        parts.append(
            f"The throughput probe ({f.probes[1].level.title}) completed "
            f"{f.throughput_rps:.2f} req/s."
        )
    if f.knee is not None:
        interval = (
            f" (the true knee lies in [{fmt(f.knee_low)}, {fmt(f.knee_high)}))"
            if f.knee_low is not None and f.knee_high is not None
            else ""
        )
        goodput = (
            f", goodput {f.knee_goodput_rps:.2f} req/s there"
            if f.knee_goodput_rps is not None
            else ""
        )
        parts.append(f"The knee: {fmt(f.knee)} meets every SLO{interval}{goodput}.")
    misses = [p for p in f.probes if p.role == "bisect" and not p.met]
    if misses:
        lowest = min(misses, key=lambda p: p.level.target)
        parts.append(f"The first level above it to fail, {lowest.level.title}: {lowest.why}.")
    parts.append(f"{len(f.probes)} levels; stopped: {f.stopped}.")
    return " ".join(parts)
