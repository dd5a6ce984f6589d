"""`labkit tokens TEXT|--file F [--tokenizer NAME]... [--ids] [--config CONFIG]`, on the app.

Prints the text cut into tokens by each tokenizer, side by side, with counts, chars/token and
bytes/token: the offline OpenAI encodings, `local` (the bundled model's llama-server
`/tokenize`) and, with `--config`, a provider's own (`Provider.tokenized`), the one use that
may reach a network. Pieces come from tokenizers and servers, so every control character in
them is shown as an escape (`display_piece`) before it reaches the terminal. The text is at
most `MAX_TEXT_BYTES` (4 MiB, UTF-8). The command: docs/cli.md, "labkit tokens".
"""

from __future__ import annotations

import asyncio
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer
from rich.text import Text

from labkit.errors import LabkitError
from labkit.providers import ProviderSettings, bundled_model_settings, provider_class
from labkit.terminal import SafeConsole
from labkit.tokenizers import (
    OFFLINE_ENCODINGS,
    Tokenized,
    TokenizerUnavailable,
    display_piece,
    encoding_for_model,
    offline_tokenizer,
)

__all__ = ["LOCAL", "MAX_TEXT_BYTES", "register", "tokens_command"]

#: The most text `labkit tokens` cuts (UTF-8 bytes): every token of it is held as ids and
#: pieces by each tokenizer (about 40 bytes of memory per byte of text: a 50 MB file took
#: 2.1 GiB) and printed.
MAX_TEXT_BYTES = 4 * 1024 * 1024
#: The name of the bundled model's tokenizer on the command line.
LOCAL = "local"
DEFAULT_TOKENIZERS = ("cl100k_base", "o200k_base", LOCAL)
_PIECE_STYLES = ("black on cyan", "black on yellow")


class _NeedsSetup(LabkitError):
    """The bundled model or llama-server is not cached: using it would build or fetch."""


@dataclass(frozen=True, slots=True)
class _Row:
    """One tokenizer's line: its cut, or why there is none."""

    name: str
    cut: Tokenized | None
    unavailable: str | None = None


def tokens_command(
    text: Annotated[str | None, typer.Argument(help="The text to cut (or use --file).")] = None,
    file: Annotated[
        Path | None,
        typer.Option(
            "--file",
            "-f",
            help="Read the text from this file (UTF-8, at most 4 MiB; - for stdin).",
        ),
    ] = None,
    tokenizer: Annotated[
        list[str] | None,
        typer.Option(
            "--tokenizer",
            "-t",
            help=f"{', '.join(OFFLINE_ENCODINGS)}, an OpenAI model name (gpt-4o), "
            f"'{LOCAL}' (the bundled model), or a provider id of --config. Repeat for "
            f"several; default: {', '.join(DEFAULT_TOKENIZERS)}.",
        ),
    ] = None,
    ids: Annotated[bool, typer.Option("--ids", help="Also print the token ids.")] = False,
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            "-c",
            help="A labkit config: --tokenizer may then name its providers by id (their own "
            "tokenizers, through their APIs).",
        ),
    ] = None,
) -> None:
    """Show how tokenizers cut TEXT into tokens, side by side (offline, no key needed)."""
    err = SafeConsole(stderr=True, highlight=False)
    try:
        source = _read_text(text, file)
        providers = _configured_providers(config)
        names = list(tokenizer or DEFAULT_TOKENIZERS)
        rows = [
            _provider_row(providers[name], source)
            if name in providers
            else _cut(name, source, explicit=tokenizer is not None)
            for name in names
        ]
    except LabkitError as exc:
        err.print(Text(f"error: {exc}", style="red"), soft_wrap=True)
        raise typer.Exit(1) from None
    _print(rows, source, ids, SafeConsole(highlight=False))


def register(app: typer.Typer) -> None:
    """Add `tokens` to the main app."""
    app.command("tokens")(tokens_command)


def _read_text(text: str | None, file: Path | None) -> str:
    """The text to cut: the argument, or the file (``-``: stdin) read up to
    `MAX_TEXT_BYTES` and decoded as UTF-8; anything else is one LabkitError line."""
    if (text is None) == (file is None):
        raise LabkitError("give the text as an argument or with --file, not both")
    if file is not None:
        try:
            if str(file) == "-":
                data = sys.stdin.buffer.read(MAX_TEXT_BYTES + 1)
            else:
                with file.open("rb") as f:
                    data = f.read(MAX_TEXT_BYTES + 1)
        except OSError as exc:
            raise LabkitError(f"cannot read {file}: {exc.strerror or exc}") from None
        _refuse_longer(len(data), str(file))
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as exc:
            line = data.count(b"\n", 0, exc.start) + 1
            raise LabkitError(
                f"{file}:{line}: not UTF-8 (byte 0x{data[exc.start]:02x} at offset {exc.start})"
            ) from None
    assert text is not None
    _refuse_longer(len(text.encode("utf-8", "surrogatepass")), "the text")
    return text


def _refuse_longer(size: int, what: str) -> None:
    if size > MAX_TEXT_BYTES:
        raise LabkitError(
            f"{what} is over {MAX_TEXT_BYTES // 2**20} MiB; labkit tokens shows every token "
            f"of what it cuts, so it takes at most {MAX_TEXT_BYTES // 2**20} MiB of text"
        )


