"""`labkit.workloads`: prompt sizing measured once per provider, shared prefixes, trace
prompts and histories."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import pytest

from labkit.experiments.load import LoadExperiment, LoadSettings
from labkit.workloads import (
    TOKENS_PER_WORD_GUESS,
    PromptSizing,
    SharedPrefix,
    TraceEntry,
    build_history,
    filler_text,
    measure_sizing,
    trace_prompt,
)

pytestmark = pytest.mark.unit


@dataclass
class _Count:
    tokens: int
    source: str = "test:words"


@dataclass
class _Counter:
    """A provider whose counter sees `tokens_per_word` tokens in every word."""

    tokens_per_word: float
    asked: list[str] = field(default_factory=list)

    async def count_tokens(self, text: str) -> _Count | None:
        self.asked.append(text)
        return _Count(round(len(text.split()) * self.tokens_per_word))

    __hash__ = object.__hash__


def test_sizing_is_measured_once_per_provider_and_shared() -> None:
    provider = _Counter(2.0)
    first = asyncio.run(measure_sizing(provider))  # type: ignore[arg-type]
    again = asyncio.run(measure_sizing(provider))  # type: ignore[arg-type]
    assert first == again == PromptSizing(tokens_per_word=2.0, source="test:words")
    assert len(provider.asked) == 1
    assert first.words_for(100) == 50
    assert first.filler(100, 3) == filler_text(50, 3)


def test_no_counter_or_a_zero_count_keeps_the_guess() -> None:
    class _NoCounter:
        async def count_tokens(self, text: str) -> None:
            return None

    assert asyncio.run(measure_sizing(_NoCounter())) == PromptSizing()  # type: ignore[arg-type]
    assert asyncio.run(measure_sizing(_Counter(0.0))).tokens_per_word == TOKENS_PER_WORD_GUESS  # type: ignore[arg-type]


def test_the_sizing_rides_in_a_level_job_as_plain_json() -> None:
    sizing = PromptSizing(tokens_per_word=1.7, source="llamacpp:/tokenize")
    assert PromptSizing.model_validate_json(sizing.model_dump_json()) == sizing
    assert sizing.corrected(110, 100).tokens_per_word == pytest.approx(1.87)


def test_shared_prefix_places_the_prefix_and_numbers_the_suffixes() -> None:
    shared = SharedPrefix(tokens=13, distinct_suffixes=0.25, where="system")
    prefix = shared.prefix_text(PromptSizing(tokens_per_word=1.3), "[run:0]", 7, "Be brief.")
    assert prefix == "Be brief.\n\n[run:0] " + filler_text(10, 7)
    assert [shared.suffix_of(i) for i in range(6)] == [0, 0, 0, 0, 1, 1]
    assert shared.messages("P", "S") == [
        {"role": "system", "content": "P"},
        {"role": "user", "content": "S"},
    ]
    in_user = SharedPrefix(tokens=13, where="user")
    assert in_user.messages("P", "S") == [{"role": "user", "content": "P\n\nS"}]


def test_trace_prompt_repeats_a_hash_block_text_within_a_pass() -> None:
    sizing = PromptSizing(tokens_per_word=1.0)
    a = trace_prompt(
        TraceEntry(0, 20, 1, (4, 5)), 0, "s1", sizing, block_tokens=10, header_tokens=2
    )
    b = trace_prompt(
        TraceEntry(1, 20, 1, (4, 6)), 1, "s1", sizing, block_tokens=10, header_tokens=2
    )
    block_4 = "[s1:000004] " + filler_text(8, 4)
    assert a.startswith(block_4) and b.startswith(block_4)
    assert a != b
    rest = trace_prompt(TraceEntry(0, 5, 1), 9, "s2", sizing, block_tokens=10, header_tokens=2)
    assert rest == "[s2/000009] " + filler_text(3, 9)


def test_history_alternates_user_and_answer_after_the_system_message() -> None:
    assert build_history("sys", [("q1", "a1"), ("q2", "a2")]) == [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "q1"},
        {"role": "assistant", "content": "a1"},
        {"role": "user", "content": "q2"},
        {"role": "assistant", "content": "a2"},
    ]
    assert build_history(None) == []


@dataclass
class _Settings:
    client: str = "wire"


@dataclass
class _LoadProvider(_Counter):
    """Enough of a provider for load's `prepare`: no switches, the wire path."""

    settings: _Settings = field(default_factory=_Settings)
    has_sdk: bool = False

    def exact_length_params(self) -> dict[str, object]:
        return {}

    def prompt_cache_params(self, on: bool) -> dict[str, object]:
        return {}

    __hash__ = object.__hash__


def test_load_builds_its_synthetic_prompts_from_the_measured_sizing() -> None:
    exp = LoadExperiment(LoadSettings(concurrency=[1], requests=1, input_tokens=40))
    asyncio.run(exp.prepare(_LoadProvider(2.0)))  # type: ignore[arg-type]
    level = exp.levels()[0]
    text = exp.request(level, 0, "run").request.messages[-1]["content"]
    assert len(text.split()) == 1 + 20  # the request's own head, then 40 / 2 words
