"""`labkit session-trace RUN_DIR [--out PATH]`, on the app: a run's `session` records as an
agent trace (AIPerf's multi-turn Mooncake rows with labkit's branch keys,
`labkit.workloads.agent_traces`), so the run's sessions can be replayed elsewhere with the
same structure (`kind: session`, `trace: PATH`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.text import Text

from labkit.errors import LabkitError
from labkit.runner.results import RunFolder
from labkit.safefiles import write_new_file
from labkit.terminal import SafeConsole
from labkit.workloads.agent_traces import agent_trace_text, session_trace

__all__ = ["register", "session_trace_command"]


def session_trace_command(
    run_dir: Annotated[Path, typer.Argument(help="A run folder (holds records.jsonl).")],
    out: Annotated[
        Path | None,
        typer.Option("--out", help="Where to write it (default: RUN_DIR/agent_trace.jsonl)."),
    ] = None,
    block_tokens: Annotated[
        int, typer.Option("--block-tokens", min=1, help="Prompt tokens per hash id.")
    ] = 512,
) -> None:
    """Write RUN_DIR's agent sessions as an agent trace (JSONL)."""
    console = SafeConsole(highlight=False)
    errors = SafeConsole(stderr=True, highlight=False)
    skipped: list[str] = []
    try:
        records = RunFolder(run_dir).read_records(on_skip=skipped.append)
        trace = session_trace(records, block_tokens, on_skip=skipped.append)
        if not trace.sessions:
            reason = f" ({skipped[0]})" if skipped else ""
            raise LabkitError(f"{run_dir} holds no session records a trace can hold{reason}")
        path = out or run_dir / "agent_trace.jsonl"
        try:  # a new file renamed into place: a link planted at `path` is replaced, not followed
            write_new_file(path, agent_trace_text(trace))
        except OSError as exc:
            raise LabkitError(f"cannot write {path}: {exc.strerror or exc}") from None
    except LabkitError as exc:
        errors.print(Text(f"error: {exc}", style="red"), soft_wrap=True)
        raise typer.Exit(1) from None
    if skipped:
        more = f" (first: {skipped[0]})" if len(skipped) > 1 else f": {skipped[0]}"
        errors.print(Text(f"{len(skipped)} left out{more}", style="yellow"), soft_wrap=True)
    turns = sum(len(a.steps) for s in trace.sessions for a in s.agents)
    console.print(Text(f"{len(trace.sessions)} sessions, {turns} turns: {path}"), soft_wrap=True)


def register(app: typer.Typer) -> None:
    """Add the `session-trace` command to `app`."""
    app.command("session-trace")(session_trace_command)
