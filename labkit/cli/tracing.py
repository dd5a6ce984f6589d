"""`labkit export-otel RUN_DIR`: an old run's records as OpenTelemetry spans and metrics,
registered on the app. They are the ones the run exports when `tracing:` names a destination
(`labkit.tracing.export`); an error a user can cause is one red ``error: ...`` line."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from labkit.errors import LabkitError
from labkit.terminal import SafeConsole
from labkit.tracing.settings import (
    METRICS_FILE,
    TRACES_FILE,
    TracingSettings,
    otlp_metrics_endpoint,
    otlp_traces_endpoint,
)

__all__ = ["register"]


def export_otel_command(
    run_dir: Annotated[Path, typer.Argument(help="The run folder (holding records.jsonl).")],
    endpoint: Annotated[
        str | None,
        typer.Option(
            help="OTLP/HTTP collector base URL (spans go to /v1/traces, metrics to "
            "/v1/metrics); default: the OTEL_EXPORTER_OTLP_TRACES_ENDPOINT / "
            "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT / OTEL_EXPORTER_OTLP_ENDPOINT variables."
        ),
    ] = None,
    file: Annotated[
        Path | None,
        typer.Option(
            help=f"Write the spans as OTLP JSON here; default: RUN_DIR/{TRACES_FILE} when no "
            "endpoint is given or set."
        ),
    ] = None,
    metrics_file: Annotated[
        Path | None,
        typer.Option(
            help=f"Write the metrics as OTLP JSON here; default: {METRICS_FILE} beside the "
            "spans' file, whenever the spans go to one."
        ),
    ] = None,
) -> None:
    """Export a run's records as OpenTelemetry spans and metrics (the same ones the run
    itself sends; the metrics' data points are the same, their timestamps the export's)."""
    out = SafeConsole(highlight=False, soft_wrap=True)
    err = SafeConsole(stderr=True, highlight=False, soft_wrap=True)
    try:
        settings = TracingSettings(otlp_endpoint=endpoint)
    except ValueError:
        err.print("[bold red]error:[/] --endpoint: expected an http:// or https:// URL")
        raise typer.Exit(1) from None
    endpoints = (otlp_traces_endpoint(settings), otlp_metrics_endpoint(settings))
    if file is None and endpoints == (None, None):
        file = run_dir / TRACES_FILE
    if metrics_file is None and file is not None:
        metrics_file = file.with_name(METRICS_FILE)  # beside the spans
    from labkit.tracing.export import export_run_folder  # OpenTelemetry loads only here

    try:
        report = export_run_folder(run_dir, settings, file=file, metrics_file=metrics_file)
    except LabkitError as exc:
        err.print(f"[bold red]error:[/] {escape(str(exc))}")
        raise typer.Exit(1) from None
    out.print(f"exported {escape(report.summary())}")
    if report.problems:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    """Add the `export-otel` command to `app`."""
    app.command("export-otel")(export_otel_command)
