"""`labkit watch CONFIG` and `labkit watch status FOLDER`, registered on the app.

The watch prints one line per round; SIGTERM or Ctrl-C stops it between or during a round
(the round is finished or closed as partial when the same command starts it again). Every
error a user can cause is one red line and a non-zero exit.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from pathlib import Path
from typing import Annotated

import typer
from rich.text import Text

from labkit.config import load_config
from labkit.errors import LabkitError
from labkit.terminal import SafeConsole
from labkit.watch import Watch, default_folder, status_lines
from labkit.wire import loopclock

__all__ = ["register"]


def _fail(message: str, code: int = 1) -> typer.Exit:
    SafeConsole(stderr=True, highlight=False).print(
        Text(f"error: {message}", style="red"), soft_wrap=True
    )
    return typer.Exit(code)


def watch_command(
    target: Annotated[
        str, typer.Argument(help="A config with a watch: section, or `status` then a FOLDER.")
    ],
    folder_arg: Annotated[
        Path | None, typer.Argument(metavar="[FOLDER]", help="For `status`: a watch folder.")
    ] = None,
    folder: Annotated[
        Path | None,
        typer.Option("--folder", help="The watch folder (default: <output_dir>/watch-<name>)."),
    ] = None,
    store: Annotated[
        str | None,
        typer.Option("--store", help="The store: a DuckDB path or postgresql:// URL."),
    ] = None,
) -> None:
    """Run a config's probes on a schedule into a store; `labkit watch status FOLDER` says
    what a watch did and will do next."""
    console = SafeConsole(highlight=False)
    if target == "status":
        if folder_arg is None or folder is not None or store is not None:
            raise _fail("give one watch folder: labkit watch status FOLDER")
        try:
            for line in status_lines(folder_arg):
                console.print(Text(line), soft_wrap=True)
        except LabkitError as exc:
            raise _fail(str(exc)) from None
        return
    if folder_arg is not None:
        raise _fail("labkit watch takes one CONFIG (the folder goes in --folder)")
    try:
        config = load_config(target)
        where = folder or default_folder(config)
        watch = Watch(
            config,
            where,
            store_url=store,
            on_line=lambda line: console.print(Text(line), soft_wrap=True),
            config_path=target,
        )
    except LabkitError as exc:
        raise _fail(str(exc)) from None
    stopped: list[str] = []
    try:
        loopclock.run(_supervised(watch, stopped))
    except LabkitError as exc:
        raise _fail(str(exc)) from None
    except (KeyboardInterrupt, asyncio.CancelledError):
        stopped.append("interrupted")
    if stopped:
        SafeConsole(stderr=True, highlight=False).print(
            Text(
                f"watch {stopped[0]}: its state is kept in {where}; start it again with the "
                "same command to go on",
                style="yellow",
            ),
            soft_wrap=True,
        )
        raise typer.Exit(143 if stopped[0] == "stopped by SIGTERM" else 130)


async def _supervised(watch: Watch, stopped: list[str]) -> None:
    """The watch, cancelled when SIGTERM arrives (the round in flight keeps its records)."""
    loop = asyncio.get_running_loop()
    main = asyncio.current_task()
    assert main is not None

    def stop() -> None:
        if not stopped:
            stopped.append("stopped by SIGTERM")
            main.cancel()

    with contextlib.suppress(ValueError, RuntimeError):
        loop.add_signal_handler(signal.SIGTERM, stop)
    try:
        await watch.run()
    except asyncio.CancelledError:
        if not stopped:
            raise
    finally:
        with contextlib.suppress(ValueError, RuntimeError):
            loop.remove_signal_handler(signal.SIGTERM)


def register(app: typer.Typer) -> None:
    """Add `watch` to the app."""
    app.command("watch")(watch_command)
