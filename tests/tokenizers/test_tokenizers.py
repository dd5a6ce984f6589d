"""Offline tokenizers: published token ids, the model map, and that nothing is downloaded."""

from __future__ import annotations

import gzip
import socket
from pathlib import Path

import pytest

from labkit import tokenizers
from labkit.tokenizers import (
    OFFLINE_ENCODINGS,
    TokenizerUnavailable,
    display_piece,
    encoding_for_model,
    offline_tokenizer,
    tokenizer_for_model,
)

pytestmark = pytest.mark.unit

# Token ids published by the encodings' authors:
# - tiktoken's own tests (github.com/openai/tiktoken, tests/test_encoding.py: test_simple,
#   test_simple_regex, test_encode_surrogate_pairs);
# - OpenAI's cookbook "How to count tokens with tiktoken"
#   (github.com/openai/openai-cookbook, examples/How_to_count_tokens_with_tiktoken.ipynb,
#   sections 4 and 5: "tiktoken is great!" and compare_encodings).
PUBLISHED: dict[str, list[tuple[str, list[int]]]] = {
    "cl100k_base": [
        ("hello world", [15339, 1917]),
        ("rer", [38149]),
        ("'rer", [2351, 81]),
        ("today\n ", [31213, 198, 220]),
        ("today\n \n", [31213, 27907]),
        ("today\n  \n", [31213, 14211]),
        ("👍", [9468, 239, 235]),
        ("tiktoken is great!", [83, 1609, 5963, 374, 2294, 0]),
        ("antidisestablishmentarianism", [519, 85342, 34500, 479, 8997, 2191]),
        ("2 + 2 = 4", [17, 489, 220, 17, 284, 220, 19]),
        ("お誕生日おめでとう", [33334, 45918, 243, 21990, 9080, 33334, 62004, 16556, 78699]),
    ],
    "o200k_base": [
        ("tiktoken is great!", [83, 8251, 2488, 382, 2212, 0]),
        ("antidisestablishmentarianism", [493, 129901, 376, 160388, 21203, 2367]),
        ("2 + 2 = 4", [17, 659, 220, 17, 314, 220, 19]),
        ("お誕生日おめでとう", [8930, 9697, 243, 128225, 8930, 17693, 4344, 48669]),
    ],
}


@pytest.mark.parametrize(
    ("name", "text", "ids"),
    [(name, text, ids) for name, cases in PUBLISHED.items() for text, ids in cases],
)
def test_published_ids(name: str, text: str, ids: list[int]) -> None:
    tok = offline_tokenizer(name)
    assert tok.encode(text) == ids
    cut = tok.tokenize(text)
    assert cut.count == len(ids)
    assert cut.ids == tuple(ids)
    assert cut.pieces is not None
    assert b"".join(cut.pieces) == text.encode("utf-8")


def test_cookbook_pieces() -> None:
    # The cookbook prints the token bytes next to the ids (section 5).
    cut = offline_tokenizer("o200k_base").tokenize("antidisestablishmentarianism")
    assert cut.pieces == (b"ant", b"idis", b"est", b"ablishment", b"arian", b"ism")


def test_harmony_is_o200k_with_the_harmony_special_tokens() -> None:
    # Ordinary text cuts as in o200k_base; the chat format's tokens are those of
    # tiktoken_ext/openai_public.py (o200k_harmony) and the harmony format's docs.
    harmony = offline_tokenizer("o200k_harmony")
    base = offline_tokenizer("o200k_base")
    for text, ids in PUBLISHED["o200k_base"]:
        assert harmony.encode(text) == ids
    enc = harmony.encoding
    assert enc.encode("<|start|>user<|message|>", allowed_special="all")[0] == 200006
    assert enc.encode_single_token("<|end|>") == 200007
    assert enc.encode_single_token("<|message|>") == 200008
    assert enc.encode_single_token("<|channel|>") == 200005
    assert enc.encode_single_token("<|return|>") == 200002
    assert enc.n_vocab == 201088
    # labkit counts special-token spellings in user text as the text they are.
    assert harmony.encode("<|start|>") == base.encode("<|start|>")
    assert 200006 not in harmony.encode("<|start|>")


