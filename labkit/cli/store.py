"""`labkit store import STORE RUN...` and `labkit store query STORE SQL`, registered on the app.

STORE is a DuckDB file path (created by import when missing) or a ``postgresql://`` URL (the
password from the URL or PGPASSWORD, never printed). Every error a user can cause is one
red ``error: ...`` line on stderr and exit status 1.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table as RichTable
from rich.text import Text

from labkit.errors import LabkitError
from labkit.scrub import for_people
from labkit.terminal import SafeConsole

if TYPE_CHECKING:
    from labkit.store import Store

__all__ = ["register"]

STORE_HELP = "A DuckDB file (created when missing) or a postgresql://user@host/db URL."


def _fail(message: str) -> typer.Exit:
    SafeConsole(stderr=True, highlight=False).print(
        Text(f"error: {for_people(message)}", style="red"), soft_wrap=True
    )
    return typer.Exit(1)


def _open(store: str, *, create: bool) -> Store:
    from labkit.store import open_store

    try:
        return open_store(store, create=create)
    except LabkitError as exc:
        raise _fail(str(exc)) from None


def import_command(
    store: Annotated[str, typer.Argument(help=STORE_HELP)],
    runs: Annotated[list[Path], typer.Argument(help="Run folders (each holds records.jsonl).")],
) -> None:
    """Load run folders into a store: one line per run (added, or already there)."""
    missing = [r for r in runs if not (r / "records.jsonl").is_file()]
    if missing:
        raise _fail(f"{missing[0]} is not a run folder (no records.jsonl)")
    console = SafeConsole(highlight=False)
    opened = _open(store, create=True)
    try:
        for run in runs:
            try:
                result = opened.load_run(run)
            except LabkitError as exc:
                raise _fail(str(exc)) from None
            if result.added == 0:
                line = f"{run}: already there ({result.already} records, run {result.run_id})"
            elif result.already:
                line = (
                    f"{run}: added {result.added} records, {result.already} already there "
                    f"(run {result.run_id})"
                )
            else:
                line = f"{run}: added {result.added} records (run {result.run_id})"
            console.print(Text(line), soft_wrap=True)
    finally:
        opened.close()


def query_command(
    store: Annotated[str, typer.Argument(help=STORE_HELP)],
    sql: Annotated[str, typer.Argument(help="SQL over the tables records, runs, rounds, probes.")],
    csv: Annotated[bool, typer.Option("--csv", help="Print CSV instead of a table.")] = False,
) -> None:
    """Ask the store a question in SQL; the answer as a table (or CSV)."""
    opened = _open(store, create=False)
    try:
        frame = opened.query(sql)
    except LabkitError as exc:
        raise _fail(str(exc)) from None
    finally:
        opened.close()
    if csv:
        sys.stdout.write(for_people(frame.to_csv(index=False)))
        return
    table = RichTable(show_edge=False, highlight=False)
    for name in frame.columns:
        numeric = frame[name].dtype.kind in "fiu"
        table.add_column(str(name), justify="right" if numeric else "left")
    for row in frame.itertuples(index=False):
        table.add_row(*(Text(for_people(_cell(v))) for v in row))
    console = SafeConsole(highlight=False)
    if not console.is_terminal:
        console.width = max(console.width, 160)
    console.print(table)
    console.print(Text(f"{len(frame)} row(s)", style="dim"))


def _cell(value: Any) -> str:
    if value is None or (isinstance(value, float) and value != value):
        return ""
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def register(app: typer.Typer) -> None:
    """Add `labkit store import|query` to the main app."""
    store_app = typer.Typer(
        help="The observatory's store: runs and rounds in DuckDB or PostgreSQL.",
        no_args_is_help=True,
    )
    store_app.command("import")(import_command)
    store_app.command("query")(query_command)
    app.add_typer(store_app, name="store")
