"""The pictures beside the report's tables, as Vega-Lite specs (`labkit.report.charts.Chart`).

Requests' distributions and the two clocks plot each request's own values (every point is
one request, nothing aggregated); the load curves read `lab.json`'s level figures; the
server's queue plots its scrapes of /metrics as they were taken. A chart with nothing to
draw is None.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from labkit.report.charts import _SCHEMA, Chart
from labkit.report.load import ensure_columns
from labkit.server_metrics import ServerMetricsSample

__all__ = [
    "PICKED",
    "ServerPoints",
    "client_vs_server_chart",
    "client_vs_server_points",
    "distribution_chart",
    "distribution_values",
    "facet_spec",
    "legend_pick",
    "level_axis_title",
    "measured",
    "request_distribution_values",
    "request_distributions",
    "server_queue_chart",
]

_DISTRIBUTIONS = [
    ("client.ttft_ms", "TTFT (ms)"),
    ("client.decode_ms_per_token", "decode (ms/token)"),
    ("client.e2e_ms", "e2e (ms)"),
]
_LOG = {"type": "log", "nice": False}
_LOG_AXIS = {"labelOverlap": "greedy", "labelSeparation": 6, "tickCount": 6}
# Past this many requests a series shows every k-th one (by rank): each point is still one
# request. A distribution of 100 evenly spaced ranks reads to 1% of its share; a scatter
# keeps more, its points are not ordered by one value.
_MAX_POINTS = 200
_MAX_RANKS = 100


def measured(df: pd.DataFrame) -> pd.DataFrame:
    """The successful, non-warm-up requests of a records frame."""
    return df[df["ok"].astype(bool) & ~df["warmup"].astype(bool)] if len(df) else df


def facet_spec(
    values: list[dict[str, Any]], facet: str, order: list[str], layer: list[dict[str, Any]]
) -> dict[str, Any]:
    """Panels side by side, one per value of `facet` (in `order`), each with its own axes,
    each drawing `layer`."""
    return {
        "$schema": _SCHEMA,
        "data": {"values": values},
        "facet": {"column": {"field": facet, "type": "nominal", "title": None, "sort": order}},
        "spec": {"width": 230, "height": 200, "layer": layer},
        "resolve": {"scale": {"x": "independent", "y": "independent"}},
    }


def legend_pick(field: str) -> dict[str, Any]:
    """A point selection `pick` on `field`, bound to the legend (click to show one)."""
    return {"name": "pick", "select": {"type": "point", "fields": [field]}, "bind": "legend"}


#: Faded outside the legend's pick.
PICKED = {"condition": {"param": "pick", "value": 1}, "value": 0.12}


def distribution_values(series: Sequence[tuple[str, pd.DataFrame]]) -> list[dict[str, Any]]:
    """`distribution_chart`'s points of these series (a run read part by part gives each
    part's, joined in order)."""
    values: list[dict[str, Any]] = []
    for label, frame in series:
        frame = ensure_columns(frame, [c for c, _ in _DISTRIBUTIONS])
        for column, metric in _DISTRIBUTIONS:
            xs = np.sort(frame[column].dropna().to_numpy(float))
            xs = xs[xs > 0]  # a log axis: fast and slow requests both readable
            n = len(xs)
            keep = np.unique(np.linspace(0, n - 1, min(n, _MAX_RANKS)).round().astype(int))
            values += [
                {"series": label, "metric": metric, "value": float(xs[i]), "share": (i + 1) / n}
                for i in keep
            ]
    return values


def distribution_chart(
    series: Sequence[tuple[str, pd.DataFrame]],
    name: str,
    caption: str,
    values: list[dict[str, Any]] | None = None,
) -> Chart | None:
    """Each series' requests as cumulative distributions of TTFT, decode ms/token and e2e:
    a point per request at its value and its rank's share (`values`: those points, when
    computed already by `distribution_values`)."""
    if values is None:
        values = distribution_values(series)
    if not values:
        return None
    layer = [
        {
            "params": [legend_pick("series")],
            "mark": {"type": "line", "interpolate": "step-after", "point": {"size": 14}},
            "encoding": {
                "x": {
                    "field": "value",
                    "type": "quantitative",
                    "title": None,
                    "scale": _LOG,
                    "axis": _LOG_AXIS,
                },
                "y": {"field": "share", "type": "quantitative", "title": "share of requests"},
                "color": {"field": "series", "type": "nominal", "legend": {"labelLimit": 360}},
                "opacity": PICKED,
                "tooltip": [
                    {"field": "series"},
                    {"field": "metric"},
                    {"field": "value", "format": ".2f"},
                    {"field": "share", "format": ".0%", "title": "at or below"},
                ],
            },
        }
    ]
    spec = facet_spec(values, "metric", [m for _, m in _DISTRIBUTIONS], layer)
    return Chart(name, "Distributions per request", spec, caption)


