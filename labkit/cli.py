"""The `labkit` command: a thin face over the runner, the local server and the report.

    labkit run CONFIG [--out DIR] [--repeats N] [--provider ID]... [--experiment KIND]...
    labkit run --resume RUN_DIR
    labkit setup | server start|status|stop          (labkit.local.cli)
    labkit report RUN_DIR | compare RUN_DIR...       (labkit.report.cli)
    labkit fake-server [--port N] [schedule options]
    labkit kinds

Every user error is one red line on stderr and a non-zero exit, never a traceback.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn

from labkit.config import load_config
from labkit.errors import LabkitError
from labkit.experiments import experiment_kinds
from labkit.local.cli import register as register_local
from labkit.providers import provider_kinds
from labkit.providers.fake import FakeSchedule
from labkit.records import ErrorKind
from labkit.report.cli import register as register_report
from labkit.runner import (
    ProviderOutcome,
    Runner,
    RunOptions,
    RunResult,
    prepare_resume,
    prepare_run,
    run_lab,
    summary_table,
    ttft_p50,
)
from labkit.runner.summary import load_tables
from labkit.scrub import guard_std_streams
from labkit.selfcheck import client_bound_notes
from labkit.terminal import SafeConsole

__all__ = ["app", "main"]

app = typer.Typer(
    name="labkit",
    help="Measure what happens to an LLM request: tokens, TTFT, decode, stop reasons, "
    "and whose time it was.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
console = SafeConsole()
if not console.is_terminal:  # logs and CI: wide enough for the summary table
    console.width = max(console.width, 140)
err_console = SafeConsole(stderr=True)


def fail(message: str, code: int = 1) -> typer.Exit:
    """Print one red error line and return the Exit to raise."""
    err_console.print(f"[bold red]error:[/] {escape(message)}")
    return typer.Exit(code)


class _ProgressView:
    """A live bar per provider: requests done/failed and the current TTFT p50."""

    def __init__(self, progress: Progress) -> None:
        self.progress = progress
        self.tasks: dict[str, TaskID] = {}

    def update(self, o: ProviderOutcome) -> None:
        if o.id not in self.tasks:
            self.tasks[o.id] = self.progress.add_task(o.id, total=None, status="starting")
        p50 = ttft_p50(o)
        status = f"ok {o.done - o.failed}  failed {o.failed}"
        if p50 is not None:
            status += f"  TTFT p50 {p50:.1f} ms"
        if o.status in ("skipped", "failed", "interrupted"):
            status += f"  [{o.status}]"
        self.progress.update(
            self.tasks[o.id], completed=o.done, total=max(o.planned, o.done) or None, status=status
        )


def _execute(runner: Runner) -> RunResult:
    # The live display redraws from its own thread. A Python thread holds the GIL for up to
    # the switch interval (5 ms by default) before the event loop gets it back, which would
    # delay an event's stamp by as much; a 0.5 ms interval and a slow redraw keep that small
    # (each record's `client.loop_lag_ms` shows what remained).
    previous_interval = sys.getswitchinterval()
    sys.setswitchinterval(0.0005)
    progress = Progress(
        TextColumn("[bold]{task.description:<16}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[status]}"),
        console=console,
        transient=False,
        refresh_per_second=2,
    )
    view = _ProgressView(progress)
    runner.on_progress = view.update
    runner.on_message = lambda m: progress.console.print(escape(m))
    try:
        with progress:
            return asyncio.run(run_lab(runner))
    finally:
        sys.setswitchinterval(previous_interval)


@app.command()
def run(
    config: Annotated[Path | None, typer.Argument(help="A YAML config (configs/*.yaml).")] = None,
    out: Annotated[Path | None, typer.Option("--out", help="Output folder for runs.")] = None,
    repeats: Annotated[
        int | None, typer.Option("--repeats", min=1, help="Override every experiment's repeats.")
    ] = None,
    provider: Annotated[
        list[str] | None, typer.Option("--provider", help="Run only this provider id (repeatable).")
    ] = None,
    experiment: Annotated[
        list[str] | None, typer.Option("--experiment", help="Run only this kind (repeatable).")
    ] = None,
    resume: Annotated[
        Path | None, typer.Option("--resume", help="Finish an interrupted run folder.")
    ] = None,
    report: Annotated[bool, typer.Option(help="Write the report at the end.")] = True,
) -> None:
    """Run a config against every available provider and write a run folder."""
    try:
        if resume is not None:
            runner = prepare_resume(resume)
        elif config is None:
            raise fail("give a CONFIG to run, or --resume RUN_DIR")
        else:
            cfg = load_config(config)
            runner = prepare_run(
                cfg,
                RunOptions(
                    out_dir=out,
                    repeats=repeats,
                    providers=provider,
                    experiments=experiment,
                    config_path=str(config),
                ),
            )
    except LabkitError as exc:
        raise fail(str(exc)) from None
    folder = runner.folder.path
    console.print(f"run folder: [bold]{escape(str(folder))}[/]")
    try:
        result = _execute(runner)
    except KeyboardInterrupt:
        kept = sum(1 for _ in runner.folder.read_records())
        err_console.print(
            f"[bold yellow]interrupted:[/] {kept} records kept in {escape(str(folder))}; "
            f"finish it with: labkit run --resume {escape(str(folder))}"
        )
        raise typer.Exit(130) from None
    except LabkitError as exc:
        raise fail(f"{exc} (records so far are kept in {folder})") from None
    _print_result(result)
    if report:
        _write_report(folder)
    if not any(o.status == "ok" for o in result.outcomes):
        reasons = "; ".join(f"{o.id}: {o.reason}" for o in result.outcomes if o.reason)
        raise fail(f"no provider completed a request ({reasons})")


def _print_summary(result: RunResult, out: Console, *, outcomes: bool = True) -> None:
    """The summary table, load levels, client-bound warnings, the providers that did not
    run (`outcomes`), and the lab's answers."""
    if any(not r.warmup for r in result.records):
        out.print(summary_table(result.records, title=f"run {result.folder.run_id}"))
    for table in load_tables(result.lab):
        out.print(table)
    for note in client_bound_notes(result.records):
        out.print(f"[bold yellow]warning:[/] {escape(note)}")
    internal = [r.error for r in result.records if r.error and r.error.kind == ErrorKind.INTERNAL]
    if internal:
        out.print(
            f"[bold red]internal errors:[/] {len(internal)} request(s) hit a labkit bug and were "
            f"recorded with error.kind = internal (first: {escape(internal[0].message)})"
        )
    if outcomes:
        for o in result.outcomes:
            if o.status != "ok":
                out.print(f"{o.id}: {o.status} — {escape(o.reason or '')}")
    for a in result.lab.answers:
        out.print(f"[bold]{escape(a.experiment)} · {escape(a.provider)}:[/] {escape(a.answer)}")


