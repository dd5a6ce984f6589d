"""`labkit score` and `labkit import-results`, and the truth server behind ``fake-server --truth``.

    labkit score TRUTH_LOG RESULTS [--format F] [--out DIR]
    labkit import-results RESULTS [--format F] [--out DIR] [--provider ID] [--model M]

The commands stay thin: every error a user can cause is a `LabkitError`, printed as one red
``error: ...`` line on stderr with exit status 1.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table as RichTable
from rich.text import Text

from labkit.errors import LabkitError
from labkit.terminal import SafeConsole

__all__ = ["register", "serve_truth"]

_FORMATS = "labkit, guidellm, aiperf, vllm"


def _fail(exc: LabkitError) -> typer.Exit:
    SafeConsole(stderr=True, highlight=False).print(
        Text(f"error: {exc}", style="red"), soft_wrap=True
    )
    return typer.Exit(1)


def score_command(
    truth_log: Annotated[Path, typer.Argument(help="The log of `labkit fake-server --truth`.")],
    results: Annotated[
        Path,
        typer.Argument(
            help="The client's results: a labkit run folder, GuideLLM's benchmarks JSON, "
            "AIPerf's profile_export.jsonl or `vllm bench serve --save-detailed`'s JSON."
        ),
    ],
    fmt: Annotated[
        str | None, typer.Option("--format", help=f"Which client wrote RESULTS: {_FORMATS}.")
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option(help="Also write score.md, score.json and the picture to this folder."),
    ] = None,
) -> None:
    """Score a benchmark client against the truth server: its error per request and metric."""
    from labkit.scoring.peers import read_results
    from labkit.scoring.render import score_table, summary_lines, write_score
    from labkit.scoring.score import score
    from labkit.truth.log import read_truth_log

    console = SafeConsole(highlight=False)
    try:
        truth = read_truth_log(truth_log)
        result = score(read_results(results, fmt), truth)
    except LabkitError as exc:
        raise _fail(exc) from None
    try:
        paths = write_score(result, out) if out is not None else []
    except OSError as exc:
        raise _fail(LabkitError(f"cannot write the score: {exc.strerror or exc}")) from None
    cols, rows = score_table(result)
    table = RichTable(title=f"{result.client}: error against the truth")
    for i, col in enumerate(cols):
        table.add_column(col, justify="left" if i == 0 else "right")
    for row in rows:
        table.add_row(*row)
    console.print(table)
    for line in summary_lines(result):
        console.print(Text(line), soft_wrap=True)
    for path in paths:
        console.print(Text(f"written: {path}"), soft_wrap=True)


def import_command(
    results: Annotated[Path, typer.Argument(help="A peer's results file (see `labkit score`).")],
    fmt: Annotated[
        str | None, typer.Option("--format", help=f"Which client wrote RESULTS: {_FORMATS}.")
    ] = None,
    out: Annotated[Path, typer.Option(help="Folder the run folder is created in.")] = Path(
        "results"
    ),
    provider: Annotated[
        str | None,
        typer.Option(help="Provider id of the records (to compare with a labkit run's)."),
    ] = None,
    experiment: Annotated[str, typer.Option(help="Experiment of the records.")] = "load",
    model: Annotated[str, typer.Option(help="Model of the records.")] = "unknown",
) -> None:
    """Turn a peer's results into a labkit run folder (report, compare, read_runs read it)."""
    from labkit.scoring.imports import import_results
    from labkit.scoring.peers import read_results

    console = SafeConsole(highlight=False)
    try:
        run = import_results(
            read_results(results, fmt), out, provider=provider, experiment=experiment, model=model
        )
    except LabkitError as exc:
        raise _fail(exc) from None
    console.print(Text(f"run folder: {run.folder} ({run.records} records)"), soft_wrap=True)
    console.print(
        Text("not measured by this client (null): " + ", ".join(run.not_measured)),
        soft_wrap=True,
    )


def serve_truth(
    *,
    port: int,
    truth_log: Path,
    ttft_ms: float,
    interval_ms: float,
    tokens: int,
    slots: int,
    jitter_ms: float,
    prefill_ms_per_token: float,
    tokens_per_event: int,
    keepalive_ms: float,
    schedule_file: Path | None,
    seed: int,
) -> None:
    """Run the truth server in the foreground (``labkit fake-server --truth LOG``)."""
    from labkit.truth.schedule import TruthSchedule
    from labkit.truth.server import Server, serve

    console = SafeConsole(highlight=False)
    try:
        schedule = TruthSchedule(
            ttft_ms=ttft_ms,
            interval_ms=interval_ms,
            tokens=tokens,
            slots=slots,
            jitter_ms=jitter_ms,
            prefill_ms_per_token=prefill_ms_per_token,
            tokens_per_event=tokens_per_event,
            keepalive_ms=keepalive_ms,
        )

        def ready(server: Server) -> None:
            console.print(
                Text(
                    f"truth server at http://127.0.0.1:{server.port}/v1 (chat/completions, "
                    f"completions, responses, messages, models); truth log {truth_log} "
                    "(Ctrl-C stops)"
                ),
                soft_wrap=True,
            )

        serve(
            schedule,
            port=port,
            truth_log=truth_log,
            schedule_file=schedule_file,
            seed=seed,
            on_ready=ready,
        )
    except LabkitError as exc:
        raise _fail(exc) from None
    except OSError as exc:
        reason = exc.strerror or exc
        raise _fail(LabkitError(f"cannot serve on 127.0.0.1:{port}: {reason}")) from None


def register(app: typer.Typer) -> None:
    """Add the `score` and `import-results` commands to `app`."""
    app.command("score")(score_command)
    app.command("import-results")(import_command)
