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
from labkit.terminal import SafeConsole
from labkit.workloads.agent_traces import session_trace, write_agent_trace

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
    try:
        records = RunFolder(run_dir).read_records()
        trace = session_trace(records, block_tokens)
        if not trace.sessions:
            raise LabkitError(f"{run_dir} holds no session records")
        path = out or run_dir / "agent_trace.jsonl"
        write_agent_trace(trace, path)
    except (LabkitError, OSError) as exc:
        SafeConsole(stderr=True, highlight=False).print(
            Text(f"error: {exc}", style="red"), soft_wrap=True
        )
        raise typer.Exit(1) from None
    turns = sum(len(a.steps) for s in trace.sessions for a in s.agents)
    console.print(Text(f"{len(trace.sessions)} sessions, {turns} turns: {path}"), soft_wrap=True)


def register(app: typer.Typer) -> None:
    """Add the `session-trace` command to `app`."""
    app.command("session-trace")(session_trace_command)
