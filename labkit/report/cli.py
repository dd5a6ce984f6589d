"""`labkit report RUN_DIR` and `labkit compare RUN_DIR RUN_DIR...`, registered on the app.

The main CLI calls `register(app)`; the commands stay thin: every error a user can cause is
a `LabkitError`, printed as one red ``error: ...`` line on stderr with exit status 1.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table as RichTable
from rich.text import Text

from labkit.errors import LabkitError
from labkit.report.build import write_report
from labkit.report.compare import compare_runs, comparison_rows, write_comparison
from labkit.terminal import SafeConsole

__all__ = ["register"]


def _fail(exc: LabkitError) -> typer.Exit:
    SafeConsole(stderr=True, highlight=False).print(
        Text(f"error: {exc}", style="red"), soft_wrap=True
    )
    return typer.Exit(1)


def report_command(
    run_dir: Annotated[Path, typer.Argument(help="A run folder (holds records.jsonl).")],
) -> None:
    """Regenerate report.md, report.html and summary.csv/.parquet in RUN_DIR."""
    console = SafeConsole(highlight=False)
    try:
        paths = write_report(run_dir)
    except LabkitError as exc:
        raise _fail(exc) from None
    for label, path in (
        ("markdown", paths.md),
        ("html", paths.html),
        ("csv", paths.csv),
        ("parquet", paths.parquet),
    ):
        console.print(Text(f"{label:9} {path}"), soft_wrap=True)


def compare_command(
    run_dirs: Annotated[
        list[Path], typer.Argument(help="Two or more run folders; the first is the baseline.")
    ],
    out: Annotated[
        Path | None,
        typer.Option(
            "--out", help="Folder for compare.md/.html/.csv (default: next to the first run)."
        ),
    ] = None,
) -> None:
    """Put runs side by side: p50/p90 per provider and their change from the first run."""
    console = SafeConsole(highlight=False)
    try:
        table = compare_runs(run_dirs)
        folder = write_comparison(run_dirs, out)
    except LabkitError as exc:
        raise _fail(exc) from None
    cols, rows = comparison_rows(table)
    rich_table = RichTable(title="p50 / p90 per run (Δ from the first run)")
    for i, col in enumerate(cols):
        rich_table.add_column(col, justify="right" if i >= 5 else "left")
    for row in rows:
        rich_table.add_row(*row)
    console.print(rich_table)
    console.print(Text(f"written: {folder / 'compare.md'}"), soft_wrap=True)
    console.print(Text(f"written: {folder / 'compare.html'}"), soft_wrap=True)


def register(app: typer.Typer) -> None:
    """Add the `report` and `compare` commands to `app`."""
    app.command("report")(report_command)
    app.command("compare")(compare_command)
