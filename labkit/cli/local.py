"""``labkit setup`` and ``labkit server start|status|stop``: a thin face over install and server.

``register(app)`` adds these commands to the main typer app. A ``LabkitError`` becomes one red
``error: ...`` line on stderr and exit code 1, never a traceback.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Literal

import typer
from rich.markup import escape
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from labkit.errors import LabkitError, ServerError
from labkit.local.detached import server_status, start_detached, stop_detached
from labkit.local.install import LocalSetup, ensure_setup
from labkit.terminal import SafeConsole

__all__ = ["register"]


class BackendChoice(StrEnum):
    """``--backend`` values."""

    AUTO = "auto"
    CPU = "cpu"
    CUDA = "cuda"


_ServerOpt = Annotated[
    Path | None,
    typer.Option("--server", help="llama-server binary to use (else env, PATH, cache, build)."),
]
_ModelOpt = Annotated[
    Path | None, typer.Option("--model", help="GGUF model file (default: SmolLM2-135M Q4_1).")
]
_BackendOpt = Annotated[
    BackendChoice, typer.Option("--backend", help="auto: cuda when nvcc and a GPU are found.")
]


def register(app: typer.Typer) -> None:
    """Add ``setup`` and the ``server`` command group to ``app``."""
    app.command("setup")(setup_command)
    server_app = typer.Typer(
        help="Run a local llama-server in the background.", no_args_is_help=True
    )
    server_app.command("start")(server_start)
    server_app.command("status")(server_status_command)
    server_app.command("stop")(server_stop)
    app.add_typer(server_app, name="server")


@contextlib.contextmanager
def _clean_errors() -> Iterator[None]:
    """Turn a LabkitError into one red line on stderr and exit code 1."""
    try:
        yield
    except LabkitError as exc:
        SafeConsole(stderr=True, soft_wrap=True, highlight=False).print(
            f"[red]error:[/red] {escape(str(exc))}"
        )
        raise typer.Exit(1) from None


_BACKENDS: dict[BackendChoice, Literal["auto", "cpu", "cuda"]] = {
    BackendChoice.AUTO: "auto",
    BackendChoice.CPU: "cpu",
    BackendChoice.CUDA: "cuda",
}


def _setup_with_progress(
    server: Path | None, model: Path | None, backend: BackendChoice
) -> LocalSetup:
    """``ensure_setup`` behind a rich progress bar (shown only when something takes time)."""
    wanted = _BACKENDS[backend]
    console = SafeConsole(stderr=True, soft_wrap=True, highlight=False)
    if not console.is_terminal:  # CI logs: one plain line per stage
        last: list[str] = []

        def plain(stage: str, fraction: float | None) -> None:
            if not last or last[-1] != stage:
                last.append(stage)
                console.print(f"labkit: {escape(stage)}")

        return ensure_setup(server, model, backend=wanted, progress=plain)
    with Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.percentage:>3.0f}%"),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    ) as bar:
        task = bar.add_task("checking the cache", total=None)

        def progress(stage: str, fraction: float | None) -> None:
            if fraction is None:
                bar.update(task, description=stage, total=None)
            else:
                bar.update(task, description=stage, total=1.0, completed=fraction)

        return ensure_setup(server, model, backend=wanted, progress=progress)


def setup_command(
    server: _ServerOpt = None, model: _ModelOpt = None, backend: _BackendOpt = BackendChoice.AUTO
) -> None:
    """Find or build llama-server and fetch the model, into labkit's cache."""
    with _clean_errors():
        started = time.perf_counter()
        setup = _setup_with_progress(server, model, backend)
        elapsed = time.perf_counter() - started
    out = SafeConsole(highlight=False, soft_wrap=True)
    out.print(f"server:  {escape(str(setup.server.path))}")
    out.print(f"         backend {setup.server.backend}, from {setup.server.source}")
    out.print(f"model:   {escape(str(setup.model.path))}")
    out.print(f"         sha256 {setup.model.sha256}, {setup.model.size_bytes:,} bytes")
    out.print(f"[green]ready[/green] in {elapsed:.1f} s")


def server_start(
    port: Annotated[int | None, typer.Option(help="Port on 127.0.0.1 (default: free).")] = None,
    ctx_size: Annotated[int, typer.Option(help="Context tokens per slot (≥ 1).")] = 4096,
    slots: Annotated[int, typer.Option(help="Parallel slots (-np, ≥ 1).")] = 1,
    model: _ModelOpt = None,
    server: _ServerOpt = None,
    backend: _BackendOpt = BackendChoice.AUTO,
) -> None:
    """Start llama-server in the background; it runs until `labkit server stop`."""
    with _clean_errors():
        if port is not None and not 1 <= port <= 65535:
            raise ServerError(f"--port must be between 1 and 65535 (got {port})")
        if ctx_size < 1 or slots < 1:
            raise ServerError(
                f"--ctx-size and --slots must be at least 1 (got {ctx_size}, {slots})"
            )
        setup = _setup_with_progress(server, model, backend)
        with SafeConsole(stderr=True).status("starting llama-server"):
            state = start_detached(setup, port=port, ctx_size=ctx_size, slots=slots)
    out = SafeConsole(highlight=False, soft_wrap=True)
    out.print(f"[green]llama-server running[/green] at {state.base_url} (pid {state.pid})")
    out.print(f"OpenAI-compatible base URL: {state.base_url}/v1")
    out.print(f"log: {escape(state.log_path)}")


def server_status_command() -> None:
    """Show the background llama-server, if any (exit code 1 when none is running)."""
    with _clean_errors():
        state = server_status()
    out = SafeConsole(highlight=False, soft_wrap=True)
    if state is None:
        out.print("no labkit server is running")
        raise typer.Exit(1)
    health = "[green]healthy[/green]" if state.healthy else "[yellow]not answering[/yellow]"
    out.print(f"llama-server at {state.base_url} (pid {state.pid}): {health}")
    out.print(f"model: {escape(state.model_path)}")
    out.print(f"backend {state.backend}, {state.slots} slot(s) of {state.ctx_size} tokens")
    out.print(f"started {state.started_at}; log: {escape(state.log_path)}")


def server_stop() -> None:
    """Stop the background llama-server (nothing to do when none is running)."""
    with _clean_errors():
        state = stop_detached()
    if state is None:
        SafeConsole(highlight=False, soft_wrap=True).print("no labkit server was running")
    else:
        SafeConsole(highlight=False, soft_wrap=True).print(
            f"stopped llama-server (pid {state.pid})"
        )
