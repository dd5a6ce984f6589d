"""`sweep`: the largest request rate (or concurrency) at which a provider meets the SLOs.

Load levels (`labkit.experiments.load`), each chosen from the ones before it: a synchronous
baseline, a closed-loop throughput probe, then open-loop rates (or stream counts) bisected
between the largest that passed and the smallest that failed, looking ×`_EXPAND` higher while
nothing failed and lower once a rate at or under the baseline's failed (one request at a time
is no open-loop pass). Verdicts are decided at 95% (`labkit.analysis.slo`), an undecided level
runs again twice as long; a rate that cannot be held saturates. Every choice is computed from
the records, so `analyze` retraces it and a resumed run reuses finished levels. The rules in
full: docs/experiments.md ("The sweep") and docs/measurement.md (the sweep's verdicts).
"""

from __future__ import annotations

import math
import time
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass
from typing import ClassVar, Literal

from pydantic import Field, PositiveFloat, PositiveInt, model_validator

from labkit.analysis.levels import Level, level_figures
from labkit.analysis.selection import latest_pass
from labkit.analysis.stats import median
from labkit.clocksync import driver_start_ns
from labkit.errors import ConfigError
from labkit.experiments.base import ExperimentSettings, register_experiment
from labkit.experiments.load import LoadExperiment, LoadLevelPlan, LoadSettings
from labkit.experiments.paced import LevelContext
from labkit.figures import LoadLevel, SLOReport, Verdict
from labkit.figures.sweep import SweepFigures, SweepProbe
from labkit.providers.base import Provider, ProviderSettings
from labkit.records import LabAnswer, RequestRecord
from labkit.server_metrics import ServerMetricsSample
from labkit.wording.sweep import sweep_answer

__all__ = ["SweepExperiment", "SweepSettings"]

