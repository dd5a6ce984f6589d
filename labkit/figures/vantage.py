"""`vantage`: the same requests from two or more vantage points, paired: whose time moved."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from labkit.figures.base import _Figures, register_figures
from labkit.figures.slo import _ExperimentFigures
from labkit.figures.stats import Mean

__all__ = ["VantageFigures", "VantageRow", "VantageShift"]


class VantageRow(_Figures):
    """One vantage point: its route and the mean shares of TTFT its requests saw."""

    name: str
    route: str = Field(description="`relay` (labkit's delaying relay) or `direct`.")
    delay_ms: float = Field(description="The round trip the route adds to TTFT, as configured.")
    jitter_ms: float = 0.0
    n: int = Field(description="Successful measured requests from this vantage.")
    ttft_ms: Mean | None = None
    provider_ms: Mean | None = Field(
        default=None, description="Provider queue + prefill (the provider's own account)."
    )
    network_ms: Mean | None = Field(
        default=None, description="Network and serving front end: TTFT − labkit's own − provider."
    )
    route_ms: Mean | None = Field(
        default=None,
        description="What the route truly added to TTFT by the relay's own account (the "
        "request up plus the first event down; tags `vantage_up_ms` + `vantage_down_ms`); "
        "None: a direct route, or no account.",
    )


class VantageShift(_Figures):
    """One vantage against the reference (the first), paired by trial: each share's mean
    difference with its 95% interval, and what the configured routes predict."""

    name: str
    reference: str
    pairs: int
    configured_ms: float = Field(description="This route's delay minus the reference's.")
    ttft_ms: Mean | None = None
    provider_ms: Mean | None = None
    network_ms: Mean | None = None
    route_ms: Mean | None = Field(
        default=None,
        description="The routes' truly added delay, this one's minus the reference's, by the "
        "relay's own account (a direct route adds 0).",
    )
    provider_unchanged: bool | None = Field(
        default=None, description="The provider share's difference interval holds 0."
    )
    network_matches: bool | None = Field(
        default=None,
        description="The network share's difference interval holds the configured difference.",
    )


@register_figures
class VantageFigures(_ExperimentFigures):
    """Per vantage its shares, and each vantage's paired shift against the first."""

    kind: Literal["vantage"] = "vantage"
    vantages: list[VantageRow] = Field(default_factory=list)
    shifts: list[VantageShift] = Field(default_factory=list)
    proven: bool | None = Field(
        default=None,
        description="Every shift kept the provider share (interval holds 0) and moved the "
        "network share by its configured delay (interval holds it); None: not derivable.",
    )
    not_derived: list[str] = Field(default_factory=list)
