"""The report: run folders in, statistics, attribution, figures and comparisons out.

It reads run folders (records.jsonl, manifest.json, lab.json) and imports only
`labkit.records` and `labkit.errors`, so it works on a run copied from another machine.

    load.py     run folders → DataFrame (one row per record, dotted contract names)
    stats.py    the request statistics (labkit.analysis.requests) as a table and summary.csv
    split.py    whose time is it: each group's TTFT split, rendered
    charts.py   a picture as a Vega-Lite spec (interactive in HTML, PNG in Markdown
                through vl-convert)
    run_charts.py  the sections' pictures: distributions, client vs server, server queue
    kinds/      each experiment kind's pictures and section, one module per kind,
                registered by kind (the five questions' pictures, load levels,
                conversations, sessions, sweeps, the attribution table)
    render.py   Markdown and self-contained HTML
    build.py    write_report: report.md, report.html, summary.csv, summary.parquet
    compare.py  runs side by side as a gate: changes with bootstrap intervals, verdicts,
                --fail-on thresholds, Markdown summary, distributions overlaid
    (`labkit report` and `labkit compare` are in labkit.cli.report)
"""

from __future__ import annotations

from labkit.report.build import ReportPaths, write_report
from labkit.report.compare import compare_runs, write_comparison
from labkit.report.load import RunData, load_event_offsets, load_run, load_runs
from labkit.report.split import NOT_DERIVABLE, NOT_REPORTED
from labkit.report.stats import run_stats

__all__ = [
    "NOT_DERIVABLE",
    "NOT_REPORTED",
    "ReportPaths",
    "RunData",
    "compare_runs",
    "load_event_offsets",
    "load_run",
    "load_runs",
    "run_stats",
    "write_comparison",
    "write_report",
]
