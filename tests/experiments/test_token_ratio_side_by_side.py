"""token_ratio's side by side: every tokenizer at hand on the same texts, and the spread."""

from __future__ import annotations

import asyncio

import pytest

from labkit.experiments.token_ratio import TokenRatioExperiment, TokenRatioSettings
from labkit.providers.base import Provider, TokenCount
from labkit.tokenizers import Tokenized
from tests.providers.streams import make_provider
from tests.support.records import make_record

pytestmark = pytest.mark.unit

# Published counts (OpenAI cookbook, "How to count tokens with tiktoken"): "tiktoken is
# great!" is 6 tokens in both encodings; "お誕生日おめでとう" is 9 in cl100k_base, 8 in o200k_base.
TEXTS = [
    {"id": "english", "text": "tiktoken is great!"},
    {"id": "japanese", "text": "お誕生日おめでとう"},
]


def provider_with(
    counts: dict[str, int], *, framed: bool = False, provider_id: str = "local"
) -> Provider:
    """A provider whose own tokenizer gives `counts` (by text), without any I/O."""
    provider = make_provider("fake", id=provider_id, model="tiny-model")
    by_text = {t["text"]: counts[t["id"]] for t in TEXTS} | {".": counts.get(".", 1)}

    async def tokenized(text: str) -> Tokenized:
        return Tokenized("stub:/tokenize", by_text[text], includes_framing=framed)

    async def count_tokens(text: str) -> TokenCount:
        return TokenCount(by_text[text], "stub:/tokenize")

    provider.tokenized = tokenized  # type: ignore[method-assign]
    provider.count_tokens = count_tokens  # type: ignore[method-assign]
    return provider


def prepared(*providers: Provider) -> TokenRatioExperiment:
    exp = TokenRatioExperiment(TokenRatioSettings(texts=TEXTS, send=False))

    async def go() -> None:
        for p in providers:
            await exp.prepare(p)
            await p.aclose()

    asyncio.run(go())
    return exp


def test_offline_encodings_and_the_providers_own_side_by_side() -> None:
    exp = prepared(provider_with({"english": 7, "japanese": 18}))
    answer = exp.analyze("local", "tiny-model", [])
    table = {(r.text_id, r.tokenizer): r for r in answer.figures.side_by_side}
    assert table["english", "tiktoken:cl100k_base"].tokens == 6
    assert table["english", "tiktoken:o200k_base"].tokens == 6
    assert table["japanese", "tiktoken:cl100k_base"].tokens == 9
    assert table["japanese", "tiktoken:o200k_base"].tokens == 8
    own = table["japanese", "tiny-model [local]"]
    assert own.tokens == 18
    assert own.chars_per_token == pytest.approx(9 / 18)
    assert own.bytes_per_token == pytest.approx(27 / 18)
    spread = {s.text_id: s for s in answer.figures.spread}
    assert spread["japanese"].most_efficient == "tiktoken:o200k_base"
    assert spread["japanese"].least_efficient == "tiny-model [local]"
    assert spread["japanese"].ratio == pytest.approx(18 / 8)
    assert spread["english"].ratio == pytest.approx(7 / 6)
    assert "Across 3 tokenizers, japanese took 8 to 18 tokens (2.25×)." in answer.answer


def test_a_counter_of_whole_requests_has_its_framing_taken_off() -> None:
    # Anthropic-style: "." counts 8 (7 framing + 1), so 20 means 13 tokens of text.
    exp = prepared(provider_with({"english": 12, "japanese": 20, ".": 8}, framed=True))
    answer = exp.analyze("local", "tiny-model", [])
    own = {
        r.text_id: r.tokens for r in answer.figures.side_by_side if r.tokenizer.startswith("tiny")
    }
    assert own == {"english": 5, "japanese": 13}


