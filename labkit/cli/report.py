"""`labkit report RUN_DIR` and `labkit compare RUN_DIR RUN_DIR...`, registered on the app.

The main CLI calls `register(app)`; the commands stay thin: every error a user can cause is
a `LabkitError`, printed as one red ``error: ...`` line on stderr with exit status 1.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table as RichTable
from rich.text import Text

from labkit.errors import ConfigError, LabkitError, RunError
from labkit.report.build import write_report
from labkit.report.compare import (
    DEFAULT_RESAMPLES,
    DEFAULT_SEED,
    GATE_METRICS,
    Comparison,
    comparison_rows,
    parse_threshold,
    write_comparison,
)
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
    fail_on: Annotated[
        list[str] | None,
        typer.Option(
            "--fail-on",
            help="Exit 1 when a change crosses this limit, e.g. 'ttft_p50>+10%', "
            "'e2e_p90>+50ms', 'tokens_per_s_p50<-5%', 'error_rate>+1pp'. Repeat it, or "
            "separate several with commas. Metrics: " + ", ".join(GATE_METRICS) + ".",
        ),
    ] = None,
    markdown: Annotated[
        Path | None,
        typer.Option(
            "--markdown",
            help="Also write the comparison as Markdown for a CI job summary to this file "
            "('-': to stdout, instead of the table).",
        ),
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out", help="Folder for compare.md/.html/.csv (default: next to the first run)."
        ),
    ] = None,
    seed: Annotated[int, typer.Option(help="Seed of the bootstrap resampling.")] = DEFAULT_SEED,
    resamples: Annotated[
        int, typer.Option(help="Bootstrap resamples per comparison (at least 100).")
    ] = DEFAULT_RESAMPLES,
) -> None:
    """Compare runs with the first: each metric's change, its interval, a verdict; a CI gate.

    Exit status: 0 when no --fail-on limit is crossed, 1 when one is (each named on stderr)
    or a run folder cannot be read, 2 for a malformed --fail-on expression.
    """
    to_stdout = markdown is not None and str(markdown) == "-"
    console = SafeConsole(highlight=False)
    if not console.is_terminal:  # logs and CI job output: wide enough for the table
        console.width = max(console.width, 160)
    try:
        thresholds = [
            parse_threshold(part)
            for text in fail_on or []
            for part in text.split(",")
            if part.strip()
        ]
    except ConfigError as exc:
        SafeConsole(stderr=True, highlight=False).print(
            Text(f"error: {exc}", style="red"), soft_wrap=True
        )
        raise typer.Exit(2) from None
    try:
        how = Comparison(seed=seed, resamples=resamples)
        result = write_comparison(run_dirs, out, thresholds, how)
    except LabkitError as exc:
        raise _fail(exc) from None
    folder, gate, text = result.folder, result.gate, result.markdown
    for note in result.notes:
        SafeConsole(stderr=True, highlight=False).print(Text(f"note: {note}"), soft_wrap=True)
    if markdown is not None and not to_stdout:
        try:
            markdown.write_text(text, encoding="utf-8")
        except OSError as exc:
            raise _fail(RunError(f"cannot write {markdown}: {exc}")) from None
    if to_stdout:
        sys.stdout.write(text)
    else:
        cols, rows = comparison_rows(result.table)
        rich_table = RichTable(title="change from the first run, with its interval")
        for i, col in enumerate(cols):
            rich_table.add_column(col, justify="right" if 5 <= i <= 8 else "left")
        for row in rows:
            rich_table.add_row(*row)
        console.print(rich_table)
        console.print(Text(f"written: {folder / 'compare.md'}"), soft_wrap=True)
        console.print(Text(f"written: {folder / 'compare.html'}"), soft_wrap=True)
    if gate is not None:
        err = SafeConsole(stderr=True, highlight=False)
        if gate.passed:
            err.print(Text(f"gate passed ({gate.checked} comparison(s) checked)", "green"))
        else:
            for failure in gate.failures:
                err.print(Text(f"FAILED {failure}", style="red"), soft_wrap=True)
            raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    """Add the `report` and `compare` commands to `app`."""
    app.command("report")(report_command)
    app.command("compare")(compare_command)
