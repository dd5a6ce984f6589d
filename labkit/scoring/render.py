"""A `Score` for people: its table (terminal and Markdown), its picture, its JSON.

The table gives each metric's median and p99 error with their intervals as every labkit
table does (`labkit.analysis.stats.describe`: a p99 the sample cannot support is not
printed), the largest error and n; the picture (Vega-Lite, `labkit.report.charts.Chart`)
shows each request's error per time metric, so a bias and its spread read at a glance.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from labkit.analysis.stats import describe
from labkit.report.charts import Chart
from labkit.safefiles import write_new_file
from labkit.scoring.score import METRICS, Score
from labkit.scrub import for_people, scrub_json

__all__ = ["score_chart", "score_markdown", "score_table", "write_score"]

_SCHEMA = "https://vega.github.io/schema/vega-lite/v5.json"
_TIME_METRICS = [m for m in METRICS if m.unit == "ms" and m.name != "event_stamp"]


def _max(value: float | None, unit: str) -> str:
    return "—" if value is None else f"{value:.3g} {unit}"


def score_table(s: Score) -> tuple[list[str], list[list[str]]]:
    """Column labels and cells: one row per metric the client measured."""
    cols = ["metric", "error median", "error p99", "largest error", "n"]
    rows = []
    for m in s.metrics:
        if m.n == 0:
            continue
        unit = m.metric.unit
        rows.append(
            [
                m.metric.title,
                describe(m.p50, unit),
                describe(m.p99, unit),
                _max(m.max, unit),
                str(m.n),
            ]
        )
    return cols, rows


def summary_lines(s: Score) -> list[str]:
    """How the requests were matched, and what the client did not measure."""
    lines = [
        f"{s.client} against {s.truth}: {s.matched_by['id']} request(s) matched by id, "
        f"{s.matched_by['time']} by time; {s.unmatched_client} of the client's unmatched, "
        f"{s.unmatched_truth} of the server's unmatched; {s.failed} failed (not scored).",
        "error = the client's value − the truth (ms unless said); request start = the "
        "client's start − the server's read of the request.",
    ]
    if s.not_measured:
        titles = [m.metric.title for m in s.metrics if m.metric.name in s.not_measured]
        lines.append("not measured by this client: " + ", ".join(titles) + ".")
    return lines


def _markdown_text(text: str) -> str:
    """Text from a peer's file fit for one Markdown line or table cell: no terminal
    controls, no line breaks, no secret, `|` escaped."""
    return for_people(text).replace("\n", " ").replace("\t", " ").replace("|", "\\|")


def score_markdown(s: Score) -> str:
    """The score as GitHub-flavoured Markdown (a peer's own text in it cleaned of terminal
    controls and line breaks)."""
    cols, rows = score_table(s)
    lines = [_markdown_text(line) for line in summary_lines(s)]
    out = [f"## How exact is {_markdown_text(s.client)}?", "", *lines, ""]
    out.append("| " + " | ".join(cols) + " |")
    out.append("|" + "|".join("---" for _ in cols) + "|")
    out += ["| " + " | ".join(_markdown_text(c) for c in r) + " |" for r in rows]
    return "\n".join(out) + "\n"


def score_chart(s: Score) -> Chart | None:
    """Each request's error per time metric (ms), one row of points and a box per metric."""
    values = [
        {"metric": m.title, "error_ms": row[f"{m.name}_error"], "request": row["index"]}
        for row in s.rows
        for m in _TIME_METRICS
        if row.get(f"{m.name}_error") is not None
    ]
    if not values:
        return None
    y = {"field": "metric", "type": "nominal", "title": None, "sort": [m.title for m in METRICS]}
    x = {"field": "error_ms", "type": "quantitative", "title": "client − truth (ms)"}
    spec: dict[str, Any] = {
        "$schema": _SCHEMA,
        "title": f"{s.client}: error per request against the truth server",
        "width": 640,
        "data": {"values": values},
        "layer": [
            {
                "mark": {"type": "boxplot", "extent": "min-max", "opacity": 0.4},
                "encoding": {"x": x, "y": y},
            },
            {
                "mark": {"type": "tick", "opacity": 0.5},
                "encoding": {
                    "x": x,
                    "y": y,
                    "tooltip": [{"field": "request"}, {"field": "error_ms", "format": ".3f"}],
                },
            },
        ],
    }
    caption = (
        "Each tick is one request's error (the client's value − the truth); 0 is exact. "
        + " ".join(summary_lines(s)[:1])
    )
    return Chart("score", "How exact is the client?", spec, caption)


def score_json(s: Score) -> dict[str, Any]:
    """Every figure and every row (the ``score.json`` file)."""
    return {
        "client": s.client,
        "truth": s.truth,
        "matched_by": s.matched_by,
        "unmatched_client": s.unmatched_client,
        "unmatched_truth": s.unmatched_truth,
        "failed": s.failed,
        "not_measured": s.not_measured,
        "metrics": {
            m.metric.name: {
                "title": m.metric.title,
                "unit": m.metric.unit,
                "n": m.n,
                "median": m.p50.model_dump(),
                "p99": m.p99.model_dump(),
                "max": m.max,
                "mean": m.mean,
            }
            for m in s.metrics
        },
        "requests": s.rows,
    }


def _finite(data: Any) -> Any:
    """`data` with every NaN or infinity as None (JSON has neither)."""
    if isinstance(data, float) and not math.isfinite(data):
        return None
    if isinstance(data, dict):
        return {k: _finite(v) for k, v in data.items()}
    if isinstance(data, list | tuple):
        return [_finite(v) for v in data]
    return data


def _strict_json(data: Any) -> str:
    """`data` as standard JSON (no NaN: null), scrubbed of secrets."""
    return scrub_json(json.dumps(_finite(data), indent=1, allow_nan=False)) + "\n"


def write_score(s: Score, folder: Path) -> list[Path]:
    """Write score.md, score.json, score.vl.json and score.png into `folder`, each as a new
    file (`labkit.safefiles`: a link planted at one of the names is replaced, never
    written through)."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / "score.md", folder / "score.json"]
    write_new_file(paths[0], score_markdown(s))
    write_new_file(paths[1], _strict_json(score_json(s)))
    chart = score_chart(s)
    if chart is not None:
        spec_path, png_path = folder / "score.vl.json", folder / "score.png"
        write_new_file(spec_path, _strict_json(chart.spec))
        write_new_file(png_path, chart.png)
        paths += [spec_path, png_path]
    return paths