def _print_result(result: RunResult) -> None:
    # The same summary goes into the run folder, as plain text.
    with (result.folder.path / "summary.txt").open("w", encoding="utf-8") as f:
        _print_summary(result, SafeConsole(file=f, width=140, no_color=True, emoji=False))
    # On screen, skipped and failed providers were already said, once, as it happened.
    _print_summary(result, console, outcomes=False)
    console.print(f"summary: {escape(str(result.folder.path / 'summary.txt'))}")
    console.print(f"records: {escape(str(result.folder.records_path))}")
    console.print(f"lab answers: {escape(str(result.folder.path / 'lab.json'))}")


def _write_report(folder: Path) -> None:
    from labkit.report import write_report

    try:
        paths = write_report(folder)
    except LabkitError as exc:
        err_console.print(f"[yellow]report not written:[/] {escape(str(exc))}")
        return
    console.print(f"report: [bold]{escape(str(paths.html))}[/] (and {escape(paths.md.name)})")


@app.command("fake-server")
def fake_server(
    port: Annotated[int, typer.Option(help="Port on 127.0.0.1 (0: any free port).")] = 8000,
    first_token_ms: Annotated[float, typer.Option(help="Delay of the first token.")] = 50.0,
    token_interval_ms: Annotated[float, typer.Option(help="Gap between tokens.")] = 10.0,
    tokens: Annotated[int, typer.Option(help="Tokens per response.")] = 32,
) -> None:
    """Serve the fake provider's schedule as an OpenAI-compatible server on 127.0.0.1."""
    from labkit.fakeserver import FakeServer

    schedule = FakeSchedule(
        first_token_ms=first_token_ms, token_interval_ms=token_interval_ms, tokens=tokens
    )
    server = FakeServer(schedule, port=port)

    async def serve() -> None:
        await server.start()
        console.print(f"fake OpenAI-compatible server at [bold]{server.base_url}[/] (Ctrl-C stops)")
        await server.serve_forever()

    try:
        asyncio.run(serve())
    except KeyboardInterrupt:
        pass
    except OSError as exc:
        raise fail(f"cannot serve on 127.0.0.1:{port}: {exc.strerror or exc}") from None


@app.command()
def kinds() -> None:
    """List the provider and experiment kinds a config may use."""
    console.print("providers:   " + ", ".join(provider_kinds()))
    console.print("experiments: " + ", ".join(experiment_kinds()))


register_local(app)
register_report(app)


def main() -> None:
    """Console-script entry point."""
    guard_std_streams()  # tracebacks and warnings too: no key reaches the terminal
    app()
