"""The statistics every kind's figures use: a quantile with its interval, a share, a
metric's percentiles, and the fits of a latency against prompt tokens
(`labkit.analysis.stats` computes them)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import Field

from labkit.figures.base import _Figures

__all__ = [
    "Estimate",
    "LinearFit",
    "Mean",
    "Percentiles",
    "PromptCost",
    "Proportion",
    "Quantile",
]


class Quantile(_Figures):
    """One quantile of a metric over n requests, with its 95% distribution-free interval.

    The interval is two order statistics of the sample (`lo`, `hi` are sample values) that
    hold the true quantile with probability at least `confidence`, whatever the metric's
    distribution; below `min_n` requests no such pair exists and both are None.
    """

    q: float = Field(description="The quantile as a fraction: 0.5, 0.9, 0.99.")
    value: float | None = Field(
        default=None, description="Point estimate (linear interpolation); None when n == 0."
    )
    lo: float | None = Field(default=None, description="Interval's lower bound (None: n < min_n).")
    hi: float | None = Field(default=None, description="Interval's upper bound (None: n < min_n).")
    n: int = Field(description="Values the quantile is over.")
    confidence: float = 0.95
    min_n: int = Field(
        description="The least n for which a two-sided interval at `confidence` exists "
        "(median 6, p90 29, p99 299 at 95%)."
    )

    @property
    def supported(self) -> bool:
        """Whether n is enough for an interval (`lo` and `hi` are set)."""
        return self.n >= self.min_n


class Mean(_Figures):
    """The mean of a metric over n requests, with its 95% t-interval (Student's t on the
    sample's standard error). Means add: the parts of a split of TTFT, each a `Mean` over the
    same requests, sum exactly to the TTFT's `Mean` — which medians do not."""

    value: float | None = Field(default=None, description="The mean; None when n == 0.")
    lo: float | None = Field(default=None, description="Interval's lower bound (None: n < 2).")
    hi: float | None = Field(default=None, description="Interval's upper bound (None: n < 2).")
    n: int = Field(description="Values the mean is over.")
    confidence: float = 0.95


class Proportion(_Figures):
    """A share k/n with its exact (Clopper–Pearson) interval at `confidence`."""

    k: int
    n: int
    value: float | None = Field(default=None, description="k / n; None when n == 0.")
    lo: float | None = None
    hi: float | None = None
    confidence: float = 0.95


class Percentiles(_Figures):
    """p50, p90 and p99 of one metric over a group's measured requests, with intervals."""

    p50: Quantile
    p90: Quantile
    p99: Quantile


class LinearFit(_Figures):
    """A least-squares line y = ms_per_token · tokens + intercept_ms."""

    ms_per_token: float
    intercept_ms: float
    r2: float
    n: int = Field(description="Points fitted.")
    ms_per_token_lo: float | None = Field(
        default=None, description="The slope's 95% confidence interval, low end (n ≥ 3)."
    )
    ms_per_token_hi: float | None = Field(
        default=None, description="The slope's 95% confidence interval, high end (n ≥ 3)."
    )

    @classmethod
    def least_squares(cls, xs: Sequence[float], ys: Sequence[float]) -> LinearFit | None:
        """Ordinary least squares over the points (scipy's `linregress`), with r²; None
        under 2 distinct x.

        The one straight line labkit draws: the experiments' figures and the report's plots
        (for a run whose lab.json has none) both take it from here.
        """
        if len(xs) < 2 or len(set(xs)) < 2:
            return None
        from scipy.stats import linregress, t  # scipy.stats is slow to import: only here

        line = linregress(xs, ys)
        r = float(line.rvalue)
        lo = hi = None
        if len(xs) >= 3 and line.stderr == line.stderr:  # a slope's interval needs 1 dof
            half = float(t.ppf(0.975, len(xs) - 2)) * float(line.stderr)
            lo, hi = float(line.slope) - half, float(line.slope) + half
        return cls(
            ms_per_token=float(line.slope),
            intercept_ms=float(line.intercept),
            r2=r * r if r == r else 1.0,  # NaN: every y the same, which the line fits exactly
            n=len(xs),
            ms_per_token_lo=lo,
            ms_per_token_hi=hi,
        )


class Estimate(_Figures):
    """A fitted quantity with its 95% confidence interval."""

    value: float
    lo: float | None = None
    hi: float | None = None


class PromptCost(_Figures):
    """A latency against prompt tokens, the model chosen by the data.

    A straight line (`linear`), or a line with a quadratic term (`quadratic`: prefill per
    token grows with the prompt, as attention over it does) when an F-test of that term
    against the line gives p < 0.05. Ordinary least squares (statsmodels); every interval is
    95%. The marginal cost is the slope of the chosen model at the shortest and the longest
    prompt; the fixed part (`intercept_ms`) is a fitted constant, stated only where its
    interval lies above 0 (`intercept_reading`).
    """

    model: Literal["linear", "quadratic"]
    n: int = Field(description="Requests fitted.")
    min_tokens: float
    max_tokens: float
    intercept_ms: Estimate
    ms_per_token: Estimate = Field(description="The linear coefficient.")
    ms_per_token_squared: Estimate | None = Field(
        default=None, description="The quadratic coefficient (ms per token²); None: linear."
    )
    curvature_p: float | None = Field(
        default=None,
        description="F-test p-value of the quadratic term over the line (None: fewer than 3 "
        "prompt lengths or 4 requests, no test).",
    )
    r2: float
    marginal_at_min: Estimate = Field(description="ms per prompt token at min_tokens.")
    marginal_at_max: Estimate = Field(description="ms per prompt token at max_tokens.")

    @property
    def intercept_reading(self) -> Literal["positive", "zero", "negative"]:
        """`zero`: the fixed part's interval holds 0 (not distinguishable from it);
        `negative`: it lies below 0, which is not physical (the model is wrong here)."""
        lo, hi = self.intercept_ms.lo, self.intercept_ms.hi
        if lo is not None and lo > 0:
            return "positive"
        if hi is not None and hi < 0:
            return "negative"
        return "zero"
