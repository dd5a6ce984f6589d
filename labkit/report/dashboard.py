"""The observatory's page: `labkit dashboard STORE` renders `ObservatoryFigures` as one
offline HTML file (the report's Vega-Lite engine and inlined bundle, nothing fetched).

Each section's picture is followed by a table of the same data (readable without JavaScript);
what a provider does not separate is drawn as "not separable", never as zero. The page only
renders: nothing is recomputed. Reading a store and computing the figures is
`labkit.cli.dashboard`'s (the store's package reads run folders through this layer, so the
report does not import it). The sections: docs/dashboard.md.
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from labkit.errors import RunError
from labkit.figures.observatory import (
    ChangeEvent,
    CostFigures,
    ObservatoryFigures,
    RollupCell,
    SameModelVerdict,
    SplitCell,
)
from labkit.figures.stats import Estimate, Proportion, Quantile
from labkit.report.charts import _SCHEMA, Chart
from labkit.report.render import (
    Block,
    Bullets,
    ChartBlock,
    Heading,
    Para,
    Table,
    fmt_num,
    html_page,
)
from labkit.report.run_charts import PICKED, legend_pick
from labkit.safefiles import write_new_file

__all__ = [
    "NOT_SEPARABLE",
    "PARTS",
    "changes_chart",
    "cost_chart",
    "dashboard_blocks",
    "dashboard_html",
    "hour_of_day_chart",
    "interval_text",
    "metric_name",
    "public_url",
    "read_figures",
    "split_chart",
    "write_dashboard",
]

#: What the page calls a part of the time a provider does not report on its own.
NOT_SEPARABLE = "not separable"

#: The parts of TTFT the split stacks, in order, with their colours (the last: the rest of
#: the mean TTFT that the provider's fields do not split).
PARTS: tuple[tuple[str, str], ...] = (
    ("network and front end", "#4c78a8"),
    ("queue", "#f58518"),
    ("processing", "#54a24b"),
    (NOT_SEPARABLE, "#bab0ac"),
)

_METRIC_NAMES = {
    "client.ttft_ms": "TTFT (ms)",
    "client.e2e_ms": "e2e (ms)",
    "client.decode_ms_per_token": "decode (ms/token)",
    "client.tokens_per_s": "tokens/s",
    "provider_timings.queue_ms": "provider's queue (ms)",
    "provider_timings.prefill_ms": "provider's prefill (ms)",
}

_WINDOW_NAMES = {"72h": "last 72 h", "14d": "last 14 days", "hour_of_day": "hour of day"}

_FACET_WIDTH = 470


def public_url(url: str) -> str:
    """`url` with any password (and a query's password-like parameters) removed: a store's
    URL as a page may show it."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:  # not a URL it can read: whatever stands before an @ goes
        return re.sub(r"(://)[^/@]*@", r"\1", url)
    if not parts.scheme or parts.scheme.lower() in {"file"} or "://" not in url:
        return url
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, _, host = netloc.rpartition("@")
        user = userinfo.partition(":")[0]
        netloc = f"{user}@{host}" if user else host
    query = urllib.parse.urlencode(
        [
            (k, v)
            for k, v in urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
            if "pass" not in k.lower() and "secret" not in k.lower() and "key" not in k.lower()
        ]
    )
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def metric_name(metric: str) -> str:
    """A probes-frame column as the page names it: ``client.ttft_ms`` → ``TTFT (ms)``."""
    return _METRIC_NAMES.get(metric, metric)


def _when(at: datetime | None) -> str:
    if at is None:
        return "—"
    return (at.astimezone(UTC) if at.tzinfo else at).strftime("%Y-%m-%d %H:%M UTC")


def _iso(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%SZ") if at.tzinfo is None else at.isoformat()


def _series(provider: str, model: str) -> str:
    return f"{provider} · {model}"


def interval_text(value: float | None, lo: float | None, hi: float | None) -> str:
    """``value [lo–hi]``, or the value with "no interval" where it has none."""
    if value is None:
        return "—"
    if lo is None or hi is None:
        return f"{fmt_num(value)} (no interval: too few)"
    return f"{fmt_num(value)} [{fmt_num(lo)}–{fmt_num(hi)}]"


def _q(q: Quantile) -> str:
    return interval_text(q.value, q.lo, q.hi)


def _e(e: Estimate | None, digits: int | None = None) -> str:
    if e is None:
        return "—"
    if digits is None:
        return interval_text(e.value, e.lo, e.hi)
    v = fmt_num(e.value, digits)
    if e.lo is None or e.hi is None:
        return f"{v} (no interval)"
    return f"{v} [{fmt_num(e.lo, digits)}–{fmt_num(e.hi, digits)}]"


def _share(p: Proportion | None) -> str:
    if p is None or p.value is None:
        return "—"
    if p.lo is None or p.hi is None:
        return f"{p.k}/{p.n} ({p.value:.0%})"
    return f"{p.k}/{p.n} ({p.value:.0%}, 95 % CI {p.lo:.0%}–{p.hi:.0%})"


def _facet(
    values: list[dict[str, Any]],
    field: str,
    layer: list[dict[str, Any]],
    *,
    columns: int = 2,
    independent_y: bool = False,
    height: int = 200,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "$schema": _SCHEMA,
        "data": {"values": values},
        "facet": {"field": field, "type": "nominal", "title": None, "sort": None},
        "columns": columns,
        "spec": {"width": _FACET_WIDTH, "height": height, "layer": layer},
        "resolve": {"scale": {"x": "shared", "y": "independent" if independent_y else "shared"}},
    }
    return spec


# --- hour of day -------------------------------------------------------------------------


def _hour_values(cells: Sequence[RollupCell]) -> list[dict[str, Any]]:
    values: list[dict[str, Any]] = []
    for c in cells:
        if c.window != "hour_of_day" or c.hour is None:
            continue
        for stat, q in (("median", c.median), ("p90", c.p90)):
            if q.value is None:
                continue
            values.append(
                {
                    "panel": metric_name(c.metric),
                    "provider": _series(c.provider, c.model),
                    "stat": stat,
                    "hour": c.hour,
                    "value": q.value,
                    "lo": q.lo,
                    "hi": q.hi,
                    "n": q.n,
                    "interval": _q(q),
                }
            )
    return values


def hour_of_day_chart(cells: Sequence[RollupCell]) -> Chart | None:
    """Per metric a panel: each provider's median (solid) and p90 (dashed) by hour of the
    day (UTC), each with its 95 % band; hover a point for its interval."""
    values = _hour_values(cells)
    if not values:
        return None
    x = {
        "field": "hour",
        "type": "quantitative",
        "title": "hour of day (UTC)",
        "scale": {"domain": [0, 23]},
        "axis": {"tickCount": 12},
    }
    color = {"field": "provider", "type": "nominal", "legend": {"labelLimit": 360}}
    y = {"field": "value", "type": "quantitative", "title": None}
    layer: list[dict[str, Any]] = [
        {
            "transform": [{"filter": "isValid(datum.lo) && isValid(datum.hi)"}],
            "mark": {"type": "area", "opacity": 0.15},
            "encoding": {
                "x": x,
                "y": {"field": "lo", "type": "quantitative"},
                "y2": {"field": "hi"},
                "color": color,
                "detail": {"field": "stat"},
            },
        },
        {
            "mark": {"type": "line"},
            "encoding": {
                "x": x,
                "y": y,
                "color": color,
                "strokeDash": {
                    "field": "stat",
                    "type": "nominal",
                    "scale": {"domain": ["median", "p90"], "range": [[1, 0], [5, 3]]},
                    "legend": None,
                },
                "opacity": PICKED,
            },
        },
        {
            "params": [legend_pick("provider")],
            "mark": {"type": "point", "filled": True, "size": 30},
            "encoding": {
                "x": x,
                "y": y,
                "color": color,
                "shape": {"field": "stat", "type": "nominal", "title": "statistic"},
                "opacity": PICKED,
                "tooltip": [
                    {"field": "provider"},
                    {"field": "panel", "title": "metric"},
                    {"field": "stat", "title": "statistic"},
                    {"field": "hour", "title": "hour (UTC)"},
                    {"field": "value", "format": ".1f"},
                    {"field": "lo", "format": ".1f", "title": "95% CI low"},
                    {"field": "hi", "format": ".1f", "title": "95% CI high"},
                    {"field": "n", "title": "probes"},
                ],
            },
        },
    ]
    spec = _facet(values, "panel", layer, independent_y=True)
    return Chart(
        "obs_hour_of_day",
        "Hour of day",
        spec,
        "Each provider's median (solid, circles) and p90 (dashed, squares) by hour of the day "
        "(UTC), over every round; the shaded band is each one's 95 % interval. Click the "
        "legend to show one provider.",
    )


def _hour_tables(cells: Sequence[RollupCell]) -> list[Block]:
    """Per metric a table: a row per hour, a median and a p90 column (each with its
    interval) per provider × model, and each hour's probes."""
    hourly = [c for c in cells if c.window == "hour_of_day" and c.hour is not None]
    blocks: list[Block] = []
    for metric in dict.fromkeys(c.metric for c in hourly):
        mine = [c for c in hourly if c.metric == metric]
        series = list(dict.fromkeys(_series(c.provider, c.model) for c in mine))
        by = {(_series(c.provider, c.model), c.hour): c for c in mine}
        rows: list[list[str]] = []
        for hour in sorted({c.hour for c in mine if c.hour is not None}):
            row = [f"{hour:02d}"]
            for key in series:
                cell = by.get((key, hour))
                row += (
                    [_q(cell.median), _q(cell.p90), str(cell.median.n)] if cell else ["—", "—", "0"]
                )
            rows.append(row)
        columns = ["hour (UTC)"]
        for key in series:
            columns += [f"{key}: median [95 % CI]", "p90 [95 % CI]", "probes"]
        blocks += [
            Para(f"{metric_name(metric)} by hour of the day:", "note"),
            Table(columns, rows, numeric=set(range(len(columns)))),
        ]
    return blocks


def _window_table(cells: Sequence[RollupCell]) -> Table | None:
    rows = [
        [c.provider, c.model, metric_name(c.metric), _WINDOW_NAMES[c.window],
         f"{_when(c.start)} – {_when(c.end)}", _q(c.median), _q(c.p90), str(c.median.n)]
        for c in sorted(
            (c for c in cells if c.window != "hour_of_day"),
            key=lambda c: (c.provider, c.model, c.metric, c.window != "72h"),
        )
    ]  # fmt: skip
    if not rows:
        return None
    return Table(
        ["provider", "model", "metric", "window", "rounds", "median [95 % CI]", "p90 [95 % CI]",
         "probes"],
        rows,
        numeric={5, 6, 7},
    )  # fmt: skip


# --- the split ---------------------------------------------------------------------------


def _split_label(cell: SplitCell) -> str:
    return f"{cell.hour:02d}" if cell.hour is not None else _WINDOW_NAMES[cell.window]


def _split_parts(cell: SplitCell) -> list[tuple[str, Estimate | None, float]]:
    """(part, its estimate, its height): the parts the provider gave, then the rest of the
    mean TTFT as "not separable" (the whole of it where the provider gave none)."""
    given = [
        ("network and front end", cell.network_frontend_ms),
        ("queue", cell.queue_ms),
        ("processing", cell.processing_ms),
    ]
    out: list[tuple[str, Estimate | None, float]] = [
        (name, est, max(est.value, 0.0)) for name, est in given if est is not None
    ]
    rest = cell.total_ms.value - sum(h for _, _, h in out)
    if len(out) < len(given) and rest > 0:
        out.append((NOT_SEPARABLE, None, rest))
    return out


def _split_values(cells: Sequence[SplitCell]) -> list[dict[str, Any]]:
    order = {name: i for i, (name, _) in enumerate(PARTS)}
    values: list[dict[str, Any]] = []
    hourly = any(c.hour is not None for c in cells)
    for c in cells:
        if hourly and c.hour is None:
            continue  # the windows are in the table; the picture is the day's hours
        for part, est, height in _split_parts(c):
            values.append(
                {
                    "provider": _series(c.provider, c.model),
                    "when": _split_label(c),
                    "part": part,
                    "order": order[part],
                    "ms": height,
                    "mean": "the rest of the mean TTFT: the provider does not say how it splits"
                    if est is None
                    else interval_text(est.value, est.lo, est.hi),
                    "total": interval_text(c.total_ms.value, c.total_ms.lo, c.total_ms.hi),
                    "n": c.n,
                }
            )
    return values


def split_chart(cells: Sequence[SplitCell]) -> Chart | None:
    """Per provider a panel of stacked bars: its mean TTFT by hour of the day split into
    network and front end, queue and processing, where its own fields say them; the rest,
    grey, is "not separable" (never drawn as zero)."""
    values = _split_values(cells)
    if not values:
        return None
    layer: list[dict[str, Any]] = [
        {
            "mark": {"type": "bar"},
            "encoding": {
                "x": {"field": "when", "type": "ordinal", "title": None, "sort": None,
                      "axis": {"labelAngle": 0}},
                "y": {"field": "ms", "type": "quantitative", "title": "mean TTFT (ms)",
                      "stack": "zero"},
                "color": {
                    "field": "part",
                    "type": "nominal",
                    "title": "part",
                    "scale": {"domain": [p for p, _ in PARTS], "range": [c for _, c in PARTS]},
                },
                "order": {"field": "order", "type": "quantitative"},
                "tooltip": [
                    {"field": "provider"},
                    {"field": "when", "title": "hour (UTC) or window"},
                    {"field": "part"},
                    {"field": "mean", "title": "mean ms [95% CI]"},
                    {"field": "total", "title": "mean TTFT [95% CI]"},
                    {"field": "n", "title": "probes"},
                ],
            },
        }
    ]  # fmt: skip
    spec = _facet(values, "provider", layer, independent_y=True)
    return Chart(
        "obs_split",
        "Where the time went",
        spec,
        "Each provider's mean TTFT by hour of the day (UTC), split by its own fields into "
        "network and front end, queue and processing; grey is the part it does not separate "
        "(not separable), not a zero. Hover a bar for its mean's 95 % interval.",
    )


def _split_table(cells: Sequence[SplitCell]) -> Table:
    def part(e: Estimate | None) -> str:
        return NOT_SEPARABLE if e is None else _e(e)

    rows = [
        [c.provider, c.model, _split_label(c), str(c.n), _e(c.total_ms),
         part(c.network_frontend_ms), part(c.queue_ms), part(c.processing_ms),
         part(c.decode_ms_per_token)]
        for c in sorted(cells, key=lambda c: (c.provider, c.model, c.hour is None,
                                               c.hour or 0, c.window))
    ]  # fmt: skip
    return Table(
        ["provider", "model", "hour (UTC) or window", "probes", "mean TTFT ms [95 % CI]",
         "network and front end", "queue", "processing", "decode ms/token"],
        rows,
        numeric={3, 4, 5, 6, 7, 8},
    )  # fmt: skip


# --- changes -----------------------------------------------------------------------------


def _change_values(figs: ObservatoryFigures) -> list[dict[str, Any]]:
    values: list[dict[str, Any]] = []
    panels: dict[str, list[str]] = {}  # provider · model → its panels
    for c in figs.changes:
        if c.kind != "shift" or c.metric is None:
            continue
        key = _series(c.provider, c.model)
        panel = f"{key} — {metric_name(c.metric)}"
        if panel not in panels.setdefault(key, []):
            panels[key].append(panel)
            points = [
                s
                for s in figs.series
                if (s.provider, s.model, s.metric) == (c.provider, c.model, c.metric)
                and s.median.value is not None
            ]
            for s in points:
                mid = s.start + (s.end - s.start) / 2
                values.append(
                    {
                        "panel": panel,
                        "row": "point",
                        "t": _iso(mid),
                        "value": s.median.value,
                        "lo": s.median.lo,
                        "hi": s.median.hi,
                        "stretch": f"{_when(s.start)} – {_when(s.end)}",
                        "median": _q(s.median),
                    }
                )
        values.append(_change_row(c, panel, figs))
        if (
            c.before is not None
            and c.after is not None
            and not any(
                s.metric == c.metric and (s.provider, s.model) == (c.provider, c.model)
                for s in figs.series
            )
        ):
            start = figs.first_round or c.at_lo or c.at
            end = figs.last_round or c.at_hi or c.at
            for level, t0, t1 in (("before", start, c.at), ("after", c.at, end)):
                value = c.before if level == "before" else c.after
                for t in (t0, t1):
                    values.append(
                        {"panel": panel, "row": "level", "level": level, "t": _iso(t),
                         "value": value, "median": fmt_num(value)}
                    )  # fmt: skip
    for c in figs.changes:
        if c.kind == "shift":
            continue
        key = _series(c.provider, c.model)
        for panel in panels.get(key) or [f"{key} — events"]:
            values.append(_change_row(c, panel, figs))
    return values


def _change_row(c: ChangeEvent, panel: str, figs: ObservatoryFigures) -> dict[str, Any]:
    lo = c.at_lo or c.at
    hi = c.at_hi or c.at
    return {
        "panel": panel,
        "row": "change" if c.kind == "shift" else "event",
        "kind": c.kind,
        "t": _iso(c.at),
        "t_lo": _iso(lo),
        "t_hi": _iso(hi),
        "at": _when(c.at),
        "at_interval": f"{_when(lo)} – {_when(hi)}",
        "sentence": c.sentence,
        "component": c.component or "—",
        "delta": _e(c.delta),
        "q": fmt_num(c.q_value, 4) if c.q_value is not None else "—",
    }


def changes_chart(figs: ObservatoryFigures) -> Chart | None:
    """Per changed provider × metric a panel: the metric's median over time (or its level
    before and after), a red rule at each change point with its interval shaded, a grey
    dashed rule at each fingerprint or build change; hover a rule for its sentence."""
    values = _change_values(figs)
    if not values:
        return None
    scale: dict[str, Any] = {"type": "utc"}
    if figs.first_round is not None and figs.last_round is not None:
        scale["domain"] = [_iso(figs.first_round), _iso(figs.last_round)]
    x = {"field": "t", "type": "temporal", "title": "time (UTC)", "scale": scale,
         "axis": {"format": "%b %d %H:%M", "labelOverlap": True}}  # fmt: skip
    y = {"field": "value", "type": "quantitative", "title": "median", "scale": {"zero": False}}
    rule_tip = [
        {"field": "sentence", "title": "finding"},
        {"field": "at", "title": "at"},
        {"field": "at_interval", "title": "95% CI of the time"},
        {"field": "component", "title": "part that moved"},
        {"field": "delta", "title": "change [95% CI]"},
        {"field": "q", "title": "q (BH)"},
    ]
    layer: list[dict[str, Any]] = [
        {
            "transform": [{"filter": "datum.row === 'change'"}],
            "mark": {"type": "rect", "color": "#cf222e", "opacity": 0.12},
            "encoding": {"x": {**x, "field": "t_lo"}, "x2": {"field": "t_hi"}},
        },
        {
            "transform": [{"filter": "datum.row === 'level'"}],
            "mark": {"type": "line", "color": "#4c78a8"},
            "encoding": {"x": x, "y": y, "detail": {"field": "level"}},
        },
        {
            "transform": [{"filter": "datum.row === 'point' && isValid(datum.lo)"}],
            "mark": {"type": "rule", "color": "#4c78a8", "opacity": 0.5},
            "encoding": {
                "x": x,
                "y": {"field": "lo", "type": "quantitative"},
                "y2": {"field": "hi"},
            },
        },
        {
            "transform": [{"filter": "datum.row === 'point'"}],
            "mark": {"type": "point", "filled": True, "size": 24, "color": "#4c78a8"},
            "encoding": {
                "x": x,
                "y": y,
                "tooltip": [
                    {"field": "stretch", "title": "when"},
                    {"field": "median", "title": "median [95% CI]"},
                ],
            },
        },
        {
            "transform": [{"filter": "datum.row === 'change'"}],
            "mark": {"type": "rule", "color": "#cf222e", "strokeWidth": 3},
            "encoding": {"x": x, "tooltip": rule_tip},
        },
        {
            "transform": [{"filter": "datum.row === 'event'"}],
            "mark": {"type": "rule", "color": "#6e7781", "strokeDash": [4, 3], "strokeWidth": 2},
            "encoding": {"x": x, "tooltip": rule_tip},
        },
    ]
    spec = _facet(values, "panel", layer, independent_y=True, height=180)
    return Chart(
        "obs_changes",
        "Changes",
        spec,
        "Each changed metric's median over time; a red rule marks each change point, the "
        "shaded band the 95 % interval of its time; a grey dashed rule, a fingerprint or "
        "server build that changed. Hover a rule for what changed.",
    )


def _change_text(c: ChangeEvent) -> str:
    if c.kind != "shift" and (c.old_value or c.new_value):
        return f"{c.old_value or '—'} → {c.new_value or '—'}"
    return _e(c.delta)


def _changes_table(changes: Sequence[ChangeEvent]) -> Table:
    rows = [
        [c.provider, c.model, c.kind, _when(c.at),
         f"{_when(c.at_lo)} – {_when(c.at_hi)}" if c.at_lo or c.at_hi else "—",
         c.component or "—", _change_text(c),
         fmt_num(c.q_value, 4) if c.q_value is not None else "—", c.sentence]
        for c in sorted(changes, key=lambda c: (c.at, c.provider))
    ]  # fmt: skip
    return Table(
        ["provider", "model", "kind", "at", "95 % CI of the time", "part that moved",
         "change [95 % CI]", "q (BH)", "finding"],
        rows,
        numeric={6, 7},
    )  # fmt: skip


# --- money -------------------------------------------------------------------------------

_COST_MEASURES = (
    ("per_request", "cost per request"),
    ("per_session", "cost per session"),
    ("per_successful_answer", "cost per successful answer"),
    ("goodput_per_dollar", "good answers per unit of money"),
)


def _cost_values(costs: Sequence[CostFigures]) -> list[dict[str, Any]]:
    values: list[dict[str, Any]] = []
    for c in costs:
        for attr, label in _COST_MEASURES:
            est: Estimate | None = getattr(c, attr)
            if est is None:
                continue
            values.append(
                {
                    "panel": label if attr == "goodput_per_dollar" else f"{label} ({c.currency})",
                    "provider": _series(c.provider, c.model),
                    "value": est.value,
                    "lo": est.lo,
                    "hi": est.hi,
                    "estimate": _e(est, 6 if attr != "goodput_per_dollar" else 1),
                    "prices": c.price_date,
                }
            )
    return values


def cost_chart(costs: Sequence[CostFigures]) -> Chart | None:
    """Per measure a panel of bars, one per provider, with its 95 % interval as a rule."""
    values = _cost_values(costs)
    if not values:
        return None
    y = {"field": "provider", "type": "nominal", "title": None, "axis": {"labelLimit": 200}}
    layer: list[dict[str, Any]] = [
        {
            "mark": {"type": "bar"},
            "encoding": {
                "y": y,
                "x": {"field": "value", "type": "quantitative", "title": None},
                "color": {"field": "provider", "type": "nominal", "legend": None},
                "tooltip": [
                    {"field": "provider"},
                    {"field": "panel", "title": "measure"},
                    {"field": "estimate", "title": "value [95% CI]"},
                    {"field": "prices", "title": "price table of"},
                ],
            },
        },
        {
            "transform": [{"filter": "isValid(datum.lo) && isValid(datum.hi)"}],
            "mark": {"type": "rule", "color": "#1f2328"},
            "encoding": {
                "y": y,
                "x": {"field": "lo", "type": "quantitative"},
                "x2": {"field": "hi"},
            },
        },
    ]
    spec = _facet(values, "panel", layer, independent_y=False, height=30 * len(costs) + 20)
    spec["resolve"]["scale"]["x"] = "independent"
    return Chart(
        "obs_costs",
        "Cost",
        spec,
        "What each provider cost under the config's dated price table: per request, per "
        "agent session, per successful answer, and good answers per unit of money; the "
        "black rule is the 95 % interval.",
    )


def _cost_table(costs: Sequence[CostFigures]) -> Table:
    rows = [
        [c.provider, c.model, c.price_date, c.currency, str(c.requests), fmt_num(c.total, 4),
         _e(c.per_request, 6), _e(c.per_session, 6), _e(c.per_successful_answer, 6),
         _e(c.goodput_per_dollar, 1)]
        for c in costs
    ]  # fmt: skip
    return Table(
        ["provider", "model", "prices of", "currency", "requests", "total", "per request",
         "per session", "per successful answer", "good answers per unit"],
        rows,
        numeric={4, 5, 6, 7, 8, 9},
    )  # fmt: skip


# --- same model --------------------------------------------------------------------------


def _verdict_table(verdicts: Sequence[SameModelVerdict]) -> Table:
    def p(x: float | None) -> str:
        return "—" if x is None else fmt_num(x, 4)

    rows = [
        [v.model, v.provider, v.reference, v.verdict, f"{v.confidence:.1%}",
         _share(v.token_counts_equal), p(v.distribution_p), p(v.stop_reason_p),
         "; ".join(v.reasons) or "—"]
        for v in sorted(verdicts, key=lambda v: (v.model, v.provider))
    ]  # fmt: skip
    return Table(
        ["model name", "provider", "reference", "verdict", "confidence",
         "token counts equal", "distributions p", "stop reasons p", "reasons"],
        rows,
        numeric={4, 6, 7},
    )  # fmt: skip


# --- the page ----------------------------------------------------------------------------


def _header(figs: ObservatoryFigures) -> list[Block]:
    providers = sorted(
        {_series(c.provider, c.model) for c in figs.rollups}
        | {_series(c.provider, c.model) for c in figs.splits}
    )
    lines = [
        f"store: {public_url(figs.store)}",
        f"rounds: {figs.rounds}",
        f"first round: {_when(figs.first_round)}; last round: {_when(figs.last_round)}",
        f"computed at: {_when(figs.computed_at)}",
    ]
    if providers:
        lines.append("providers: " + ", ".join(providers))
    return [Heading("labkit observatory", 1), Bullets(lines)]


def dashboard_blocks(figs: ObservatoryFigures, notes: Sequence[str] = ()) -> list[Block]:
    """The page's blocks: header (and `notes`: what could not be computed), hour of day and
    windows, split, changes, cost, same model; a section with nothing to show says so."""
    blocks: list[Block] = _header(figs)
    if notes:
        blocks.append(Bullets(list(notes), "warn"))
    if figs.rounds == 0 and not (figs.rollups or figs.splits or figs.changes):
        blocks.append(Para("The store holds no rounds yet: nothing to show.", "warn"))

    blocks.append(Heading("Hour of day"))
    hours = hour_of_day_chart(figs.rollups)
    if hours is None:
        blocks.append(Para("No hour-of-day figures: too few rounds yet.", "note"))
    else:
        blocks += [ChartBlock(hours), *_hour_tables(figs.rollups)]
    windows = _window_table(figs.rollups)
    blocks.append(Heading("The last 72 hours and 14 days", 3))
    blocks.append(windows or Para("No window figures yet.", "note"))

    blocks.append(Heading("Where the time went"))
    split = split_chart(figs.splits)
    if split is None:
        blocks.append(Para("No split of the time yet.", "note"))
    else:
        blocks.append(ChartBlock(split))
        unsplit = sorted(
            {
                _series(c.provider, c.model)
                for c in figs.splits
                if c.network_frontend_ms is None and c.queue_ms is None and c.processing_ms is None
            }
        )
        if unsplit:
            blocks.append(
                Para(
                    f"{', '.join(unsplit)}: {NOT_SEPARABLE} — the provider gives no timing of "
                    "its own, so its time is one grey bar, not network, queue and processing.",
                    "note",
                )
            )
        blocks.append(_split_table(figs.splits))

    blocks.append(Heading("Changes"))
    if figs.changes:
        blocks.append(Bullets([c.sentence for c in sorted(figs.changes, key=lambda c: c.at)]))
        chart = changes_chart(figs)
        if chart is not None:
            blocks.append(ChartBlock(chart))
        blocks.append(_changes_table(figs.changes))
    else:
        blocks.append(Para("No change found between the windows.", "note"))

    if figs.costs:
        blocks.append(Heading("Cost"))
        cost = cost_chart(figs.costs)
        if cost is not None:
            blocks.append(ChartBlock(cost))
        blocks.append(_cost_table(figs.costs))

    blocks.append(Heading("Same model?"))
    if figs.verdicts:
        blocks.append(_verdict_table(figs.verdicts))
    else:
        blocks.append(Para("No same-model probes in this store.", "note"))
    return blocks


def dashboard_html(figs: ObservatoryFigures, notes: Sequence[str] = ()) -> str:
    """The page as one self-contained HTML string (scrubbed, Vega inlined)."""
    return html_page(
        dashboard_blocks(figs, notes), f"labkit observatory — {public_url(figs.store)}"
    )


def write_dashboard(figs: ObservatoryFigures, page: Path, notes: Sequence[str] = ()) -> Path:
    """Write the page to `page` (replacing it whole) and return its path."""
    page.parent.mkdir(parents=True, exist_ok=True)
    write_new_file(page, dashboard_html(figs, notes))
    return page


#: Saved figures far beyond a store's are not figures (read no further).
MAX_FIGURES_BYTES = 256 * 1024 * 1024


def read_figures(path: Path) -> ObservatoryFigures:
    """`ObservatoryFigures` saved as JSON (``model_dump_json``) at `path`."""
    from pydantic import ValidationError

    try:
        with path.open("rb") as fh:
            raw = fh.read(MAX_FIGURES_BYTES + 1)
        if len(raw) > MAX_FIGURES_BYTES:
            raise RunError(f"{path} is larger than {MAX_FIGURES_BYTES} bytes: not figures")
        text = raw.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise RunError(f"cannot read the figures file {path}: {exc.__class__.__name__}") from None
    try:
        return ObservatoryFigures.model_validate_json(text)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "the file"
        raise RunError(f"{path} is not observatory figures: {where}: {first['msg']}") from None
