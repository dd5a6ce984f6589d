"""`labkit dashboard STORE`: the observatory's page, registered on the app.

The store is named outright (a DuckDB file, a ``postgresql://`` URL), or found: in a
config's ``watch.store`` / ``watch.store_env`` (``--config``, which also gives the price
table), or as a watch folder's ``watch.duckdb`` (``--watch-folder``). Every error a user can
cause is one red ``error: ...`` line on stderr with exit status 1.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer
from rich.text import Text

from labkit.errors import ConfigError, LabkitError
from labkit.figures.observatory import ObservatoryFigures
from labkit.pricing import PriceTable
from labkit.report.dashboard import figures_from_store, read_figures, write_dashboard
from labkit.scrub import register_url_credentials
from labkit.terminal import SafeConsole

__all__ = ["WATCH_STORE", "register", "store_of"]

#: A watch folder's store when its config names none (`labkit.config.WatchSettings.store`).
WATCH_STORE = "watch.duckdb"


def _fail(exc: LabkitError) -> typer.Exit:
    SafeConsole(stderr=True, highlight=False).print(
        Text(f"error: {exc}", style="red"), soft_wrap=True
    )
    return typer.Exit(1)


def store_of(
    store: str | None, config: Path | None, watch_folder: Path | None
) -> tuple[str, PriceTable | None]:
    """The store's URL and the price table, from what the command was given: STORE, else the
    config's ``watch.store`` (or the variable ``watch.store_env`` names), else the watch
    folder's ``watch.duckdb``."""
    prices: PriceTable | None = None
    from_config: str | None = None
    if config is not None:
        from labkit.config import load_config

        cfg = load_config(config)
        prices = cfg.price_table() or None
        if cfg.watch is not None and cfg.watch.store_env:
            from_config = os.environ.get(cfg.watch.store_env) or None
            if from_config is None and store is None and watch_folder is None:
                raise ConfigError(
                    f"{config}: watch.store_env names ${cfg.watch.store_env}, which is not set"
                )
            register_url_credentials(from_config)
        elif cfg.watch is not None and cfg.watch.store:
            from_config = cfg.watch.store
    if store is not None:
        return store, prices
    if from_config is not None:
        return from_config, prices
    if watch_folder is not None:
        if not watch_folder.is_dir():
            raise ConfigError(f"{watch_folder}: no such watch folder")
        found = watch_folder / WATCH_STORE
        if not found.is_file():
            raise ConfigError(
                f"{watch_folder}: no {WATCH_STORE} in this watch folder (a watch that stores "
                "elsewhere: name its STORE, or --config CONFIG)"
            )
        return str(found), prices
    raise ConfigError(
        "name a STORE (a DuckDB file or a postgresql:// URL), --config CONFIG with a "
        "watch.store, --watch-folder DIR, or saved figures with --figures FILE"
    )


def dashboard_command(
    store: Annotated[
        str | None,
        typer.Argument(
            help="The store: a DuckDB file, or a postgresql:// URL (its password is never "
            "shown or written; PGPASSWORD works too)."
        ),
    ] = None,
    out: Annotated[
        Path,
        typer.Option("-o", "--out", help="Where to write the page."),
    ] = Path("dashboard.html"),
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            help="The watch's config: its price table gives the cost section, and its "
            "watch.store the store when STORE is not given.",
        ),
    ] = None,
    watch_folder: Annotated[
        Path | None,
        typer.Option("--watch-folder", help="A watch folder: its watch.duckdb is the store."),
    ] = None,
    watch_id: Annotated[
        str | None, typer.Option("--watch-id", help="Only this watch's rounds.")
    ] = None,
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
    err = SafeConsole(stderr=True, highlight=False)
    notes: list[str] = []
    try:
        figs: ObservatoryFigures
        if figures is not None:
            if store is not None or watch_folder is not None:
                raise ConfigError("--figures renders saved figures: give no STORE with it")
            figs = read_figures(figures)
        else:
            url, prices = store_of(store, config, watch_folder)
            figs, notes = figures_from_store(url, prices=prices, watch_id=watch_id)
        page = write_dashboard(figs, out, notes)
    except LabkitError as exc:
        raise _fail(exc) from None
    except OSError as exc:
        raise _fail(LabkitError(f"cannot write {out}: {exc.strerror or exc}")) from None
    for note in notes:
        err.print(Text(f"note: {note}", style="yellow"), soft_wrap=True)
    console.print(Text(f"dashboard {page}"), soft_wrap=True)


def register(app: typer.Typer) -> None:
    """Add the `dashboard` command to `app`."""
    app.command("dashboard")(dashboard_command)