def request_distribution_values(df: pd.DataFrame) -> list[dict[str, Any]]:
    """`request_distributions`' points of these records (of a part of a run, or all)."""
    ok = measured(df)
    series = [] if ok.empty else list(ok.groupby(["provider", "experiment"], sort=True))
    return distribution_values([(f"{p} · {e}", rows) for (p, e), rows in series])


def request_distributions(
    df: pd.DataFrame, values: list[dict[str, Any]] | None = None
) -> Chart | None:
    """The run's successful, non-warm-up requests, one series per provider × experiment
    (`values`: their points, from `request_distribution_values`, when `df` is not given
    whole)."""
    return distribution_chart(
        [],
        "distributions",
        "Cumulative distributions of client TTFT, decode ms/token and end-to-end time (log "
        "scales): one point per successful, non-warm-up request (past 100 in a series, 100 "
        "evenly spaced by rank), at its value and the share "
        "of requests at or below it (the median sits at 0.5). A curve further right is slower.",
        request_distribution_values(df) if values is None else values,
    )


#: The panels of `client_vs_server_chart`: server column, client column, title.
_PAIRS = [
    ("provider_timings.prefill_ms", "client.ttft_ms", "prefill vs TTFT (ms)"),
    (
        "provider_timings.decode_ms_per_token",
        "client.decode_ms_per_token",
        "decode (ms/token)",
    ),
]


@dataclass
class ServerPoints:
    """`client_vs_server_chart`'s points, per panel, and each panel's extremes (for its
    diagonal); `add` joins a later part of the run's."""

    points: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    ends: dict[str, tuple[float, float]] = field(default_factory=dict)

    def add(self, other: ServerPoints) -> None:
        """Join another part's points (a part of the run read after this one)."""
        for panel, values in other.points.items():
            self.points.setdefault(panel, []).extend(values)
        for panel, (lo, hi) in other.ends.items():
            was = self.ends.get(panel)
            self.ends[panel] = (lo, hi) if was is None else (min(was[0], lo), max(was[1], hi))


def client_vs_server_points(df: pd.DataFrame) -> ServerPoints:
    """`client_vs_server_chart`'s points of these records (of a part of a run, or all)."""
    ok = ensure_columns(measured(df), [c for pair in _PAIRS for c in pair[:2]])
    out = ServerPoints()
    for server, client, panel in _PAIRS:
        both = ok[(ok[server] > 0) & (ok[client] > 0)]
        values = out.points.setdefault(panel, [])
        for (p, e), group in both.groupby(["provider", "experiment"], sort=True):
            # At most `_MAX_POINTS` per series, evenly spaced over its requests in the
            # order of the client's value (the fastest and the slowest always drawn).
            group = group.sort_values(client)
            n = len(group)
            keep = np.unique(np.linspace(0, n - 1, min(n, _MAX_POINTS)).round().astype(int))
            values += [
                {"provider": p, "experiment": e, "panel": panel, "server": s, "client": c}
                for s, c in zip(
                    group[server].to_numpy(float)[keep],
                    group[client].to_numpy(float)[keep],
                    strict=True,
                )
            ]
        if len(both):  # the diagonal, where the two clocks would agree
            out.ends[panel] = (
                min(both[server].min(), both[client].min()),
                max(both[server].max(), both[client].max()),
            )
    return out


