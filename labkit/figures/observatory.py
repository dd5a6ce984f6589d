"""The provider observatory's figures: what a watch's store says over days.

The hand-off between the observatory's parts: `labkit.analysis.observatory` computes these
from the store's probes frame, the dashboard and the terminal render them, and nothing
recomputes them. Every duration is float milliseconds, every interval 95 %.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import Field

from labkit.figures.base import _Figures
from labkit.figures.stats import Estimate, Proportion, Quantile

__all__ = [
    "ChangeEvent",
    "Component",
    "CostFigures",
    "ObservatoryFigures",
    "RollupCell",
    "SameModelVerdict",
    "SeriesPoint",
    "SplitCell",
    "Window",
]

Window = Literal["hour_of_day", "72h", "14d"]

Component = Literal["network_frontend", "queue", "processing", "decode", "total"]


class RollupCell(_Figures):
    """One metric of one provider × model over one window (or one hour of the day)."""

    provider: str
    model: str
    metric: str = Field(description="A probes-frame column, e.g. client.ttft_ms.")
    window: Window
    hour: int | None = Field(default=None, description="0–23 (UTC) for hour_of_day; else None.")
    start: datetime | None = Field(default=None, description="The window's first round (UTC).")
    end: datetime | None = Field(default=None, description="The window's last round (UTC).")
    median: Quantile
    p90: Quantile


class SplitCell(_Figures):
    """A provider's mean time split into parts over one window or hour (means add up).

    A part is None where the provider does not say it ("not separable"): `separable` lists
    which parts the provider's own fields gave.
    """

    provider: str
    model: str
    window: Window
    hour: int | None = None
    n: int
    total_ms: Estimate = Field(description="The mean TTFT the parts add up to.")
    network_frontend_ms: Estimate | None = None
    queue_ms: Estimate | None = None
    processing_ms: Estimate | None = None
    decode_ms_per_token: Estimate | None = None
    separable: list[Component] = Field(default_factory=list)


class ChangeEvent(_Figures):
    """A change the watch found: a shift in a metric (named by the part that moved), or a
    provider's fingerprint or server build that changed."""

    provider: str
    model: str
    kind: Literal["shift", "fingerprint", "build"]
    metric: str | None = Field(
        default=None, description="For a shift: the metric, e.g. client.ttft_ms."
    )
    statistic: Literal["p50", "p90", "mean"] | None = None
    component: Component | None = Field(
        default=None, description="For a shift: the part of the time that moved."
    )
    at: datetime = Field(description="When it changed (UTC): the estimated change point.")
    at_lo: datetime | None = None
    at_hi: datetime | None = None
    before: float | None = None
    after: float | None = None
    delta: Estimate | None = Field(default=None, description="after − before, with its interval.")
    q_value: float | None = Field(
        default=None, description="The test's p-value after false-discovery control (BH)."
    )
    old_value: str | None = Field(default=None, description="For fingerprint/build: before.")
    new_value: str | None = Field(default=None, description="For fingerprint/build: after.")
    sentence: str = Field(description="The finding in one sentence, as the page says it.")


class CostFigures(_Figures):
    """What a provider × model cost under the config's dated price table (currency units)."""

    provider: str
    model: str
    currency: str = "USD"
    price_date: str = Field(description="The price table entry's date (ISO).")
    per_request: Estimate
    per_session: Estimate | None = None
    per_successful_answer: Estimate | None = None
    goodput_per_dollar: Estimate | None = Field(
        default=None, description="Successful answers (or requests within the SLO) per unit."
    )
    requests: int
    total: float


class SameModelVerdict(_Figures):
    """Whether one provider serves the same model as the reference endpoint for a name."""

    model: str
    provider: str
    reference: str
    verdict: Literal[
        "consistent",
        "differs: tokenizer",
        "differs: distributions",
        "differs: behaviour",
        "undecided",
    ]
    confidence: float = Field(description="1 − the deciding test's p-value (or its power).")
    reasons: list[str] = Field(default_factory=list)
    token_counts_equal: Proportion | None = None
    distribution_p: float | None = None
    stop_reason_p: float | None = None


class SeriesPoint(_Figures):
    """A metric's median over one stretch of time (a day, or an hour) for one provider ×
    model: the time series the dashboard draws each change on."""

    provider: str
    model: str
    metric: str = Field(description="A probes-frame column, e.g. client.ttft_ms.")
    start: datetime = Field(description="The stretch's first round (UTC).")
    end: datetime = Field(description="The stretch's last round (UTC).")
    median: Quantile


class ObservatoryFigures(_Figures):
    """Everything the dashboard shows, computed once from a store."""

    store: str = Field(description="The store's URL, secrets removed.")
    computed_at: datetime
    first_round: datetime | None = None
    last_round: datetime | None = None
    rounds: int = 0
    rollups: list[RollupCell] = Field(default_factory=list)
    splits: list[SplitCell] = Field(default_factory=list)
    changes: list[ChangeEvent] = Field(default_factory=list)
    costs: list[CostFigures] = Field(default_factory=list)
    verdicts: list[SameModelVerdict] = Field(default_factory=list)
    series: list[SeriesPoint] = Field(
        default_factory=list,
        description="Each changed metric's median per stretch of time (the dashboard draws "
        "changes on it); empty: the change is drawn as its before and after levels.",
    )
