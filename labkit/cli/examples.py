"""The example configs shipped inside the package: `labkit init [DIR]` writes them out, and
`labkit run --example NAME` runs one where it lies, so labkit works outside its repository.

The examples are package data (`labkit/examples/*.yaml`, with the traces they replay under
`traces/`); the repository's `configs/` is the same folder, so there is one copy. A config
names files relative to the working directory (`trace.yaml`: `configs/traces/...`), which is
why `init` writes to `./configs` by default: run the examples from the folder above it.
"""

from __future__ import annotations

from importlib.resources import files
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from labkit.errors import ConfigError, LabkitError
from labkit.safefiles import write_new_file
from labkit.terminal import SafeConsole

__all__ = ["example_names", "example_path", "example_text", "register", "write_examples"]

_EXAMPLES = files("labkit") / "examples"


def _files(folder: Traversable, under: str = "") -> list[tuple[str, Traversable]]:
    """Every file below `folder` as (relative path, file), in name order."""
    found: list[tuple[str, Traversable]] = []
    for item in sorted(folder.iterdir(), key=lambda t: t.name):
        if item.name.startswith((".", "_")):
            continue
        name = f"{under}{item.name}"
        if item.is_dir():
            found.extend(_files(item, f"{name}/"))
        else:
            found.append((name, item))
    return found


def example_names() -> list[str]:
    """The examples `--example` takes: the configs' names without `.yaml`."""
    return [name.removesuffix(".yaml") for name, _ in _files(_EXAMPLES) if name.endswith(".yaml")]


def example_text(name: str) -> str:
    """The YAML of example `name` (ConfigError naming the examples there are)."""
    if name not in example_names():
        raise ConfigError(f"no example {name!r}; the examples are: {', '.join(example_names())}")
    return (_EXAMPLES / f"{name}.yaml").read_text(encoding="utf-8")


def write_examples(folder: Path, *, overwrite: bool = False) -> list[Path]:
    """Write every example (configs and the traces they replay) under `folder`; return the
    files written. A different file already there is refused unless `overwrite`, and none
    is written then; an identical one is left as it is. Each file is written new
    (`labkit.safefiles`): a link where one goes is replaced, never written through, and a
    link where a subfolder goes is refused (it would put files outside `folder`)."""
    plan: list[tuple[Path, bytes]] = []
    clashes: list[str] = []
    for name, item in _files(_EXAMPLES):
        target = folder / name
        _refuse_linked_subfolder(folder, target)
        data = item.read_bytes()
        if target.is_symlink() or target.exists():
            if not target.is_symlink() and target.is_file() and target.read_bytes() == data:
                continue
            clashes.append(str(target))
        plan.append((target, data))
    if clashes and not overwrite:
        raise ConfigError(
            f"{len(clashes)} file(s) already there and different, e.g. {clashes[0]}; "
            "nothing written (--force overwrites them)"
        )
    try:
        for target, data in plan:
            target.parent.mkdir(parents=True, exist_ok=True)
            write_new_file(target, data)
    except OSError as exc:
        raise ConfigError(f"cannot write the examples to {folder}: {exc.strerror or exc}") from None
    return [target for target, _ in plan]


def _refuse_linked_subfolder(folder: Path, target: Path) -> None:
    """ConfigError where a folder between `folder` and `target` is a symbolic link."""
    for parent in target.relative_to(folder).parents:
        if parent != Path(".") and (folder / parent).is_symlink():
            raise ConfigError(
                f"{folder / parent} is a symbolic link; labkit writes no file through a link "
                "(remove it and run init again); nothing written"
            )


def example_path(name: str) -> Path:
    """The installed file of example `name`, for `load_config` (ConfigError for an unknown
    name, or where labkit is installed as a zip: then `labkit init` writes it out)."""
    example_text(name)  # refuses an unknown name
    item = _EXAMPLES / f"{name}.yaml"
    if not isinstance(item, Path):
        raise ConfigError(f"example {name!r} is not a file here; write it out with `labkit init`")
    return item


def init_command(
    folder: Annotated[Path, typer.Argument(help="Where to write the example configs.")] = Path(
        "configs"
    ),
    force: Annotated[
        bool, typer.Option("--force", help="Overwrite example files changed there.")
    ] = False,
) -> None:
    """Write the example configs (the quickstart, load, sweep, trace, ...) into FOLDER."""
    out = SafeConsole(soft_wrap=True)
    try:
        written = write_examples(folder, overwrite=force)
    except LabkitError as exc:
        SafeConsole(stderr=True, soft_wrap=True).print(f"[bold red]error:[/] {escape(str(exc))}")
        raise typer.Exit(1) from None
    names = ", ".join(example_names())
    out.print(f"{len(written)} file(s) written to {escape(str(folder))}; examples: {names}")
    out.print(f"next: labkit run {escape(str(folder / 'quickstart.yaml'))}")


def register(app: typer.Typer) -> None:
    """Add `labkit init` to the main app."""
    app.command("init")(init_command)
