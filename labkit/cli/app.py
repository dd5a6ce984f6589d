"""The `labkit` command: a thin face over the runner, the local server and the report.

`run` and `kinds` are here; every other command registers from its own module
(docs/architecture.md, "labkit/cli"); every command with all its options: docs/cli.md.
Every user error is one red line on stderr and a non-zero exit, never a traceback. SIGTERM
stops a run as Ctrl-C does (records kept, manifest `interrupted`, exit 143), and so does the
run folder's first failed write (manifest `failed` with the reason, exit 1).
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import gc
import io
import math
import signal
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn

from labkit.analysis.selfcheck import client_bound_advice
from labkit.cli.dashboard import register as register_dashboard
from labkit.cli.examples import example_path
from labkit.cli.examples import register as register_init
from labkit.cli.local import register as register_local
from labkit.cli.report import register as register_report
from labkit.cli.sessions import register as register_sessions
from labkit.cli.store import register as register_store
from labkit.cli.tokens import register as register_tokens
from labkit.cli.tracing import register as register_tracing
from labkit.cli.truth import register as register_truth
from labkit.cli.watch import register as register_watch
from labkit.config import load_config
from labkit.errors import LabkitError
from labkit.experiments import experiment_kinds
from labkit.providers import provider_kinds
from labkit.records import ErrorKind
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
from labkit.runner.gcpolicy import figures_gc
from labkit.runner.summary import load_tables
from labkit.safefiles import write_new_file
from labkit.scrub import guard_std_streams
from labkit.terminal import SafeConsole
from labkit.wire import loopclock
from labkit.wording import client_bound_line

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
err_console = SafeConsole(stderr=True, soft_wrap=True)  # an error is one line, however long


def fail(message: str, code: int = 1) -> typer.Exit:
    """Print one red error line and return the Exit to raise."""
    err_console.print(f"[bold red]error:[/] {escape(message)}")
    return typer.Exit(code)


class _ProgressView:
    """A live bar per provider: requests done/failed and the current TTFT p50.

    `update` (on every record) only notes the outcome; `show` renders what changed, from the
    event loop at `PROGRESS_HZ` (`_supervised`), so no display thread takes the GIL from the
    loop while streams are read and no record pays for a redraw.
    """

    def __init__(self, progress: Progress) -> None:
        self.progress = progress
        self.tasks: dict[str, TaskID] = {}
        self._changed: dict[str, ProviderOutcome] = {}

    def update(self, o: ProviderOutcome) -> None:
        self._changed[o.id] = o

    def show(self) -> None:
        """Render the outcomes noted since the last call."""
        changed, self._changed = self._changed, {}
        for o in changed.values():
            self._render(o)
        self.progress.refresh()

    def _render(self, o: ProviderOutcome) -> None:
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


#: How often the live progress is redrawn (from the event loop).
PROGRESS_HZ = 2


async def _show_progress(view: _ProgressView) -> None:
    """Redraw `view` from the loop `PROGRESS_HZ` times a second until cancelled."""
    while True:
        view.show()
        await asyncio.sleep(1 / PROGRESS_HZ)


class _Stopped(Exception):
    """The run was stopped before its end, like Ctrl-C: by SIGTERM or a failed write."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


_SIGTERM = "SIGTERM"


async def _supervised(runner: Runner, view: _ProgressView | None = None) -> RunResult:
    """`run_lab`, cancelled as Ctrl-C cancels it when SIGTERM arrives or when the run folder
    first fails to write (every later record would be lost); raises `_Stopped` then. `view`:
    the live progress, redrawn from this loop meanwhile."""
    loop = asyncio.get_running_loop()
    main = asyncio.current_task()
    assert main is not None
    stopped: list[str] = []

    def stop(reason: str) -> None:
        if not stopped:  # a second signal must not cut the clean-up short
            stopped.append(reason)
            main.cancel()

    with contextlib.suppress(ValueError, RuntimeError):  # only the main thread may; else default
        loop.add_signal_handler(signal.SIGTERM, stop, _SIGTERM)
    runner.folder.on_write_error = stop
    drawing = None if view is None else asyncio.create_task(_show_progress(view))
    try:
        return await run_lab(runner)
    except asyncio.CancelledError:
        if stopped:
            raise _Stopped(stopped[0]) from None
        raise
    finally:
        if drawing is not None:
            drawing.cancel()
        runner.folder.on_write_error = None
        with contextlib.suppress(ValueError, RuntimeError):
            loop.remove_signal_handler(signal.SIGTERM)


def _execute(runner: Runner) -> RunResult:
    # The live display is redrawn from the event loop (`_supervised`), not from a thread of
    # its own. Another thread (a worker's reader) holds the GIL for up to the switch interval
    # (5 ms by default) before the event loop gets it back, which would delay an event's
    # stamp by as much; a 0.5 ms interval keeps that small (each record's
    # `client.loop_lag_ms` shows what remained).
    previous_interval = sys.getswitchinterval()
    sys.setswitchinterval(0.0005)
    progress = Progress(
        TextColumn("[bold]{task.description:<16}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[status]}"),
        console=console,
        transient=False,
        auto_refresh=False,
    )
    view = _ProgressView(progress)

    def message(text: str) -> None:
        view.show()  # the bars under the line as they are now
        progress.console.print(escape(text))

    runner.on_progress = view.update
    runner.on_message = message
    try:
        with progress:
            try:
                return loopclock.run(_supervised(runner, view))
            finally:
                view.show()
    finally:
        sys.setswitchinterval(previous_interval)


