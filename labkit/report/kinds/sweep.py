"""The report's SLO parts: goodput against load (the sweep's knee marked) and the sweep table.

Read from `lab.json` only (`SweepFigures`, and `LoadFigures` levels judged against SLOs).
"""

from __future__ import annotations

from typing import Any

from labkit.figures import LoadLevel
from labkit.figures.load import LoadFigures
from labkit.figures.sweep import SweepFigures
from labkit.records import LabResults
from labkit.report.charts import _SCHEMA, Chart
from labkit.report.kinds import KindReport, register_report
from labkit.report.load import RunData
from labkit.report.render import Block, ChartBlock, Heading, Para, Table, fmt_num
from labkit.report.run_charts import PICKED, legend_pick, level_axis_title

__all__ = ["goodput_chart", "sweep_section"]

_MAX_SERIES = 8


def _axis_value(mode: str, row: LoadLevel) -> float:
    """Where a level sits on its experiment's axis: a rate sweep's closed-loop probes sit at
    the rate they completed."""
    if mode == "rate" and row.mode == "concurrency":
        return row.completed_rps or 0.0
    return row.target


def _series(lab: LabResults | None) -> list[tuple[str, str, list[LoadLevel], SweepFigures | None]]:
    """(label, mode, judged levels, sweep figures) of every answer with goodput."""
    out: list[tuple[str, str, list[LoadLevel], SweepFigures | None]] = []
    mode: str
    for ans in lab.answers if lab is not None else []:
        f = ans.figures
        if isinstance(f, SweepFigures):
            # A rate sweep's throughput probe is a closed loop: drawn as a line, not a point.
            probes = [p for p in f.probes if f.mode == "concurrency" or p.role != "throughput"]
            rows, mode, sweep = [p.level for p in probes], f.mode, f
        elif isinstance(f, LoadFigures):
            rows, mode, sweep = f.levels, f.mode, None
        else:
            continue
        rows = [r for r in rows if r.slo is not None and r.ok]
        if rows:
            out.append((f"{ans.provider} · {ans.experiment}", mode, rows, sweep))
    return out[:_MAX_SERIES]


def goodput_chart(lab: LabResults | None) -> Chart | None:
    """Goodput beside completed throughput against load, the sweeps' knees marked."""
    series = _series(lab)
    levels: list[dict[str, Any]] = []
    marks: list[dict[str, Any]] = []
    for label, mode, rows, sweep in series:
        for r in rows:
            at = {"series": label, "x": _axis_value(mode, r), "level": r.display_title}
            met = "met" if r.slo and r.slo.passed else "missed an SLO"
            good = r.slo.goodput_rps if r.slo else None
            levels.append({**at, "what": "goodput", "rps": good or 0.0, "slo": met})
            levels.append({**at, "what": "completed", "rps": r.completed_rps or 0.0, "slo": met})
        if sweep is not None and sweep.knee is not None:
            marks.append(
                {"series": label, "knee": sweep.knee, "lo": sweep.knee_low, "hi": sweep.knee_high}
            )
        if sweep is not None and sweep.mode == "rate" and sweep.throughput_rps is not None:
            marks.append({"series": label, "throughput": sweep.throughput_rps})
    if not levels:
        return None
    title = level_axis_title({mode for _, mode, _, _ in series})
    x = {"field": "x", "type": "quantitative", "title": title}
    color = {"field": "series", "type": "nominal", "title": None}
    layer: list[dict[str, Any]] = [
        {
            "params": [legend_pick("series")],
            "mark": {"type": "line", "point": True},
            "encoding": {
                "x": x,
                "y": {"field": "rps", "type": "quantitative", "title": "requests/s"},
                "color": color,
                "strokeDash": {
                    "field": "what",
                    "type": "nominal",
                    "title": None,
                    "scale": {"domain": ["goodput", "completed"]},
                },
                "opacity": PICKED,
                "tooltip": [
                    {"field": "series"},
                    {"field": "level"},
                    {"field": "what"},
                    {"field": "rps", "format": ".2f", "title": "req/s"},
                    {"field": "slo", "title": "SLOs"},
                ],
            },
        },
        {
            "transform": [{"filter": "datum.slo != 'met' && datum.what == 'goodput'"}],
            "mark": {"type": "point", "shape": "cross", "size": 120, "color": "#cf222e"},
            "encoding": {"x": x, "y": {"field": "rps", "type": "quantitative"}},
        },
    ]
    if marks:
        layer += [
            {
                "data": {"values": marks},
                "transform": [{"filter": "datum.lo != null && datum.hi != null"}],
                "mark": {"type": "rect", "opacity": 0.12},
                "encoding": {
                    "x": {"field": "lo", "type": "quantitative"},
                    "x2": {"field": "hi"},
                    "color": color,
                },
            },
            {
                "data": {"values": marks},
                "transform": [{"filter": "datum.knee != null"}],
                "mark": {"type": "rule", "strokeDash": [6, 3]},
                "encoding": {
                    "x": {"field": "knee", "type": "quantitative"},
                    "color": color,
                    "tooltip": [
                        {"field": "series"},
                        {"field": "knee"},
                        {"field": "lo"},
                        {"field": "hi"},
                    ],
                },
            },
            {
                "data": {"values": marks},
                "transform": [{"filter": "datum.throughput != null"}],
                "mark": {"type": "rule", "strokeDash": [2, 2]},
                "encoding": {"y": {"field": "throughput", "type": "quantitative"}, "color": color},
            },
        ]
    spec = {
        "$schema": _SCHEMA,
        "data": {"values": levels},
        "width": 640,
        "height": 280,
        "layer": layer,
    }
    return Chart(
        "goodput",
        "Goodput against load",
        spec,
        "Goodput (solid: requests/s that met every SLO) beside all completed requests/s "
        "(dashed), per level; "
        "a red cross marks a level that missed an SLO. A sweep's knee (dashed rule) is the "
        "largest load that met; the shaded band is the interval the true knee lies in; a "
        "rate sweep's throughput probe (closed loop) is the dotted horizontal rule.",
    )


