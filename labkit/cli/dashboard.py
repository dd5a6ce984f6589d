"""`labkit dashboard STORE`: the observatory's page, registered on the app.

The store is named outright (a DuckDB file, a ``postgresql://`` URL), or found: from a
watch folder's ``state.json`` (``--watch-folder``: its store, its watch, its config's
prices), or as `labkit watch` finds it from a config (``--config``, which also gives the
price table). Every error a user can cause is one red ``error: ...`` line on stderr with
exit status 1.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.text import Text

from labkit.errors import ConfigError, LabkitError, RunError
from labkit.figures.observatory import ObservatoryFigures
from labkit.report.dashboard import public_url, read_figures, write_dashboard
from labkit.scrub import register_url_credentials
from labkit.terminal import SafeConsole

if TYPE_CHECKING:
    from labkit.config import LabConfig

__all__ = ["Source", "figures_from_store", "register", "store_of"]


def _fail(exc: LabkitError) -> typer.Exit:
    SafeConsole(stderr=True, highlight=False).print(
        Text(f"error: {exc}", style="red"), soft_wrap=True
    )
    return typer.Exit(1)


@dataclass
class Source:
    """Where the page's figures come from: the store, and what a config and a watch folder
    add (the price table, the watch, the same-model probes' records)."""

    url: str
    watch_id: str | None = None
    config: LabConfig | None = None
    folder: Path | None = None


def _from_watch_folder(folder: Path) -> tuple[str, str, Path | None]:
    """A watch folder's store URL, watch id and config path, from its state.json."""
    from labkit.watch.state import STATE_FILE, read_state

    if not folder.is_dir():
        raise ConfigError(f"{folder}: no such watch folder")
    state = read_state(folder)
    if state is None:
        raise ConfigError(f"{folder}: no watch has run here (no {STATE_FILE})")
    if state.store_env:
        url = os.environ.get(state.store_env, "").strip()
        if not url:
            raise ConfigError(
                f"{folder}: the watch's store is in ${state.store_env}, which is not set"
            )
        register_url_credentials(url)
    else:
        url = state.store
        if "://" not in url and not Path(url).is_absolute() and not Path(url).exists():
            url = str(folder / Path(url).name)  # a path relative to where the watch ran
    config = Path(state.config_path) if state.config_path else None
    return url, state.watch_id, config if config is not None and config.is_file() else None


def store_of(store: str | None, config: Path | None, watch_folder: Path | None) -> Source:
    """The page's source from what the command was given: STORE; else a watch folder's
    state.json (its store, its watch, its config); else a config's ``watch.store`` /
    ``watch.store_env`` (or the default watch folder's ``watch.duckdb``), as `labkit watch`
    finds it."""
    from labkit.config import load_config

    watch_id: str | None = None
    if store is None and watch_folder is not None:
        store, watch_id, its_config = _from_watch_folder(watch_folder)
        config = config or its_config
    cfg = load_config(config) if config is not None else None
    if store is None and cfg is not None:
        from labkit.watch.watcher import default_folder, resolve_store_url

        store = resolve_store_url(cfg, default_folder(cfg))
        register_url_credentials(store)
    if store is None:
        raise ConfigError(
            "name a STORE (a DuckDB file or a postgresql:// URL), --watch-folder DIR, "
            "--config CONFIG (its watch's store), or saved figures with --figures FILE"
        )
    return Source(url=store, watch_id=watch_id, config=cfg, folder=watch_folder)


def figures_from_store(source: Source) -> tuple[ObservatoryFigures, list[str]]:
    """Open the store, read its probes once and compute the observatory's figures (cost
    where the config has prices, same-model verdicts where it has that experiment); with
    notes on what could not be given. A store that does not exist is an error, never made."""
    from labkit.analysis.cost import cost_figures
    from labkit.analysis.observatory import compute
    from labkit.store import open_store

    try:
        store = open_store(source.url, create=False)
    except LabkitError:
        raise
    except Exception as exc:  # a driver's own error: one line, the URL without secrets
        raise RunError(
            f"cannot open the store {public_url(source.url)}: {exc.__class__.__name__}"
        ) from None
    try:
        probes = store.probes(source.watch_id)
        rounds = store.rounds(source.watch_id)
        shown = public_url(store.url)
    finally:
        store.close()
    prices = source.config.price_table() if source.config is not None else None
    from labkit.watch.verdicts import same_model_verdicts

    found, notes = same_model_verdicts(source.config, source.folder)
    figs = compute(
        probes,
        store=shown,
        costs=(lambda p: cost_figures(p, prices)) if prices else None,
        verdicts=(lambda _: found) if found else None,
    )
    if figs.changes and not figs.series:
        from labkit.analysis.change_series import change_series

        figs = figs.model_copy(update={"series": change_series(probes, figs.changes)})
    if len(rounds) and not figs.rounds:
        at = rounds["at"].dropna()
        figs = figs.model_copy(
            update={
                "rounds": len(rounds),
                "first_round": at.min().to_pydatetime() if len(at) else None,
                "last_round": at.max().to_pydatetime() if len(at) else None,
            }
        )
    return figs, notes


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
        typer.Option(
            "--watch-folder",
            help="A watch folder: its state.json names the store, the watch and its config.",
        ),
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
            source = store_of(store, config, watch_folder)
            if watch_id is not None:
                source.watch_id = watch_id
            figs, notes = figures_from_store(source)
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
