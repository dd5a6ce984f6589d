"""`labkit dashboard STORE`: the observatory's page, registered on the app.

Every error a user can cause is one red ``error: ...`` line on stderr with exit status 1.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.text import Text

from labkit.errors import ConfigError, LabkitError
from labkit.report.dashboard import figures_from_store, read_figures, write_dashboard
from labkit.scrub import register_url_credentials
from labkit.terminal import SafeConsole

__all__ = ["register"]


def _fail(exc: LabkitError) -> typer.Exit:
    SafeConsole(stderr=True, highlight=False).print(
        Text(f"error: {exc}", style="red"), soft_wrap=True
    )
    return typer.Exit(1)


def dashboard_command(
    store: Annotated[
        str | None,
        typer.Argument(
            help="The store: a DuckDB file, or a postgresql:// URL (its password is never "
            "shown or written)."
        ),
    ] = None,
    out: Annotated[
        Path,
        typer.Option("-o", "--out", help="Where to write the page."),
    ] = Path("dashboard.html"),
    figures: Annotated[
        Path | None,
        typer.Option(
            "--figures",
            help="Render observatory figures saved as JSON instead of reading a store.",
        ),
    ] = None,
) -> None:
    """Write the observatory's offline HTML page from STORE: hour-of-day curves, the split
    of the time, change points, cost and same-model verdicts, each with its interval."""
    register_url_credentials(store)
    console = SafeConsole(highlight=False)
    try:
        if (store is None) == (figures is None):
            raise ConfigError("name a STORE, or saved figures with --figures (one of the two)")
        figs = read_figures(figures) if figures is not None else figures_from_store(str(store))
        page = write_dashboard(figs, out)
    except LabkitError as exc:
        raise _fail(exc) from None
    except OSError as exc:
        raise _fail(LabkitError(f"cannot write {out}: {exc.strerror or exc}")) from None
    console.print(Text(f"dashboard {page}"), soft_wrap=True)


def register(app: typer.Typer) -> None:
    """Add the `dashboard` command to `app`."""
    app.command("dashboard")(dashboard_command)