def test_vocabulary_sizes() -> None:
    assert offline_tokenizer("cl100k_base").encoding.n_vocab == 100277
    assert offline_tokenizer("o200k_base").encoding.n_vocab == 200019


@pytest.mark.parametrize(
    ("model", "encoding"),
    [
        ("gpt-4o", "o200k_base"),
        ("gpt-4o-mini-2024-07-18", "o200k_base"),
        ("chatgpt-4o-latest", "o200k_base"),
        ("gpt-4.1", "o200k_base"),
        ("gpt-4.1-nano-2025-04-14", "o200k_base"),
        ("gpt-4.5-preview", "o200k_base"),
        ("gpt-5", "o200k_base"),
        ("gpt-5-mini", "o200k_base"),
        ("gpt-5.1-codex", "o200k_base"),
        ("o1", "o200k_base"),
        ("o1-mini", "o200k_base"),
        ("o3", "o200k_base"),
        ("o3-mini-2025-01-31", "o200k_base"),
        ("o4-mini", "o200k_base"),
        ("gpt-oss-20b", "o200k_harmony"),
        ("openai/gpt-oss-120b", "o200k_harmony"),
        ("ft:gpt-4o-mini-2024-07-18:org::abc", "o200k_base"),
        ("GPT-4O", "o200k_base"),
        ("gpt-4", "cl100k_base"),
        ("gpt-4-0613", "cl100k_base"),
        ("gpt-4-turbo", "cl100k_base"),
        ("gpt-3.5-turbo", "cl100k_base"),
        ("gpt-35-turbo", "cl100k_base"),
        ("text-embedding-3-small", "cl100k_base"),
        ("text-embedding-ada-002", "cl100k_base"),
        ("claude-sonnet-4-5", None),
        ("SmolLM2-135M-Instruct-Q4_1", None),
        ("gpt-4oops", None),
        ("o10", None),
        ("llama-3.1-8b", None),
    ],
)
def test_model_map(model: str, encoding: str | None) -> None:
    assert encoding_for_model(model) == encoding
    tok = tokenizer_for_model(model)
    assert (tok.name if tok else None) == encoding


def test_every_offline_encoding_builds_without_any_socket(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # Stricter than the suite's kill switch: no socket may even be created, and tiktoken's
    # download cache points at an empty folder, so a fetch could not be served from it.
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))

    def no_socket(*args: object, **kwargs: object) -> None:
        raise AssertionError("a tokenizer tried to open a socket")

    monkeypatch.setattr(socket, "socket", no_socket)
    offline_tokenizer.cache_clear()
    tokenizers._ranks_from_file.cache_clear()
    for name in OFFLINE_ENCODINGS:
        assert offline_tokenizer(name).count("hello world") == 2


def test_an_encoding_not_shipped_raises_instead_of_downloading() -> None:
    with pytest.raises(TokenizerUnavailable, match="unknown offline tokenizer"):
        offline_tokenizer("r50k_base")
    # Even tiktoken's constructor, pointed at the shipped files, cannot fetch one.
    with pytest.raises(TokenizerUnavailable, match="does not ship"):
        tokenizers._tiktoken_config("r50k_base")


def test_a_rank_file_that_is_not_the_published_one_is_refused(tmp_path: Path) -> None:
    fake = tmp_path / "o200k_base.tiktoken.gz"
    fake.write_bytes(gzip.compress(b"YQ== 0\n"))
    with pytest.raises(TokenizerUnavailable, match="sha256"):
        tokenizers._ranks_from_file(fake, "0" * 64)


@pytest.mark.parametrize(
    ("piece", "shown"),
    [
        (b"hello", "hello"),
        (b" \xf0\x9f\x91", " \\xf0\\x9f\\x91"),
        (b"\x1b[31mred", "\\x1b[31mred"),
        (b"a\nb\tc\r", "a\\nb\\tc\\r"),
        ("\u202eevil".encode(), "\\u202eevil"),
        ("\x9b".encode(), "\\x9b"),
        ("👩\u200d💻".encode(), "👩\u200d💻"),
        ("日本".encode(), "日本"),
        (b"C:\\x1b", "C:\\\\x1b"),
    ],
)
def test_display_piece_strips_control_characters(piece: bytes, shown: str) -> None:
    assert display_piece(piece) == shown
