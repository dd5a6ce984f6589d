"""`load` in the report: a table per provider × load experiment (a row per level, trace
replays among them), the server's own metrics per level, the load curves and the cache
hits."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from labkit.clocksync import clock_note
from labkit.figures import LoadLevel, ServerLevelMetrics
from labkit.figures.load import LoadFigures
from labkit.figures.trace import TraceFigures
from labkit.records import LabResults
from labkit.report.charts import _SCHEMA, Chart
from labkit.report.kinds import KindReport, register_report
from labkit.report.load import RunData
from labkit.report.render import Block, ChartBlock, Heading, Para, Table, fmt_num
from labkit.report.run_charts import PICKED, facet_spec, legend_pick, level_axis_title
from labkit.wording import cell

__all__ = ["cache_hits_chart", "load_curves_chart", "load_rows"]

_LOAD_VIEW: list[tuple[Callable[[LoadLevel], float | None], str, int | None]] = [
    (lambda r: r.workers, "procs", 0),
    (lambda r: r.ok, "ok", 0),
    (lambda r: r.failed, "failed", 0),
    (lambda r: r.achieved_rate_rps, "req/s", 2),
    (lambda r: r.mean_in_flight, "in flight", 1),
    (lambda r: r.output_tokens_per_s, "out tok/s", 0),
    (lambda r: r.ttft_ms_p50, "TTFT p50", None),
    (lambda r: r.ttft_ms_p90, "TTFT p90", None),
    (lambda r: r.ttft_ms_p99, "TTFT p99", None),
    (lambda r: r.decode_ms_per_token_p50, "decode ms/tok p50", None),
    (lambda r: r.decode_ms_per_token_p99, "decode ms/tok p99", None),
    (lambda r: r.queue_ms_p99, "queue p99", None),
    (lambda r: r.stamp_lateness_ms_p99, "stamps late p99", None),
]


# Where the experiment has SLOs: goodput beside the completed rate, and the share that met.
_SLO_VIEW: list[tuple[Callable[[LoadLevel], float | None], str, int | None]] = [
    (lambda r: r.completed_rps, "completed req/s", 2),
    (lambda r: r.slo.goodput_rps if r.slo else None, "goodput req/s", 2),
    (
        lambda r: 100 * r.slo.good / r.slo.requests if r.slo and r.slo.requests else None,
        "% good",
        0,
    ),
]


# Where a level ran across hosts (Ray): how many, and how far their clocks may be off.
_HOSTS_VIEW: list[tuple[Callable[[LoadLevel], float | None], str, int | None]] = [
    (lambda r: r.hosts, "hosts", 0),
    (lambda r: r.clock_uncertainty_ms, "clock ± ms", 3),
]


_SERVER_VIEW: list[tuple[Callable[[ServerLevelMetrics], float | None], str, int | None]] = [
    (lambda m: m.scrapes, "scrapes", 0),
    (lambda m: m.running_p50, "running p50", 1),
    (lambda m: m.running_max, "running max", 0),
    (lambda m: m.waiting_p50, "waiting p50", 1),
    (lambda m: m.waiting_max, "waiting max", 0),
    (lambda m: None if m.kv_cache_use_max is None else 100 * m.kv_cache_use_max, "KV use max %", 1),
    (lambda m: m.ttft_ms_p50, "server TTFT p50", None),
    (lambda m: m.ttft_ms_p90, "server TTFT p90", None),
    (lambda m: m.itl_ms_p50, "server ITL p50", None),
    (lambda m: m.itl_ms_p90, "server ITL p90", None),
]


def _server_table(rows: list[LoadLevel]) -> list[Block]:
    """The server's own metrics per level, beside labkit's TTFT and ITL (none: empty)."""
    measured = [(row, row.server) for row in rows if row.server is not None]
    if not measured:
        return []
    sources = sorted({f"{k}: {v}" for _, m in measured for k, v in m.sources.items()})
    # A server that exports no such metric (llama-server: no histograms) gets no column.
    view = [col for col in _SERVER_VIEW if any(col[0](m) is not None for _, m in measured)]
    cells = [
        [row.display_title, fmt_num(row.ttft_ms_p50), fmt_num(row.decode_ms_per_token_p50)]
        + [fmt_num(get(m), digits) for get, _label, digits in view]
        for row, m in measured
    ]
    labels = ["level", "labkit TTFT p50", "labkit ms/tok p50"]
    labels += [label for _, label, _ in view]
    return [
        Para(
            "The server's own metrics over each level (scraped from its /metrics, stored in "
            "server-metrics-<provider>.jsonl): requests running and waiting in the server, "
            "its KV-cache use, and its TTFT and inter-token latency from histogram bucket "
            "deltas across the level, beside labkit's client-side figures. Read from "
            + (", ".join(sources) or "no known metric")
            + ".",
            "note",
        ),
        Table(labels, cells, set(range(1, len(labels)))),
    ]


def _level_cell(
    row: LoadLevel, get: Callable[[LoadLevel], float | None], label: str, digits: int | None
) -> str:
    """A level's cell: its TTFT percentiles with their intervals (`LoadLevel.ttft`) where
    it has them, any other figure as a number."""
    if label.startswith("TTFT p") and row.ttft is not None:
        return cell(getattr(row.ttft, label.removeprefix("TTFT ")))
    return fmt_num(get(row), digits)


def _load_section(run: RunData) -> list[Block]:
    """One table per provider × load experiment: a row per level."""
    found = load_rows(run.lab)
    if not found:
        return []
    blocks: list[Block] = [
        Heading("Load levels"),
        Para(
            "Per level: requests ok and failed, the achieved request rate (starts per second; "
            "compare with the target of a rate level), mean requests in flight, output "
            "tokens/s of all streams together, client TTFT and decode percentiles (ms), the "
            "wait inside labkit before sending (queue, never part of TTFT) and how late "
            "labkit stamped its events (p99). A level marked client-bound has timings that "
            "include labkit's own delay.",
            "note",
        ),
    ]
    for provider, experiment, rows in found:
        blocks.append(Heading(f"{provider} · {experiment}", 3))
        view = _LOAD_VIEW + (_SLO_VIEW if any(row.slo for row in rows) else [])
        view = view + (_HOSTS_VIEW if any(row.hosts for row in rows) else [])
        cells = [
            [row.display_title + (" — client-bound" if row.client_bound else "")]
            + [_level_cell(row, get, label, digits) for get, label, digits in view]
            for row in rows
        ]
        numeric = set(range(1, len(view) + 1))
        blocks.append(Table(["level"] + [label for _, label, _ in view], cells, numeric))
        clock = "".join(clock_note(r.title, r.clock_uncertainty_ms, r.ttft_ms_p50) for r in rows)
        if clock:
            blocks.append(Para(clock.strip(), "note"))
        blocks += _server_table(rows)
    charts = (load_curves_chart(run.lab), cache_hits_chart(run.lab))
    return blocks + [ChartBlock(c) for c in charts if c is not None]


def load_rows(lab: LabResults | None) -> list[tuple[str, str, list[LoadLevel]]]:
    """(provider, experiment, level rows) of every load answer in `lab.json`, a trace
    replay as its one level."""
    found = []
    for ans in lab.answers if lab is not None else []:
        if isinstance(ans.figures, TraceFigures):
            found.append((ans.provider, ans.experiment, [ans.figures.replay]))
        elif isinstance(ans.figures, LoadFigures) and ans.figures.levels:
            found.append((ans.provider, ans.experiment, ans.figures.levels))
    return found


def load_curves_chart(lab: LabResults | None) -> Chart | None:
    """Aggregate output tokens/s and TTFT p50/p99 against each load level, per provider."""
    found = load_rows(lab)
    several = len({e for _, e, _ in found}) > 1
    values: list[dict[str, Any]] = []
    for provider, experiment, rows in found:
        series = f"{provider} · {experiment}" if several else provider
        for r in rows:
            if not r.ok:
                continue
            at = {"series": series, "level": r.target, "title": r.display_title}
            bound = "client-bound" if r.client_bound else "ok"
            for panel, stat, v in (
                ("output tokens/s, all streams", "aggregate", r.output_tokens_per_s),
                ("TTFT (ms)", "p50", r.ttft_ms_p50),
                ("TTFT (ms)", "p99", r.ttft_ms_p99),
            ):
                if v is not None:
                    values.append({**at, "panel": panel, "stat": stat, "v": v, "bound": bound})
    if not values:
        return None
    log = max(v["level"] for v in values) >= 16
    x = {
        "field": "level",
        "type": "quantitative",
        "title": level_axis_title({r.mode for _, _, rows in found for r in rows}),
        "scale": {"type": "log", "base": 2} if log else {"zero": False},
    }
    layer = [
        {
            "params": [legend_pick("series")],
            "mark": {"type": "line", "point": {"size": 40}},
            "encoding": {
                "x": x,
                "y": {"field": "v", "type": "quantitative", "title": None},
                "color": {"field": "series", "type": "nominal"},
                "strokeDash": {"field": "stat", "type": "nominal", "title": None},
                "opacity": PICKED,
                "tooltip": [
                    {"field": "series"},
                    {"field": "title", "title": "level"},
                    {"field": "stat"},
                    {"field": "v", "format": ".1f", "title": "value"},
                    {"field": "bound", "title": "labkit"},
                ],
            },
        },
        {
            "transform": [{"filter": "datum.bound == 'client-bound'"}],
            "mark": {"type": "point", "size": 220, "color": "#cf222e", "strokeWidth": 2},
            "encoding": {"x": x, "y": {"field": "v", "type": "quantitative"}},
        },
    ]
    spec = facet_spec(values, "panel", ["output tokens/s, all streams", "TTFT (ms)"], layer)
    return Chart(
        "load_curves",
        "Throughput and TTFT per load level",
        spec,
        "Left: output tokens/s of all streams together, per level. Right: client TTFT p50 "
        "and p99. A red ring marks a client-bound level, whose timings include labkit's own "
        "delay.",
    )


def _cached_levels(lab: LabResults | None) -> list[tuple[str, str, LoadLevel]]:
    """(provider, experiment, level) of every load level and trace replay with cache counts."""
    found: list[tuple[str, str, LoadLevel]] = []
    for a in lab.answers if lab is not None else []:
        if isinstance(a.figures, LoadFigures):
            rows = a.figures.levels
        elif isinstance(a.figures, TraceFigures):
            rows = [a.figures.replay]
        else:
            continue
        found += [
            (a.provider, a.experiment, row)
            for row in rows
            if row.cache is not None and row.cache.cached_share is not None and row.ok
        ]
    return found


def cache_hits_chart(lab: LabResults | None) -> Chart | None:
    """Per load level with cache counts: the cached share of prompt tokens against TTFT,
    with the TTFT of hits and misses."""
    values: list[dict[str, Any]] = []
    for provider, experiment, row in _cached_levels(lab):
        cache = row.cache
        assert cache is not None and cache.cached_share is not None  # _cached_levels keeps these
        at = {"level": f"{provider} · {experiment} · {row.display_title}"}
        for what, v in (
            ("level", row.ttft_ms_p50),
            ("hits", cache.ttft_ms_p50_hit),
            ("misses", cache.ttft_ms_p50_miss),
        ):
            if v is not None:
                values.append({**at, "share": 100 * cache.cached_share, "what": what, "v": v})
    if not values:
        return None
    spec = {
        "$schema": _SCHEMA,
        "data": {"values": values},
        "width": 500,
        "height": 260,
        "mark": {"type": "point", "filled": True, "size": 80},
        "encoding": {
            "x": {
                "field": "share",
                "type": "quantitative",
                "title": "prompt tokens served from the provider's cache (%)",
                "scale": {"domain": [0, 100]},
            },
            "y": {"field": "v", "type": "quantitative", "title": "TTFT p50 (ms)"},
            "color": {"field": "level", "type": "nominal", "legend": {"labelLimit": 360}},
            "shape": {
                "field": "what",
                "type": "nominal",
                "title": None,
                "scale": {
                    "domain": ["level", "hits", "misses"],
                    "range": ["circle", "triangle-down", "triangle-up"],
                },
            },
            "tooltip": [
                {"field": "level"},
                {"field": "what"},
                {"field": "share", "format": ".0f", "title": "cached %"},
                {"field": "v", "format": ".1f", "title": "TTFT p50"},
            ],
        },
    }
    return Chart(
        "cache_hits",
        "Cache hits vs TTFT per level",
        spec,
        "Each load or trace level whose provider counted cached prompt tokens: the share it "
        "served from its cache against the level's TTFT p50 (circle); ▼ the TTFT p50 of its "
        "hits (at least half the prompt cached), ▲ of the rest.",
    )


register_report(KindReport("load", section=_load_section, rank=10))
