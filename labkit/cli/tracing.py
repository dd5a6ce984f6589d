"""`labkit export-otel RUN_DIR`: an old run's records as OpenTelemetry spans, registered on
the app. The spans are the ones the run exports when `tracing:` names a destination
(`labkit.tracing.export`); an error a user can cause is one red ``error: ...`` line."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from labkit.errors import LabkitError
from labkit.terminal import SafeConsole
from labkit.tracing.settings import TRACES_FILE, TracingSettings, otlp_traces_endpoint

__all__ = ["register"]


def export_otel_command(
    run_dir: Annotated[Path, typer.Argument(help="The run folder (holding records.jsonl).")],
    endpoint: Annotated[
        str | None,
        typer.Option(
            help="OTLP/HTTP collector base URL (spans go to /v1/traces); default: the "
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT / OTEL_EXPORTER_OTLP_ENDPOINT variables."
        ),
    ] = None,
    file: Annotated[
        Path | None,
        typer.Option(
            help=f"Write OTLP JSON here; default: RUN_DIR/{TRACES_FILE} when no endpoint "
            "is given or set."
        ),
    ] = None,
) -> None:
    """Export a run's records as OpenTelemetry spans (the same ones the run itself sends)."""
    out = SafeConsole(highlight=False)
    err = SafeConsole(stderr=True, highlight=False, soft_wrap=True)
    try:
        settings = TracingSettings(otlp_endpoint=endpoint)
    except ValueError:
        err.print("[bold red]error:[/] --endpoint: expected an http:// or https:// URL")
        raise typer.Exit(1) from None
    if file is None and otlp_traces_endpoint(settings) is None:
        file = run_dir / TRACES_FILE
    from labkit.tracing.export import export_run_folder  # OpenTelemetry loads only here

    try:
        report = export_run_folder(run_dir, settings, file=file)
    except LabkitError as exc:
        err.print(f"[bold red]error:[/] {escape(str(exc))}")
        raise typer.Exit(1) from None
    out.print(f"exported {escape(report.summary())}")
    if report.problems:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    """Add the `export-otel` command to `app`."""
    app.command("export-otel")(export_otel_command)