def sweep_section(run: RunData) -> list[Block]:
    """The goodput chart, and one table per sweep answer: its probes in order, and the knee
    in words (a load run judged against SLOs: the chart alone)."""
    sweeps = [
        (a, a.figures)
        for a in (run.lab.answers if run.lab is not None else [])
        if isinstance(a.figures, SweepFigures)
    ]
    chart = goodput_chart(run.lab)
    if not sweeps:
        return [Heading("Goodput against load"), ChartBlock(chart)] if chart else []
    blocks: list[Block] = [
        Heading("Sweeps"),
        Para(
            "Each sweep's levels in the order they ran: the synchronous baseline, the "
            "throughput probe, then the bisection. A level passes when its requests show, at "
            "95%, that every SLO holds for its percentile of requests (a failed request "
            "misses them all) and it did not saturate; fails when they show an SLO does not "
            "hold, or it saturated; is undecided otherwise, after running again twice as long "
            "up to the sweep's bound. Goodput counts the requests that met every SLO, per "
            "second.",
            "note",
        ),
        *([ChartBlock(chart)] if chart else []),
    ]
    for ans, f in sweeps:
        assert isinstance(f, SweepFigures)
        blocks.append(Heading(f"{ans.provider} · {ans.experiment}", 3))
        refuted = (
            f"no open-loop rate met the SLOs (the baseline's rate missed in open loop; the "
            f"knee lies below {fmt_num(f.knee_high, 2)} req/s)"
            if f.baseline_refuted
            else "no level met the SLOs"
        )
        knee = (
            refuted
            if f.knee is None
            else f"knee {fmt_num(f.knee, 2)} in [{fmt_num(f.knee_low, 2)}, "
            f"{fmt_num(f.knee_high, 2)}), goodput there {fmt_num(f.knee_goodput_rps, 2)} req/s"
        )
        blocks.append(Para(f"{knee}; stopped: {f.stopped}."))
        cells = [
            [
                str(p.step),
                p.role,
                p.level.display_title,
                fmt_num(p.level.completed_rps, 2),
                fmt_num(p.level.slo.goodput_rps if p.level.slo else None, 2),
                fmt_num(p.level.ttft_ms_p90),
                fmt_num(p.level.decode_ms_per_token_p50),
                p.verdict,
                f"{p.level.requests} ({p.requests_sent} sent)",
                p.why or "—",
            ]
            for p in f.probes
        ]
        labels = ["step", "role", "level", "completed req/s", "goodput req/s"]
        labels += ["TTFT p90", "decode ms/tok p50", "verdict", "requests", "why not"]
        blocks.append(Table(labels, cells, {0, 3, 4, 5, 6}))
    return blocks


register_report(KindReport("sweep", section=sweep_section, rank=40))
