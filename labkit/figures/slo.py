"""SLOs judged over a set of requests (any experiment), and the base of an experiment's
figures, which carries them."""

from __future__ import annotations

from typing import Any, Literal, TypeAlias

from pydantic import Field, model_validator

from labkit.figures.base import _Figures
from labkit.figures.stats import Proportion, Quantile

__all__ = ["SLOCheck", "SLOReport", "Verdict"]


Verdict: TypeAlias = Literal["pass", "fail", "undecided"]
"""An SLO's verdict at 95%: the requests show it held, show it did not, or cannot tell."""


def _verdict_of_passed(data: Any) -> Any:
    """A check or report written before verdicts (`passed`, `fraction`, `observed_ms`): its
    point verdict as `pass`/`fail`; the intervals it never had stay None."""
    if not isinstance(data, dict) or "passed" not in data:
        return data
    old = {k: v for k, v in data.items() if k not in ("passed", "fraction", "observed_ms")}
    old.setdefault("verdict", "pass" if data["passed"] else "fail")
    return old


class SLOCheck(_Figures):
    """One SLO (`ttft_ms_p90: 500`) judged over a set of requests.

    A request meets it when it succeeded and its `metric` is at most `bound_ms`. The set
    passes when the share of its requests that met it is at least `percentile`% with 95%
    confidence (the share's exact interval lies at or above it), fails when the interval
    lies below it, and is undecided otherwise: too few requests to tell. A failed request
    counts as missing every SLO.
    """

    name: str = Field(description="The SLO as configured: `ttft_ms_p90`.")
    metric: str = Field(description="The `client.*` field judged: `ttft_ms`.")
    percentile: float = Field(description="The share (%) of requests that must meet it.")
    bound_ms: float
    requests: int = Field(description="Requests judged (measured ones, failed included).")
    met: int = Field(description="Requests that met the bound.")
    share: Proportion | None = Field(
        default=None, description="met of requests, with its exact 95% interval."
    )
    observed: Quantile | None = Field(
        default=None, description="The metric's `percentile`-th percentile over ok requests."
    )
    verdict: Verdict = "undecided"

    _migrate = model_validator(mode="before")(_verdict_of_passed)

    @property
    def passed(self) -> bool:
        """Whether the requests show, at 95%, that the SLO held."""
        return self.verdict == "pass"


class SLOReport(_Figures):
    """Every configured SLO over one set of requests, and the goodput they allow."""

    checks: list[SLOCheck] = Field(default_factory=list)
    requests: int = 0
    good: int = Field(default=0, description="Requests that met every SLO.")
    good_share: Proportion | None = Field(
        default=None, description="good of requests, with its exact 95% interval."
    )
    goodput_rps: float | None = Field(
        default=None, description="Requests per second that met every SLO (good / span)."
    )
    goodput_low_rps: float | None = Field(
        default=None,
        description="The goodput's 95% interval: good_share's bounds × requests / span.",
    )
    goodput_high_rps: float | None = None
    verdict: Verdict = Field(
        default="undecided",
        description="`pass`: every check passed; `fail`: one failed; else `undecided`.",
    )

    _migrate = model_validator(mode="before")(_verdict_of_passed)

    @property
    def passed(self) -> bool:
        """Whether every check passed at 95%."""
        return self.verdict == "pass"


class _ExperimentFigures(_Figures):
    slo: SLOReport | None = Field(
        default=None, description="The experiment's SLOs over its measured requests."
    )