@app.command()
def run(
    config: Annotated[Path | None, typer.Argument(help="A YAML config (configs/*.yaml).")] = None,
    example: Annotated[
        str | None,
        typer.Option("--example", help="Run a config shipped with labkit (e.g. quickstart)."),
    ] = None,
    out: Annotated[Path | None, typer.Option("--out", help="Output folder for runs.")] = None,
    repeats: Annotated[
        int | None, typer.Option("--repeats", help="Override every experiment's repeats (≥ 1).")
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
    truth: Annotated[
        bool,
        typer.Option(
            "--truth",
            help="Answer every provider with the truth server (a server that knows what it "
            "did), then grade every answer against its log (grade.md in the run folder).",
        ),
    ] = False,
) -> None:
    """Run a config against every available provider and write a run folder."""
    _no_collection_at_exit()
    try:
        if repeats is not None:
            _check_range("--repeats", repeats, 1)
        if resume is not None:
            _refuse_with_resume(
                CONFIG=config,
                **{"--example": example, "--out": out, "--repeats": repeats},
                **{"--provider": provider, "--experiment": experiment},
                **{"--truth": truth or None},
            )
        if sum(x is not None for x in (config, example, resume)) > 1:
            raise fail("give one of CONFIG, --example NAME or --resume RUN_DIR")
        if example is not None:
            config = example_path(example)
        options = RunOptions(
            out_dir=out,
            repeats=repeats,
            providers=provider,
            experiments=experiment,
            config_path=str(config),
        )
        if resume is not None:
            runner = prepare_resume(resume, on_warning=_warn)
        elif config is None:
            raise fail("give a CONFIG to run (or --example quickstart), or --resume RUN_DIR")
        elif truth:
            return _run_with_truth(config, options, report)
        else:
            runner = prepare_run(load_config(config), options)
    except LabkitError as exc:
        raise fail(str(exc)) from None
    try:
        _run_and_report(runner, report)
    finally:
        runner.folder.release()


def _no_collection_at_exit() -> None:
    """Have the heap frozen as the interpreter exits (registered once however often called):
    its collections at exit scanned every record the run still held, ~20 µs a record
    (issue 47, benchmarks/bench_after_level.py); reference counting still frees what it
    frees, and the process ends anyway."""
    atexit.unregister(gc.freeze)
    atexit.register(gc.freeze)


def _run_with_truth(config: Path, options: RunOptions, report: bool) -> None:
    """`run --truth`: the truth server answers every provider; the answers are graded."""
    from labkit.cli.truthrun import TruthLab, print_grade, write_grade
    from labkit.config import load_config_data, parse_config
    from labkit.scoring.grading import grade_run
    from labkit.truth.log import read_truth_log

    with TruthLab(load_config_data(config)) as lab:
        console.print(f"truth server: http://127.0.0.1:{lab.server.port} (answers every provider)")
        runner = prepare_run(parse_config(lab.config, str(config)), options)
        try:
            _run_and_report(runner, report)
        finally:
            runner.folder.release()
        folder = runner.folder.path
        try:
            log = lab.keep_log(folder)
            grade = grade_run(folder, read_truth_log(log))
            paths = write_grade(grade, folder)
        except (LabkitError, OSError) as exc:
            raise fail(f"the run is kept in {folder}, but it could not be graded: {exc}") from None
    print_grade(grade, console)
    console.print(
        f"grade: {escape(str(paths[1]))} (and {paths[0].name}); truth log: {escape(str(log))}"
    )


def _refuse_with_resume(**given: object) -> None:
    """`--resume` finishes a run as its manifest planned it: a config or an override given
    with it cannot be honoured, so it is refused (one line) rather than ignored."""
    extra = [name for name, value in given.items() if value is not None]
    if extra:
        raise fail(
            f"--resume finishes a run as it was planned and cannot take {', '.join(extra)}; "
            "resume without them, or start a new run with them"
        )


def _say_incomplete(result: RunResult) -> None:
    """One line per provider whose plan did not finish, and how to finish the run."""
    if result.status != "incomplete":
        return
    folder = escape(str(result.folder.path))
    missing = "; ".join(
        f"{escape(o.id)} {escape(o.unfinished_reason())}" for o in result.outcomes if not o.finished
    )
    err_console.print(
        f"[bold yellow]run incomplete:[/] {missing}; once that is fixed, finish it with: "
        f"labkit run --resume {folder}"
    )


def _run_and_report(runner: Runner, report: bool) -> None:
    folder = runner.folder.path
    console.print(f"run folder: [bold]{escape(str(folder))}[/]")
    try:
        result = _execute(runner)
    except _Stopped as exc:
        if exc.reason == _SIGTERM:
            raise _interrupted(runner, "interrupted by SIGTERM", 143) from None
        raise fail(
            f"{exc.reason}; the run stopped, the records written before are kept in {folder}; "
            f"once it can be written again, finish it with: labkit run --resume {folder}"
        ) from None
    except KeyboardInterrupt:
        raise _interrupted(runner, "interrupted", 130) from None
    except LabkitError as exc:
        raise fail(f"{exc} (records so far are kept in {folder})") from None
    with figures_gc():  # no full collection scans the run's records while it is summed up
        try:
            _print_result(result)
        except OSError as exc:
            err_console.print(f"[yellow]summary not written:[/] {escape(str(exc))}")
        if report:
            _write_report(folder)
        _print_answers(result, console)
        _say_incomplete(result)
    if (line := none_ok_line(result.outcomes)) is not None:
        raise fail(line)


def none_ok_line(outcomes: list[ProviderOutcome]) -> str | None:
    """The run's error line when no provider ended ok (None when one did): that none
    completed a request only where none did; a provider that answered some and then failed
    (its server died, a level could not run) did not finish its run."""
    if any(o.status == "ok" for o in outcomes):
        return None
    reasons = "; ".join(f"{o.id}: {o.reason}" for o in outcomes if o.reason)
    if any(o.done > o.failed for o in outcomes):
        return f"no provider finished its run ({reasons})"
    return f"no provider completed a request ({reasons})"


def _interrupted(runner: Runner, how: str, code: int) -> typer.Exit:
    """Say, in one line, what an interrupted run kept and how to finish it."""
    folder = escape(str(runner.folder.path))
    try:
        kept = f"{len(runner.folder.read_records())} records"
    except LabkitError:
        kept = "the records"
    err_console.print(
        f"[bold yellow]{how}:[/] {kept} kept in {folder}; "
        f"finish it with: labkit run --resume {folder}"
    )
    return typer.Exit(code)


def _warn(message: str) -> None:
    err_console.print(f"[bold yellow]warning:[/] {escape(message)}")


def _check_range(
    option: str, value: float, low: float, high: float | None = None, *, finite: bool = False
) -> None:
    """One clear error for a number out of range (typer's own check prints a box)."""
    if math.isnan(value) or (finite and math.isinf(value)):
        raise fail(f"{option} must be a finite number (got {value})")
    if value < low or (high is not None and value > high):
        allowed = f"between {low} and {high}" if high is not None else f"at least {low}"
        raise fail(f"{option} must be {allowed} (got {value})")


def _print_summary(
    result: RunResult, out: Console, *, outcomes: bool = True, answers: bool = True
) -> None:
    """The summary table, load levels, client-bound warnings (a line per flagged group, and
    one line of advice for the run), the providers that did not run (`outcomes`), and the
    lab's answers (`answers`)."""
    if any(not r.warmup for r in result.records):
        out.print(summary_table(result.lab, title=f"run {result.folder.run_id}"))
    for table in load_tables(result.lab):
        out.print(table)
    flagged = [g for g in result.lab.requests or [] if g.client_bound]
    for group in flagged:  # one short line each, then one line of advice for the run
        out.print(f"[bold yellow]warning:[/] {escape(client_bound_line(group))}")
    manifest = result.folder.manifest.model_dump(mode="json", exclude_unset=True)
    advice = client_bound_advice(flagged, manifest)
    if advice is not None:
        out.print(f"[bold yellow]advice:[/] {escape(advice)}")
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
    if answers:
        _print_answers(result, out)


def _print_answers(result: RunResult, out: Console) -> None:
    """The lab's answers, one paragraph each, numbered in the order they ran."""
    if not result.lab.answers:
        return
    out.print()
    out.print("[bold]The lab's answers[/]")
    numbers: dict[str, int] = {}
    for a in result.lab.answers:
        n = numbers.setdefault(a.experiment, len(numbers) + 1)
        out.print()
        out.print(
            f"[bold]{n}. {escape(a.experiment)} · {escape(a.provider)}:[/] {escape(a.answer)}"
        )


def _print_result(result: RunResult) -> None:
    # The same summary goes into the run folder, as plain text (never through a link).
    text = io.StringIO()
    _print_summary(result, SafeConsole(file=text, width=140, no_color=True, emoji=False))
    write_new_file(result.folder.path / "summary.txt", text.getvalue())
    # On screen, skipped and failed providers were already said, once, as it happened; the
    # answers come last, after the report's path.
    _print_summary(result, console, outcomes=False, answers=False)
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


@app.command()
def kinds() -> None:
    """List the provider and experiment kinds a config may use."""
    console.print("providers:   " + ", ".join(provider_kinds()))
    console.print("experiments: " + ", ".join(experiment_kinds()))


register_init(app)
register_local(app)
register_report(app)
register_tokens(app)
register_tracing(app)
register_sessions(app)
register_store(app)
register_truth(app)
register_watch(app)
register_dashboard(app)


def main() -> None:
    """Console-script entry point."""
    guard_std_streams()  # tracebacks and warnings too: no key reaches the terminal
    app()