_NS = 1_000_000_000
# A rate level saturates when requests complete below this share of the target rate...
_COMPLETION_SHARE = 0.9
# ... or when the TTFT of its last third exceeds its first third's by this factor and margin.
_QUEUE_GROWTH = 2.0
_QUEUE_GROWTH_MIN_MS = 50.0
# ... or when TTFT rises steadily through it: a slope with p below this, adding at least
# this many ms (and a quarter of its early TTFT) over the level, from this many requests.
_TREND_P = 0.001
_TREND_MIN_MS = 10.0
_TREND_MIN_REQUESTS = 12
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
    max_requests_per_level: PositiveInt = Field(
        default=200,
        description="A level still undecided runs again twice as long, up to this many "
        "requests; past it, the level stays undecided.",
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
        if self.requests is not None and self.max_requests_per_level < self.requests:
            raise ValueError("max_requests_per_level must be at least `requests`")
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
        if done[0].verdict == "fail":
            return _Next(None, None, "the synchronous baseline already misses the SLOs")
        if done[0].verdict == "undecided":
            return _Next(
                None,
                None,
                f"the synchronous baseline stayed undecided after {done[0].level.requests} "
                "requests (raise max_requests_per_level)",
            )
        if step == 1:
            return _Next("throughput", Level(1, "concurrency", s.throughput_concurrency))
        if s.mode == "rate" and None in (done[0].level.completed_rps, done[1].level.completed_rps):
            return _Next(None, None, "the throughput probe completed no request")
        low, high = self.interval(done)
        if s.mode == "concurrency" and done[1].met:
            return _Next(None, None, "even the throughput probe met the SLOs")
        if low is not None and high is not None:
            if s.mode == "concurrency" and high - low <= 1:
                return _Next(None, None, "the interval is one stream wide")
            if s.mode == "rate" and high - low <= s.resolution * high:
                return _Next(None, None, f"the interval is within {s.resolution:.0%} of its top")
        if step >= s.max_probes:
            return _Next(None, None, f"max_probes ({s.max_probes}) reached")
        undecided = [p.level.target for p in done[2:] if p.verdict == "undecided"]
        if high is None:  # rate mode, nothing has failed yet: look higher
            assert low is not None
            top = done[1].level.completed_rps or low
            target = top if step == 2 else max([low, *undecided]) * _EXPAND
            return _Next("bisect", Level(step, "rate", _round_rate(max(target, low))))
        if low is None:  # rate mode, the baseline's own rate missed in open loop: look lower
            target = min([high, *undecided]) / _EXPAND
            return _Next("bisect", Level(step, "rate", _round_rate(target)))
        if s.mode == "concurrency":
            nxt = Level(step, "concurrency", float((int(low) + int(high)) // 2))
        else:
            nxt = Level(step, "rate", _round_rate((low + high) / 2))
        if nxt.target in undecided:
            why = f"{nxt.title}, the interval's middle, stayed undecided: the knee is near it"
            return _Next(None, None, why)
        return _Next("bisect", nxt)

    def interval(self, done: list[SweepProbe]) -> tuple[float | None, float | None]:
        """The interval [low, high) the knee lies in after `done`: the largest load that
        passed, the smallest that failed (None: not known yet; a rate sweep's top is unknown
        until a rate fails). Undecided levels move neither. A rate sweep's bottom starts at
        the baseline's completed rate (one request at a time met the SLOs there); once an
        open-loop rate at or under it fails, that closed-loop pass no longer bounds an
        open-loop knee, and the bottom is the largest rate that passed (None: none yet)."""
        if len(done) < 2:
            return None, None
        low: float | None
        high: float | None
        if self._sw.mode == "concurrency":
            low, high = 1.0, float(self._sw.throughput_concurrency)
        else:
            if done[0].level.completed_rps is None or done[1].level.completed_rps is None:
                return None, None
            low = None if self.baseline_refuted(done) else done[0].level.completed_rps
            high = None
        for probe in done[2:]:
            if probe.verdict == "pass":
                low = probe.level.target if low is None else max(low, probe.level.target)
            elif probe.verdict == "fail":
                high = probe.level.target if high is None else min(high, probe.level.target)
        return low, high

    def baseline_refuted(self, done: Sequence[SweepProbe]) -> bool:
        """Whether an open-loop rate at or under the synchronous baseline's completed rate
        failed: arrivals that do not wait for the reply before them queued where one request
        at a time did not, so the baseline's rate is no knee (rate mode only)."""
        if self._sw.mode != "rate" or len(done) < 2:
            return False
        base = done[0].level.completed_rps
        return base is not None and any(
            p.verdict == "fail" and p.level.target <= base for p in done[2:]
        )

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
            # A level a process died in is run again, whatever its count (`analyze`).
            partial = (provider.id, nxt.level.label) in self.partial_levels
            recs = None if partial else self._pass_of(nxt.level, context.previous())
            if recs is None:
                if time.monotonic() - started >= self._sw.max_duration_s:
                    context.message(f"{self.name}: stopped: max_duration_s reached")
                    return
                yield self.level_plan(nxt.level, context)
                recs = self._pass_of(nxt.level, context.previous()) or []
            else:
                context.message(f"{self.name}: {nxt.level.title} already measured, skipped")
            while (more := self.longer_pass(nxt.role, nxt.level, recs, started)) is not None:
                context.message(
                    f"{self.name}: {nxt.level.title} undecided after {len(recs)} requests; "
                    f"again with {more}"
                )
                yield self.level_plan(nxt.level, context, requests=more)
                longer = self._pass_of(nxt.level, context.previous())
                if longer is None or len(longer) <= len(recs):
                    break
                recs = longer
            done.append(self.probe(len(done), nxt.role, nxt.level, recs))

    def longer_pass(
        self, role: Role, level: Level, records: list[RequestRecord], started: float
    ) -> int | None:
        """The requests of `level`'s next pass when its verdict is still undecided: twice
        the last pass's, within `max_requests_per_level` and `max_duration_s` (None: decided,
        or bounded). A rate sweep's throughput probe only measures the ceiling: never."""
        s = self._sw
        if not records or (role == "throughput" and s.mode == "rate"):
            return None
        if self.probe(0, role, level, records).verdict != "undecided":
            return None
        more = min(2 * len(records), s.max_requests_per_level)
        if more <= len(records) or time.monotonic() - started >= s.max_duration_s:
            return None
        return more

    def _pass_of(self, level: Level, records: list[RequestRecord]) -> list[RequestRecord] | None:
        """The records of the latest complete pass of `level` (None: none finished); a pass
        cut short (interrupted) leaves the one before it standing."""
        n = self._s.max_requests()
        passes: dict[str, list[RequestRecord]] = {}
        for r in records:
            if r.tags.get("level") == level.label and not r.warmup:
                passes.setdefault(str(r.tags.get("level_run", "")), []).append(r)
        complete = [
            recs
            for recs in passes.values()
            if not any(r.stop_reason == "cancelled" for r in recs) and (n is None or len(recs) >= n)
        ]
        return latest_pass([r for recs in complete for r in recs]) or None

    def _cost_of(self, level: Level, records: list[RequestRecord]) -> tuple[int, int]:
        """Passes of `level` and the measured requests they sent (what the level cost)."""
        recs = [r for r in records if r.tags.get("level") == level.label and not r.warmup]
        return len({str(r.tags.get("level_run", "")) for r in recs}), len(recs)

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
        slo_verdict = row.slo.verdict if row.slo else "pass"
        verdict: Verdict = "fail" if saturated or not row.ok else slo_verdict
        why = "; ".join(
            [
                *([_missed(row.slo)] if row.slo and row.slo.verdict != "pass" else []),
                *([saturated] if saturated else []),
            ]
        )
        if not row.ok:
            why = "no request succeeded"
        return SweepProbe(
            step=step,
            role=role,
            level=row,
            verdict=verdict,
            met=verdict == "pass",
            saturated=bool(saturated),
            requests_sent=len(records),
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
            died = self.partial_levels.get((provider_id, nxt.level.label))
            # A pass a process died in is no probe, even with its count full (a Ray actor's
            # in-flight requests are records of kind `lost`, which would read as failures).
            recs = None if died is not None else self._pass_of(nxt.level, records)
            if recs is None:
                stopped = (
                    f"{nxt.level.title} was not measured (max_duration_s reached, or the run "
                    "was interrupted)"
                    if died is None
                    else f"{nxt.level.title} is partial ({died} died mid-level; labkit run "
                    "--resume runs it again)"
                )
                break
            passes, sent = self._cost_of(nxt.level, records)
            probe = self.probe(len(done), nxt.role, nxt.level, recs, scraped)
            done.append(probe.model_copy(update={"passes": passes, "requests_sent": sent}))
        low, high = self.interval(done)
        refuted = self.baseline_refuted(done)
        knee_probe = self._knee_probe(done)
        knee_slo = knee_probe.level.slo if knee_probe is not None else None
        figures = SweepFigures(
            mode=s.mode,
            probes=done,
            knee=None if knee_probe is None else _load_of(s.mode, knee_probe.level),
            knee_low=low if knee_probe is not None else None,
            knee_high=high if knee_probe is not None or refuted else None,
            knee_goodput_rps=knee_slo.goodput_rps if knee_slo else None,
            knee_goodput_low_rps=knee_slo.goodput_low_rps if knee_slo else None,
            knee_goodput_high_rps=knee_slo.goodput_high_rps if knee_slo else None,
            baseline_refuted=refuted,
            throughput_rps=done[1].level.completed_rps if len(done) > 1 else None,
            stopped=stopped,
        )
        if not done:  # not "no successful request": a level cut short may have had some
            return self.answer(
                provider_id, model, f"No level was measured: {stopped}.", figures, "failed"
            )
        if not any(p.level.ok for p in done):
            return self.answer(
                provider_id, model, "No level had a successful request.", figures, "failed"
            )
        text = sweep_answer(figures)
        status: Literal["ok", "partial", "failed"] = "ok" if figures.knee is not None else "partial"
        return self.answer(provider_id, model, text, figures, status)

    def _knee_probe(self, done: list[SweepProbe]) -> SweepProbe | None:
        """The largest level that passed (the baseline when no bisection level did, unless
        an open-loop rate at or under its rate failed; None: no level is left)."""
        if not done or not done[0].met:
            return None
        refuted = self.baseline_refuted(done)
        candidates = [
            p
            for p in done
            if p.met and p.role != "throughput" and not (refuted and p.role == "baseline")
        ]
        if self._sw.mode == "concurrency" and len(done) > 1 and done[1].met:
            candidates.append(done[1])
        if not candidates:
            return None
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
        return _ttft_trend(ok, early)
    return ""


def _ttft_trend(ok: list[RequestRecord], early: float | None) -> str:
    """A queue growing slowly (a rate a little above capacity): TTFT rising with the
    request's place in the level, by a least-squares slope clearly above 0 (p < 0.001) that
    adds at least `_TREND_MIN_MS` and a quarter of the early TTFT over the level."""
    from scipy.stats import linregress

    points = [(i, r.client.ttft_ms) for i, r in enumerate(ok) if r.client.ttft_ms is not None]
    if len(points) < _TREND_MIN_REQUESTS or early is None:
        return ""
    trend = linregress([i for i, _ in points], [t for _, t in points])
    rise = float(trend.slope) * (points[-1][0] - points[0][0])
    if trend.pvalue < _TREND_P and rise >= max(_TREND_MIN_MS, 0.25 * early):
        return f"TTFT rose {rise:.0f} ms through the level (queue growing, p = {trend.pvalue:.1g})"
    return ""


def _missed(report: SLOReport) -> str:
    """`missed ttft_ms_p90`, or `undecided after 200 requests: ttft_ms_p90 met by 176
    (95% CI 83–92%)`."""
    failed = [c.name for c in report.checks if c.verdict == "fail"]
    if failed:
        return f"missed {', '.join(failed)}"
    unsure = [
        f"{c.name} met by {c.met}"
        + (
            f" (95% CI {c.share.lo * 100:.0f}–{c.share.hi * 100:.0f}%)"
            if c.share and c.share.lo is not None and c.share.hi is not None
            else ""
        )
        for c in report.checks
        if c.verdict == "undecided"
    ]
    return f"undecided after {report.requests} requests: {', '.join(unsure)}"


def _median(values: list[float | None]) -> float | None:
    return median(v for v in values if v is not None).value
