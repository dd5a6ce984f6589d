"""`vantage` in the report: each vantage's provider and network shares of TTFT, as means
with their 95% intervals, side by side, so the provider's bar stays put while the
network's grows by the added delay."""

from __future__ import annotations

from typing import Any

from labkit.figures.stats import Mean
from labkit.figures.vantage import VantageFigures
from labkit.records import LabResults
from labkit.report.charts import _SCHEMA, _WIDTH, Chart, _by_kind
from labkit.report.kinds import KindReport, Picture, register_report

__all__ = ["vantage_chart"]

PROVIDER_SHARE = "provider (queue + prefill)"
NETWORK_SHARE = "network and front end"


def _point(row: str, share: str, m: Mean | None) -> dict[str, Any] | None:
    if m is None or m.value is None:
        return None
    return {
        "row": row,
        "share": share,
        "value": m.value,
        "lo": m.lo if m.lo is not None else m.value,
        "hi": m.hi if m.hi is not None else m.value,
        "n": m.n,
    }


def vantage_chart(lab: LabResults | None) -> Chart | None:
    """Per provider and vantage, the two shares' means as bars, their intervals as rules."""
    values: list[dict[str, Any]] = []
    for ans, fig in _by_kind(lab, VantageFigures):
        for v in fig.vantages:
            row = f"{ans.provider} · {v.name} (+{v.delay_ms:g} ms)"
            for share, m in ((PROVIDER_SHARE, v.provider_ms), (NETWORK_SHARE, v.network_ms)):
                point = _point(row, share, m)
                if point is not None:
                    values.append(point)
    if not values:
        return None
    y = {"field": "row", "type": "nominal", "title": None, "sort": None}
    offset = {"field": "share", "type": "nominal", "sort": [PROVIDER_SHARE, NETWORK_SHARE]}
    colour = {
        "field": "share",
        "type": "nominal",
        "title": "share of TTFT",
        "scale": {"domain": [PROVIDER_SHARE, NETWORK_SHARE], "range": ["#4c78a8", "#f58518"]},
    }
    tooltip = [
        {"field": "row", "title": "vantage"},
        {"field": "share"},
        {"field": "value", "title": "mean ms", "format": ".2f"},
        {"field": "lo", "title": "95% CI low", "format": ".2f"},
        {"field": "hi", "title": "95% CI high", "format": ".2f"},
        {"field": "n"},
    ]
    spec: dict[str, Any] = {
        "$schema": _SCHEMA,
        "title": "Whose time, from each vantage: mean share of TTFT [95% CI]",
        "data": {"values": values},
        "width": _WIDTH,
        "layer": [
            {
                "mark": {"type": "bar", "opacity": 0.8},
                "encoding": {
                    "y": y,
                    "yOffset": offset,
                    "x": {"field": "value", "type": "quantitative", "title": "ms (mean)"},
                    "color": colour,
                    "tooltip": tooltip,
                },
            },
            {
                "mark": {"type": "rule", "color": "black"},
                "encoding": {
                    "y": y,
                    "yOffset": offset,
                    "x": {"field": "lo", "type": "quantitative"},
                    "x2": {"field": "hi"},
                    "tooltip": tooltip,
                },
            },
        ],
    }
    return Chart(
        "vantage",
        "Whose time, proven from two places",
        spec,
        "Each vantage's mean provider share of TTFT (queue + prefill, the provider's own "
        "account) and network and front-end share, with 95% intervals (black): the same "
        "requests, paired by trial; the provider's bar should stay put while the network's "
        "grows by the route's added delay.",
    )


def _pictures(lab: LabResults | None) -> list[Picture]:
    return [vantage_chart(lab) or "vantage: no shares to draw."]


register_report(KindReport("vantage", pictures=_pictures))
