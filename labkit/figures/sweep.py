"""`sweep`: the load levels a sweep ran in order, and the knee they bracket."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from labkit.figures.base import _Figures, register_figures
from labkit.figures.levels import LoadLevel, RunsLevels
from labkit.figures.slo import Verdict, _ExperimentFigures

__all__ = ["SweepFigures", "SweepProbe"]


class SweepProbe(_Figures):
    """One load level a sweep ran, and what it decided."""

    step: int = Field(description="0: the synchronous baseline, 1: the throughput probe, ...")
    role: Literal["baseline", "throughput", "bisect"]
    level: LoadLevel = Field(description="The level's judged (latest, longest) pass.")
    verdict: Verdict = Field(
        default="undecided",
        description="`pass`: every SLO held at 95% without saturating; `fail`: an SLO "
        "failed at 95%, the level saturated or no request succeeded; `undecided`: still "
        "undecided at `max_requests_per_level` (or when the sweep's time ran out).",
    )
    met: bool = Field(description="verdict == pass.")
    saturated: bool = False
    passes: int = Field(default=1, description="Passes run: each undecided one ran longer.")
    requests_sent: int = Field(
        default=0, description="Measured requests over all its passes (the level's cost)."
    )
    why: str = Field(default="", description="Why it did not pass, in words (empty when met).")

    @model_validator(mode="before")
    @classmethod
    def _verdict_of_met(cls, data: Any) -> Any:
        """A probe written before verdicts: `met` was its point verdict."""
        if isinstance(data, dict) and "verdict" not in data and "met" in data:
            return {**data, "verdict": "pass" if data["met"] else "fail"}
        return data


@register_figures
class SweepFigures(_ExperimentFigures, RunsLevels):
    """`sweep`: the probes in the order they ran, and the knee they bracket."""

    kind: Literal["sweep"] = "sweep"
    mode: Literal["concurrency", "rate"]
    probes: list[SweepProbe] = Field(default_factory=list)
    knee: float | None = Field(
        default=None, description="The largest rate (or concurrency) shown to meet the SLOs."
    )
    knee_low: float | None = Field(
        default=None,
        description="The knee lies in [low, high): low, the largest load that passed; high, "
        "the smallest that failed (None: none failed). Undecided levels lie inside.",
    )
    knee_high: float | None = None
    knee_goodput_rps: float | None = None
    knee_goodput_low_rps: float | None = Field(
        default=None, description="The knee level's goodput interval (SLOReport)."
    )
    knee_goodput_high_rps: float | None = None
    baseline_refuted: bool = Field(
        default=False,
        description="Rate mode: an open-loop rate at or under the synchronous baseline's "
        "completed rate failed, so the baseline's rate is no knee (the knee lies below it).",
    )
    throughput_rps: float | None = Field(
        default=None, description="Completed requests/s of the throughput probe."
    )
    stopped: str = Field(default="", description="Why the sweep stopped, in words.")

    def levels_run(self) -> list[LoadLevel]:
        """Each probe's level, in the order they ran."""
        return [p.level for p in self.probes]

    def levels_title(self) -> str:
        """The knee and why the sweep stopped."""
        knee = "no knee" if self.knee is None else f"knee {self.knee:.3g}"
        return f" · {knee} (stopped: {self.stopped})"
