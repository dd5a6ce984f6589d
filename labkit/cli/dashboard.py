"""`labkit dashboard STORE`: the observatory's page, registered on the app.

The store is named outright (a DuckDB file, a ``postgresql://`` URL), or found: from a
watch folder's ``state.json`` (``--watch-folder``: its store, its watch, its config's
prices), or as `labkit watch` finds it from a config (``--config``, which also gives the
price table). Every error a user can cause is one red ``error: ...`` line on stderr with
exit status 1.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer
from rich.text import Text

from labkit.errors import ConfigError, LabkitError, RunError
from labkit.figures.observatory import ObservatoryFigures
from labkit.pricing import PriceTable
from labkit.report.dashboard import public_url, read_figures, write_dashboard
from labkit.scrub import register_url_credentials
from labkit.terminal import SafeConsole

__all__ = ["NO_ANALYSIS", "figures_from_store", "register", "store_of"]


def _fail(exc: LabkitError) -> typer.Exit:
    SafeConsole(stderr=True, highlight=False).print(
        Text(f"error: {exc}", style="red"), soft_wrap=True
    )
    return typer.Exit(1)


def _compute() -> Callable[..., ObservatoryFigures] | None:
    """`labkit.analysis.observatory.compute`, or None where this build lacks it."""
    try:
        module = importlib.import_module("labkit.analysis.observatory")
        compute: Callable[..., ObservatoryFigures] = module.compute
    except (ImportError, AttributeError):
        return None
    return compute


#: What the page and the command say where this build has no observatory analysis.
NO_ANALYSIS = (
    "this build has no observatory analysis (labkit.analysis.observatory.compute): "
    "hour-of-day curves, the split and changes are not computed"
)


def figures_from_store(
    url: str, *, prices: PriceTable | None = None, watch_id: str | None = None
) -> tuple[ObservatoryFigures, list[str]]:
    """Open the store at `url`, read its probes once and compute the observatory's figures
    (cost too where `prices` gives a price table); with the notes on what could not be
    computed. A store that does not exist is an error, never created."""
    from labkit.store import open_store

    try:
        store = open_store(url, create=False)
    except LabkitError:
        raise
    except Exception as exc:  # a driver's own error: one line, the URL without secrets
        raise RunError(
            f"cannot open the store {public_url(url)}: {exc.__class__.__name__}"
        ) from None
    try:
        probes = store.probes(watch_id)
        rounds = store.rounds(watch_id)
        shown = public_url(store.url)
    finally:
        store.close()
    notes: list[str] = []
    compute = _compute()
    if compute is not None:
        figs = compute(probes, store=shown)
    else:
        notes.append(NO_ANALYSIS)
        figs = ObservatoryFigures(store=shown, computed_at=datetime.now(UTC))
    if len(rounds) and not figs.rounds:
        at = rounds["at"].dropna()
        figs = figs.model_copy(
            update={
                "rounds": len(rounds),
                "first_round": at.min().to_pydatetime() if len(at) else None,
                "last_round": at.max().to_pydatetime() if len(at) else None,
            }
        )
    if prices and not figs.costs:
        from labkit.analysis.cost import cost_figures

        figs = figs.model_copy(update={"costs": cost_figures(probes, prices)})
    return figs, notes


def _prices(config: Path) -> PriceTable | None:
    from labkit.config import load_config

    return load_config(config).price_table() or None


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


def store_of(
    store: str | None, config: Path | None, watch_folder: Path | None
) -> tuple[str, PriceTable | None, str | None]:
    """The store's URL, the price table and the watch id, from what the command was
    given: STORE; else a watch folder's state.json (its store, its watch, its config's
    prices); else a config's ``watch.store`` / ``watch.store_env`` (or the default watch
    folder's ``watch.duckdb``), as `labkit watch` finds it."""
    watch_id: str | None = None
    if store is None and watch_folder is not None:
        store, watch_id, its_config = _from_watch_folder(watch_folder)
        config = config or its_config
    if store is None and config is not None:
        from labkit.config import load_config
        from labkit.watch.watcher import default_folder, resolve_store_url

        cfg = load_config(config)
        store = resolve_store_url(cfg, default_folder(cfg))
        register_url_credentials(store)
    if store is None:
        raise ConfigError(
            "name a STORE (a DuckDB file or a postgresql:// URL), --watch-folder DIR, "
            "--config CONFIG (its watch's store), or saved figures with --figures FILE"
        )
    return store, (_prices(config) if config is not None else None), watch_id


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
            url, prices, its_watch = store_of(store, config, watch_folder)
            figs, notes = figures_from_store(url, prices=prices, watch_id=watch_id or its_watch)
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