def test_every_provider_prepared_joins_the_same_table() -> None:
    exp = prepared(
        provider_with({"english": 7, "japanese": 18}, provider_id="a"),
        provider_with({"english": 6, "japanese": 8}, provider_id="b"),
    )
    names = {r.tokenizer for r in exp.analyze("a", "tiny-model", []).figures.side_by_side}
    assert names == {
        "tiktoken:cl100k_base",
        "tiktoken:o200k_base",
        "tiny-model [a]",
        "tiny-model [b]",
    }
    # An OpenAI provider's own tokenizer is an offline encoding already in the table.
    exp = prepared(make_provider("openai", api_key="sk-x", model="gpt-4o"))
    names = {r.tokenizer for r in exp.analyze("openai", "gpt-4o", []).figures.side_by_side}
    assert names == {"tiktoken:cl100k_base", "tiktoken:o200k_base"}


def test_local_count_disagreeing_with_usage_is_flagged_in_the_answer() -> None:
    exp = prepared(provider_with({"english": 6, "japanese": 8}))
    recs = [make_record(experiment="token_ratio", prompt_id="english", input_tokens=12)]
    recs[0].usage.input_tokens_local_diff = 0
    recs.append(make_record(experiment="token_ratio", prompt_id="japanese", input_tokens=20))
    recs[1].usage.input_tokens_local_diff = 6
    answer = exp.analyze("local", "tiny-model", recs)
    assert answer.figures.input_tokens_local_diffs == [0, 6]
    assert "disagree on 1 of 2 requests (by +6 to +6 tokens beyond the chat framing)" in (
        answer.answer
    )


def test_tokenizers_that_agree_are_said_to() -> None:
    exp = prepared(provider_with({"english": 6, "japanese": 8}))
    answer = exp.analyze("local", "tiny-model", [])
    # english: every tokenizer agrees, so the widest spread named is japanese's
    assert "japanese took 8 to 9 tokens" in answer.answer
    assert {s.text_id: s.ratio for s in answer.figures.spread}["english"] == 1.0


def test_the_chat_framing_is_counted_without_sending() -> None:
    provider = provider_with({"english": 6, "japanese": 8})

    async def count_chat_prompt(messages: list[dict[str, str]]) -> TokenCount:
        assert messages == [{"role": "user", "content": "."}]
        return TokenCount(31, "stub:/apply-template + /tokenize")

    async def tokenize(text: str) -> list[int]:
        return [30]

    provider.count_chat_prompt = count_chat_prompt  # type: ignore[method-assign]
    provider.tokenize = tokenize  # type: ignore[method-assign]
    answer = prepared(provider).analyze("local", "tiny-model", [])
    assert answer.figures.chat_framing_tokens == 30
    assert answer.figures.chat_framing_source == "stub:/apply-template + /tokenize"
    assert (
        "As a chat message, a text costs 30 more tokens: the chat template's framing "
        "(counted by stub:/apply-template + /tokenize, nothing generated)."
    ) in answer.answer


def test_a_framing_that_could_not_be_measured_is_said_so() -> None:
    answer = prepared(provider_with({"english": 6, "japanese": 8})).analyze("local", "m", [])
    assert answer.figures.chat_framing_tokens is None
    assert (
        "The chat framing around a message could not be measured: not sent (send: false), "
        "and the provider cannot count a chat prompt without generating."
    ) in answer.answer


def test_a_sent_baseline_measures_the_framing_from_usage() -> None:
    exp = TokenRatioExperiment(TokenRatioSettings(texts=TEXTS))
    recs = [
        make_record(experiment="token_ratio", prompt_id="__baseline__", input_tokens=9),
        make_record(experiment="token_ratio", prompt_id="english", input_tokens=14),
    ]
    answer = exp.analyze("local", "m", recs)
    assert answer.figures.chat_framing_tokens == 8 and answer.figures.chat_framing_source == "usage"
    assert "costs 8 more tokens: the chat template's framing (from the usage of a sent " in (
        answer.answer
    )