def _cut(name: str, text: str, *, explicit: bool) -> _Row:
    """One tokenizer's cut. An unavailable `local` is an error only when asked for by name."""
    if name == LOCAL:
        try:
            label, cut = asyncio.run(_local_cut(text))
            return _Row(label, cut)
        except (_NeedsSetup, LabkitError, OSError) as exc:
            if explicit:
                raise LabkitError(f"{LOCAL}: {exc}") from None
            return _Row(name, None, str(exc))
    encoding = name if name in OFFLINE_ENCODINGS else encoding_for_model(name)
    if encoding is None:
        raise TokenizerUnavailable(
            f"unknown tokenizer {name!r}: use {', '.join(OFFLINE_ENCODINGS)}, an OpenAI "
            f"model name, or {LOCAL!r}"
        )
    label = name if encoding == name else f"{name} ({encoding})"
    return _Row(label, offline_tokenizer(encoding).tokenize(text))


def _configured_providers(config: Path | None) -> dict[str, ProviderSettings]:
    """The providers of `config` by id (none without one)."""
    if config is None:
        return {}
    from labkit.config import load_config

    return {p.id: p for p in load_config(config).providers}


def _provider_row(settings: ProviderSettings, text: str) -> _Row:
    """A configured provider's own cut, or a line saying it only counts or has none; a
    provider that fails says why in its line."""
    label = f"{settings.id} ({settings.model})"
    try:
        cut = asyncio.run(_provider_cut(settings, text))
    except LabkitError:
        raise
    except Exception as exc:  # the provider's API failed: one line, not a traceback
        return _Row(label, None, f"{type(exc).__name__}: {exc}"[:300])
    if cut is None:
        return _Row(label, None, "this provider offers no tokenizer labkit can reach")
    return _Row(label, cut)


async def _provider_cut(settings: ProviderSettings, text: str) -> Tokenized | None:
    """`Provider.tokenized` of a configured entry, its managed server started for the call."""
    import tempfile

    api_key = settings.check_available()
    with tempfile.TemporaryDirectory(prefix="labkit-tokens-") as log_dir:
        server = settings.managed_server(Path(log_dir))
        if server is not None:
            base_url = await asyncio.to_thread(server.start)
            settings = settings.model_copy(update={"base_url": base_url})
        try:
            provider = provider_class(settings.kind)(settings, api_key=api_key)
            try:
                return await provider.tokenized(text)
            finally:
                await provider.aclose()
        finally:
            if server is not None:
                await asyncio.to_thread(server.stop)


async def _local_cut(text: str) -> tuple[str, Tokenized]:
    """The bundled model's cut and its label, from a running detached server or a brief
    managed one (about a second for the bundled 135M model); never built or fetched here.

    A model's tokenizer is its server's: reading the GGUF's vocabulary offline would need a
    second implementation of llama.cpp's pre-tokenizers, which could differ from the
    server's in exactly the cases this command is for.
    """
    from labkit.local import ManagedServer, ensure_setup, server_status

    settings = bundled_model_settings()
    state = server_status()
    if state is not None and state.healthy:
        label = f"{LOCAL} ({Path(state.model_path).stem})"
        return label, await _tokenize_at(state.base_url, settings, text)

    def refuse(stage: str, fraction: float | None) -> None:
        raise _NeedsSetup(
            f"not set up here ({stage}); run `labkit setup` once, then it works offline"
        )

    setup = ensure_setup(progress=refuse)
    server = ManagedServer(setup, ctx_size=512, slots=1, startup_timeout_s=60.0)
    try:
        base_url = await asyncio.to_thread(server.start)
        label = f"{LOCAL} ({setup.model.path.stem})"
        return label, await _tokenize_at(base_url, settings, text)
    finally:
        await asyncio.to_thread(server.stop)


async def _tokenize_at(base_url: str, settings: ProviderSettings, text: str) -> Tokenized:
    running = settings.model_copy(update={"base_url": base_url, "managed": False})
    provider = provider_class(running.kind)(running)
    try:
        cut = await provider.tokenized(text)
    finally:
        await provider.aclose()
    if cut is None:  # pragma: no cover - the bundled model's server always tokenizes
        raise LabkitError("the local server offers no tokenizer")
    return cut


def _print(rows: list[_Row], text: str, with_ids: bool, console: SafeConsole) -> None:
    chars, size = len(text), len(text.encode("utf-8"))
    terminal = console.is_terminal
    width = max(len(r.name) for r in rows)
    echo = console.print if terminal else _plain_print
    echo(Text(f"{chars} characters, {size} UTF-8 bytes"))
    for row in rows:
        if row.cut is None:
            echo(Text(f"{row.name:<{width}}  not available: {row.unavailable}", style="dim"))
            continue
        cut = row.cut
        ratio = f"{chars / cut.count:.2f} chars/token, {size / cut.count:.2f} bytes/token"
        summary = f"{cut.count} tokens" + (f", {ratio}" if cut.count else "")
        if cut.note:
            summary += f" ({display_piece(cut.note.encode())})"
        echo(Text(f"{display_piece(row.name.encode()):<{width}}  {summary}", style="bold"))
        if cut.pieces is not None:
            echo(_pieces_line(cut.pieces, terminal))
        if with_ids and cut.ids is not None:
            echo(Text("ids: " + " ".join(str(i) for i in cut.ids)))


def _pieces_line(pieces: tuple[bytes, ...], terminal: bool) -> Text:
    """Pieces in alternating colours (terminal), or `|`-separated with `|` escaped."""
    line = Text()
    if terminal:
        for index, piece in enumerate(pieces):
            line.append(display_piece(piece), style=_PIECE_STYLES[index % 2])
        return line
    line.append("|".join(display_piece(p).replace("|", "\\|") for p in pieces))
    return line


def _plain_print(text: Text) -> None:
    sys.stdout.write(text.plain + "\n")
