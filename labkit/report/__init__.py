"""The report: run folders in, statistics, attribution, figures and comparisons out.

It reads run folders (records.jsonl, manifest.json, lab.json) and imports only
`labkit.records` and `labkit.errors`, so it works on a run copied from another machine.
`load` reads them into DataFrames; `stats` and `split` are the report's tables, `charts` and
`run_charts` its pictures (Vega-Lite specs), `kinds/` each experiment kind's part; `render`
writes Markdown and self-contained HTML, `build` is `write_report`, `compare` the regression
gate. `labkit report` and `labkit compare` are in `labkit.cli.report`. Each module's docstring
says more; the whole map: docs/architecture.md.
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
