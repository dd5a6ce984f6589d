"""`labkit fake-server`, `labkit score` and `labkit import-results`: the fake server and its truth.

    labkit fake-server [--port N] [--log PATH] [--SETTING VALUE ...]
    labkit score TRUTH_LOG RESULTS [--format F] [--out DIR]
    labkit import-results RESULTS [--format F] [--out DIR] [--provider ID] [--model M]

The commands stay thin: every error a user can cause is a `LabkitError`, printed as one red
``error: ...`` line on stderr with exit status 1.
"""

from __future__ import annotations

import inspect
import math
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, Literal, cast, get_args, get_origin

import typer
from rich.table import Table as RichTable
from rich.text import Text

from labkit.errors import LabkitError
from labkit.terminal import SafeConsole

__all__ = ["fake_server_command", "register"]

_FORMATS = "labkit, guidellm, aiperf, vllm"


def _fail(exc: LabkitError) -> typer.Exit:
    SafeConsole(stderr=True, highlight=False).print(
        Text(f"error: {exc}", style="red"), soft_wrap=True
    )
    return typer.Exit(1)


def score_command(
    truth_log: Annotated[Path, typer.Argument(help="The truth log of `labkit fake-server`.")],
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
    """Score a benchmark client against the truth server: its error per request and metric;
    a labkit lab run's answers are graded too (every stated figure and fact)."""
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
    if (results / "lab.json").is_file():  # a lab run: its answers are graded too
        from labkit.cli.truthrun import print_grade, write_grade
        from labkit.scoring.grading import grade_run

        try:
            grade = grade_run(results, truth)
            paths += write_grade(grade, out) if out is not None else []
        except LabkitError as exc:
            raise _fail(exc) from None
        except OSError as exc:
            raise _fail(LabkitError(f"cannot write the grade: {exc.strerror or exc}")) from None
        print_grade(grade, console)
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
    from labkit.scoring.peers import stream_results

    console = SafeConsole(highlight=False)
    try:
        header, requests = stream_results(results, fmt)
        run = import_results(
            header, out, provider=provider, experiment=experiment, model=model, requests=requests
        )
    except LabkitError as exc:
        raise _fail(exc) from None
    console.print(Text(f"run folder: {run.folder} ({run.records} records)"), soft_wrap=True)
    console.print(
        Text("not measured by this client (null): " + ", ".join(run.not_measured)),
        soft_wrap=True,
    )


def _option_type(annotation: Any) -> type:
    """The CLI type of a schedule field: its number, bool or text type."""
    args = [a for a in get_args(annotation) if a is not type(None)]
    if get_origin(annotation) is Literal or (args and get_origin(args[0]) is Literal):
        return str
    if args and get_origin(annotation) is not Literal:
        annotation = args[0]
    return annotation if annotation in (int, float, bool) else str


def _schedule_option_error(name: str, value: Any) -> str | None:
    """One clear sentence for a schedule option's bad value (None: the value is good)."""
    from labkit.truth.schedule import TruthSchedule

    option = "--" + name.replace("_", "-")
    info = TruthSchedule.model_fields[name]
    if isinstance(value, float) and not math.isfinite(value):
        return f"{option} must be a finite number (got {value})"
    choices = get_args(info.annotation)
    if get_origin(info.annotation) is Literal and value not in choices:
        return f"{option} must be one of {', '.join(map(str, choices))}"
    low = next((getattr(m, "ge", None) for m in info.metadata if hasattr(m, "ge")), None)
    high = next((getattr(m, "le", None) for m in info.metadata if hasattr(m, "le")), None)
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if number and ((low is not None and value < low) or (high is not None and value > high)):
        allowed = f"between {low} and {high}" if high is not None else f"at least {low}"
        return f"{option} must be {allowed} (got {value})"
    return None


def _default_log() -> Path:
    return Path(f"truth-{datetime.now(UTC).strftime('%Y%m%d-%H%M%S')}.jsonl")


def fake_server_command(**options: Any) -> None:
    """Serve the fake LLM API server (OpenAI Chat, Completions, Responses, Anthropic Messages,
    llama.cpp's endpoints) on 127.0.0.1 on a schedule, logging when it sent every event."""
    from labkit.truth.schedule import TruthSchedule
    from labkit.truth.server import Server, serve

    console = SafeConsole(highlight=False)
    port: int = options.pop("port")
    log: Path = options.pop("log") or _default_log()
    schedule_file: Path | None = options.pop("schedule_file")
    seed: int = options.pop("seed")
    model: str = options.pop("model")
    if not 0 <= port <= 65535:
        raise _fail(LabkitError(f"--port must be between 0 and 65535 (got {port})"))
    settings = {k: v for k, v in options.items() if v is not None}
    for name, value in settings.items():
        problem = _schedule_option_error(name, value)
        if problem is not None:
            raise _fail(LabkitError(problem))
    try:
        schedule = TruthSchedule().with_overrides(settings)

        def ready(server: Server) -> None:
            console.print(
                Text(
                    f"fake server at http://127.0.0.1:{server.port}/v1 (chat/completions, "
                    "completions, responses, messages, models; llama.cpp's at the root); "
                    f"truth log {log} (Ctrl-C stops)"
                ),
                soft_wrap=True,
            )

        serve(
            schedule,
            port=port,
            truth_log=log,
            schedule_file=schedule_file,
            seed=seed,
            model=model,
            on_ready=ready,
        )
    except LabkitError as exc:
        raise _fail(exc) from None
    except OSError as exc:
        reason = exc.strerror or exc
        raise _fail(LabkitError(f"cannot serve on 127.0.0.1:{port}: {reason}")) from None


def _fake_server_signature() -> inspect.Signature:
    """`fake_server_command`'s options: its own, then one per schedule setting."""
    from labkit.truth.schedule import TruthSchedule

    def option(name: str, annotation: Any, default: Any) -> inspect.Parameter:
        return inspect.Parameter(
            name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation
        )

    params = [
        option(
            "port", Annotated[int, typer.Option(help="Port on 127.0.0.1 (0: any free port).")], 8000
        ),
        option(
            "log",
            Annotated[
                Path | None,
                typer.Option(
                    help="The truth log (default: truth-<UTC date-time>.jsonl here); "
                    "`labkit score` reads it."
                ),
            ],
            None,
        ),
        option(
            "schedule_file",
            Annotated[
                Path | None,
                typer.Option(help="Per-request schedules, one JSON object a line, cycled."),
            ],
            None,
        ),
        option("seed", Annotated[int, typer.Option(help="Seed of the jitter.")], 0),
        option(
            "model",
            Annotated[str, typer.Option(help="The model /v1/models lists.")],
            "labkit-truth",
        ),
    ]
    for name, info in TruthSchedule.model_fields.items():
        kind = _option_type(info.annotation)
        default = info.default
        help_text = f"{info.description} (default {default})"
        flag = "--" + name.replace("_", "-")
        decls = [f"{flag}/--no-{flag[2:]}"] if kind is bool else [flag]
        option_type = cast(Any, kind) | None
        meta = typer.Option(*decls, help=help_text, show_default=False)
        annotation = Annotated[option_type, meta]  # type: ignore[valid-type]  # built at run time
        params.append(option(name, annotation, None))
    return inspect.Signature(params)


fake_server_command.__signature__ = _fake_server_signature()  # type: ignore[attr-defined]


def register(app: typer.Typer) -> None:
    """Add the `fake-server`, `score` and `import-results` commands to `app`."""
    app.command("fake-server")(fake_server_command)
    app.command("score")(score_command)
    app.command("import-results")(import_command)