def client_vs_server_chart(df: pd.DataFrame, points: ServerPoints | None = None) -> Chart | None:
    """Each request's own prefill (decode) time as the server reported it, against the
    TTFT (decode) the client saw, where the provider reports its timings (`points`: from
    `client_vs_server_points`, when `df` is not given whole)."""
    if points is None:
        points = client_vs_server_points(df)
    values: list[dict[str, Any]] = []
    for _, _, panel in _PAIRS:
        values += points.points.get(panel, [])
        if panel in points.ends:
            values += [{"panel": panel, "diagonal": float(x)} for x in points.ends[panel]]
    if not any("provider" in v for v in values):
        return None
    layer = [
        {
            "transform": [{"filter": "datum.diagonal != null"}],
            "mark": {"type": "line", "color": "#8c959f", "strokeDash": [5, 4]},
            "encoding": {
                "x": {
                    "field": "diagonal",
                    "type": "quantitative",
                    "title": "server's own",
                    "scale": _LOG,
                },
                "y": {
                    "field": "diagonal",
                    "type": "quantitative",
                    "title": "client-observed",
                    "scale": _LOG,
                },
            },
        },
        {
            "transform": [{"filter": "datum.provider != null"}],
            "params": [legend_pick("provider")],
            "mark": {"type": "point", "filled": True, "size": 40},
            "encoding": {
                "x": {
                    "field": "server",
                    "type": "quantitative",
                    "title": "server's own",
                    "scale": _LOG,
                },
                "y": {
                    "field": "client",
                    "type": "quantitative",
                    "title": "client-observed",
                    "scale": _LOG,
                },
                "color": {"field": "provider", "type": "nominal"},
                "opacity": PICKED,
                "tooltip": [
                    {"field": "provider"},
                    {"field": "experiment"},
                    {"field": "server", "format": ".2f", "title": "server"},
                    {"field": "client", "format": ".2f", "title": "client"},
                ],
            },
        },
    ]
    spec = facet_spec(values, "panel", [p for _, _, p in _PAIRS], layer)
    return Chart(
        "client_vs_server",
        "Client vs server, per request",
        spec,
        "One point per successful request of a provider that reports its own timings (past 200 "
        "in a series, 200 evenly spaced by the client's value): the server's prefill against "
        "the client's TTFT (left), the server's decode ms/token against the client's (right), "
        "on log scales. On the dashed diagonal the two agree; "
        "the height above it is queue, network, serving front end and client time.",
    )


def level_axis_title(modes: set[str]) -> str:
    """The load axis' title for levels of these modes (mixed: plain "level")."""
    axes = {"concurrency": "concurrency (streams in flight)", "rate": "offered rate (requests/s)"}
    return axes.get(modes.pop(), "level") if len(modes) == 1 else "level"


def server_queue_chart(scraped: dict[str, list[ServerMetricsSample]]) -> Chart | None:
    """Requests running and waiting in each server over the run, from its scrapes."""
    values: list[dict[str, Any]] = []
    for provider, samples in sorted(scraped.items()):
        t0 = samples[0].t_mono_ns if samples else 0
        for s in samples:
            at = {"provider": provider, "t": (s.t_mono_ns - t0) / 1e9}
            values += [
                {**at, "what": what, "requests": n}
                for what, n in (("running", s.running), ("waiting", s.waiting))
                if n is not None
            ]
    if not values:
        return None
    spec: dict[str, Any] = {
        "$schema": _SCHEMA,
        "data": {"values": values},
        "width": 760,
        "height": 200,
        "params": [
            legend_pick("provider"),
            {"name": "zoom", "select": "interval", "bind": "scales"},
        ],
        "mark": {"type": "line", "interpolate": "step-after", "point": {"size": 10}},
        "encoding": {
            "x": {
                "field": "t",
                "type": "quantitative",
                "title": "seconds since the provider's first scrape",
            },
            # Headroom: a server busy all run keeps its line off the chart's top edge.
            "y": {
                "field": "requests",
                "type": "quantitative",
                "title": "requests",
                "scale": {"padding": 12},
            },
            "color": {"field": "provider", "type": "nominal"},
            "strokeDash": {"field": "what", "type": "nominal", "title": None},
            "opacity": PICKED,
            "tooltip": [
                {"field": "provider"},
                {"field": "what"},
                {"field": "t", "format": ".1f", "title": "s"},
                {"field": "requests"},
            ],
        },
    }
    return Chart(
        "server_queue",
        "Requests running and waiting in the server",
        spec,
        "From the server's own /metrics, scraped during the run (server-metrics-<id>.jsonl): "
        "requests it was running and holding in its queue.",
    )
