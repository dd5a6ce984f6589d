"""The tokenizer capability (`Provider.tokenized`) of each kind, and the local count's
disagreement with usage beyond the chat framing (`usage.input_tokens_local_diff`)."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
import respx

from labkit.providers.openai_compatible import tokenize_reply
from labkit.tokenizers import Tokenized, vocab_pieces
from tests.providers.streams import (
    chat,
    make_provider,
    oa_usage,
    openai_events,
    record_one,
    sse_response,
)

pytestmark = pytest.mark.unit

OPENAI_URL = "https://api.openai.com/v1/chat/completions"
LLAMA = "http://127.0.0.1:8080"
VLLM = "http://vllm.test:8000"


def cut(provider: object, text: str) -> Tokenized | None:
    async def go() -> Tokenized | None:
        try:
            return await provider.tokenized(text)  # type: ignore[attr-defined]
        finally:
            await provider.aclose()  # type: ignore[attr-defined]

    return asyncio.run(go())


def test_openai_models_cut_offline_with_their_encoding() -> None:
    got = cut(make_provider("openai", api_key="sk-x", model="gpt-4o-mini"), "2 + 2 = 4")
    assert got is not None
    assert got.tokenizer == "tiktoken:o200k_base"
    assert got.ids == (17, 659, 220, 17, 314, 220, 19)  # the cookbook's o200k ids
    assert got.pieces == (b"2", b" +", b" ", b"2", b" =", b" ", b"4")
    assert cut(make_provider("openai", api_key="sk-x", model="gpt-4"), "x").tokenizer == (  # type: ignore[union-attr]
        "tiktoken:cl100k_base"
    )


def test_llamacpp_pieces_from_tokenize_with_pieces() -> None:
    reply = {
        "tokens": [
            {"id": 7365, "piece": [227, 129]},  # no whole UTF-8 character: sent as bytes
            {"id": 237, "piece": [147]},
            {"id": 29917, "piece": "、"},
            {"id": 753, "piece": " def"},
        ]
    }
    with respx.mock() as router:
        route = router.post(LLAMA + "/tokenize").mock(return_value=httpx.Response(200, json=reply))
        got = cut(make_provider("llamacpp", base_url=LLAMA, transport="httpx"), "こ、 def")
    assert json.loads(route.calls.last.request.content) == {
        "content": "こ、 def",
        "with_pieces": True,
    }
    assert got == Tokenized(
        "llamacpp:/tokenize",
        4,
        (7365, 237, 29917, 753),
        (b"\xe3\x81", b"\x93", "、".encode(), b" def"),
    )
    assert b"".join(got.pieces or ()) == "こ、 def".encode()


def test_vllm_tokenize_with_token_strings_at_the_server_root() -> None:
    # vLLM: {count, max_model_len, tokens, token_strs}; byte-level BPE spellings (Ġ = space).
    reply = {"count": 3, "max_model_len": 8192, "tokens": [9906, 1917, 0], "token_strs": None}
    reply["token_strs"] = ["Hello", "Ġworld", "!"]
    with respx.mock() as router:
        route = router.post(VLLM + "/tokenize").mock(return_value=httpx.Response(200, json=reply))
        got = cut(
            make_provider(
                "openai_compatible", base_url=VLLM + "/v1", transport="httpx", model="meta-llama/L"
            ),
            "Hello world!",
        )
    sent = json.loads(route.calls.last.request.content)
    assert sent == {
        "model": "meta-llama/L",
        "prompt": "Hello world!",
        "add_special_tokens": False,
        "return_token_strs": True,
    }
    assert got == Tokenized(
        "openai_compatible:/tokenize", 3, (9906, 1917, 0), (b"Hello", b" world", b"!")
    )


def test_sglang_tokenize_gives_ids_without_pieces() -> None:
    reply = {"tokens": [1, 2, 3], "count": 3, "max_model_len": 4096}
    with respx.mock() as router:
        router.post(VLLM + "/tokenize").mock(return_value=httpx.Response(200, json=reply))
        got = cut(
            make_provider("openai_compatible", base_url=VLLM + "/v1", transport="httpx"), "abc"
        )
    assert got == Tokenized("openai_compatible:/tokenize", 3, (1, 2, 3), None)


def test_llamacpp_behind_openai_compatible_is_asked_again_with_content() -> None:
    replies = iter(
        [
            httpx.Response(200, json={"tokens": []}),  # llama.cpp reads `content`, not `prompt`
            httpx.Response(200, json={"tokens": [{"id": 5, "piece": "hi"}]}),
        ]
    )
    with respx.mock() as router:
        route = router.post(VLLM + "/tokenize").mock(side_effect=lambda request: next(replies))
        got = cut(
            make_provider("openai_compatible", base_url=VLLM + "/v1", transport="httpx"), "hi"
        )
    assert json.loads(route.calls.last.request.content) == {"content": "hi", "with_pieces": True}
    assert got is not None and got.ids == (5,) and got.pieces == (b"hi",)


def test_a_server_without_tokenize_falls_back_to_the_offline_encoding_or_none() -> None:
    with respx.mock() as router:
        router.post(VLLM + "/tokenize").mock(return_value=httpx.Response(404))
        oss = cut(
            make_provider(
                "openai_compatible",
                base_url=VLLM + "/v1",
                transport="httpx",
                model="openai/gpt-oss-20b",
            ),
            "hello world",
        )
        other = cut(
            make_provider("openai_compatible", base_url=VLLM + "/v1", transport="httpx"),
            "hello world",
        )
    assert oss is not None and oss.tokenizer == "tiktoken:o200k_harmony" and oss.count == 2
    assert other is None


def test_anthropic_counts_only_and_says_so() -> None:
    with respx.mock() as router:
        router.post("https://api.anthropic.com/v1/messages/count_tokens").mock(
            return_value=httpx.Response(200, json={"input_tokens": 14})
        )
        got = cut(make_provider("anthropic", api_key="sk-ant-x", model="claude-x"), "Hello")
    assert got is not None
    assert (got.count, got.ids, got.pieces, got.includes_framing) == (14, None, None, True)
    assert got.note is not None and "counts only" in got.note


@pytest.mark.parametrize(
    "reply", [[], {"tokens": "abc"}, {"tokens": [{"piece": "x"}]}, {"tokens": [{"id": 1}]}]
)
def test_a_tokenize_reply_of_no_known_shape_is_refused(reply: object) -> None:
    with pytest.raises(ValueError, match="x:/tokenize"):
        tokenize_reply(reply, "x:/tokenize")


def test_sentencepiece_spellings() -> None:
    assert vocab_pieces(["▁Hello", "▁wor", "ld", "<0xE3>", "<0x81>"]) == (
        b" Hello",
        b" wor",
        b"ld",
        b"\xe3",
        b"\x81",
    )


def _openai_record(prompt_tokens: int, text: str = "hello world") -> object:
    events = openai_events(["a"], usage=oa_usage(prompt_tokens, 1))
    with respx.mock() as router:
        router.post(OPENAI_URL).mock(return_value=sse_response(events))
        return record_one(make_provider("openai", api_key="sk-x", model="gpt-4o"), chat(text))


def test_usage_matching_the_local_count_and_framing_has_no_diff() -> None:
    # "hello world" is 2 o200k tokens; one user message: 3 + 3 framing tokens.
    rec = _openai_record(8)
    assert rec.usage.input_tokens_local == 2  # type: ignore[attr-defined]
    assert rec.usage.tokenizer == "tiktoken:o200k_base"  # type: ignore[attr-defined]
    assert rec.usage.input_tokens_local_diff == 0  # type: ignore[attr-defined]


def test_usage_beyond_the_framing_is_the_recorded_difference() -> None:
    rec = _openai_record(19)
    assert rec.usage.input_tokens_local_diff == 11  # type: ignore[attr-defined]


def test_no_diff_where_the_framing_is_unknown() -> None:
    events = openai_events(["a"], usage=oa_usage(30, 1))
    with respx.mock() as router:
        router.post(VLLM + "/v1/chat/completions").mock(return_value=sse_response(events))
        rec = record_one(
            make_provider(
                "openai_compatible", base_url=VLLM + "/v1", transport="httpx", model="gpt-oss-20b"
            ),
            chat("hello world"),
        )
    assert rec.usage.input_tokens_local == 2  # counted with o200k_harmony
    assert rec.usage.input_tokens_local_diff is None  # the server's template is its own


def test_describe_builds_the_offline_encoding_before_any_request() -> None:
    from labkit.tokenizers import offline_tokenizer

    offline_tokenizer.cache_clear()
    provider = make_provider("openai", api_key="sk-x", model="gpt-5-mini")

    async def go() -> dict[str, object]:
        try:
            return await provider.describe()
        finally:
            await provider.aclose()

    assert asyncio.run(go()) == {}
    assert offline_tokenizer.cache_info().currsize == 1
    offline_tokenizer("o200k_base")
    assert offline_tokenizer.cache_info().hits == 1
