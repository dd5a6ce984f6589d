"""The bundled model's tokenizer for real: llama-server's `/tokenize` with pieces, and
`labkit tokens` starting a managed server for the moment (no key, no network)."""

from __future__ import annotations

import asyncio

import pytest
from typer.testing import CliRunner

from labkit.cli import app
from labkit.local import ManagedServer
from labkit.providers import bundled_model_settings, provider_class
from labkit.tokenizers import Tokenized

pytestmark = pytest.mark.e2e

DONE_WHEN = "こんにちは、世界 👋 def f(): pass"


def _cut(base_url: str, text: str) -> tuple[Tokenized | None, list[int] | None]:
    settings = bundled_model_settings().model_copy(update={"base_url": base_url, "managed": False})
    provider = provider_class(settings.kind)(settings)

    async def go() -> tuple[Tokenized | None, list[int] | None]:
        try:
            return await provider.tokenized(text), await provider.tokenize(text)
        finally:
            await provider.aclose()

    return asyncio.run(go())


@pytest.mark.parametrize("text", [DONE_WHEN, "The quick brown fox.", "🚀🔥✨ 👩‍💻", "a\n\tb  c"])
def test_pieces_rejoin_to_the_text_and_match_the_ids(
    managed_server: ManagedServer, text: str
) -> None:
    cut, ids = _cut(managed_server.base_url, text)
    assert cut is not None and cut.pieces is not None and cut.ids is not None
    assert cut.tokenizer == "llamacpp:/tokenize"
    assert b"".join(cut.pieces) == text.encode("utf-8")
    assert list(cut.ids) == ids
    assert cut.count == len(cut.ids) == len(cut.pieces)


def test_the_bundled_model_cuts_the_done_when_text_into_22_tokens(
    managed_server: ManagedServer,
) -> None:
    cut, _ = _cut(managed_server.base_url, DONE_WHEN)
    assert cut is not None and cut.count == 22  # SmolLM2's byte-level BPE: one byte per kana


def test_labkit_tokens_shows_cl100k_o200k_and_the_bundled_model() -> None:
    result = CliRunner().invoke(app, ["tokens", DONE_WHEN])
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[1].startswith("cl100k_base") and " 11 tokens" in lines[1]
    assert lines[3].startswith("o200k_base") and " 9 tokens" in lines[3]
    assert lines[5].startswith("local (SmolLM2-135M-Instruct") and " 22 tokens" in lines[5]
    assert lines[6].endswith("| def| f|():| pass")
