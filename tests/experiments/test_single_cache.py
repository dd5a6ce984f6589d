"""Question 1 tells a cold time to first token from a cached one: `single` sends each repeat
cold and then again, and the provider's own cached-token counts say which was which."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from labkit.experiments.single import SingleExperiment, SingleSettings
from labkit.providers import Provider
from labkit.records import RequestRecord
from tests.providers.streams import make_provider
from tests.support.records import make_record

pytestmark = pytest.mark.unit


def _plan(provider: Provider, **settings: Any) -> list[Any]:
    exp = SingleExperiment(SingleSettings(prompts=["a", "b"], repeats=2, warmup=1, **settings))
    try:
        return list(exp.requests_for(provider))
    finally:
        asyncio.run(provider.aclose())


def test_each_repeat_is_sent_cold_then_cached_with_the_providers_switch() -> None:
    llama = make_provider("llamacpp", managed=False, base_url="http://127.0.0.1:1")
    planned = _plan(llama)
    measured = [p for p in planned if not p.warmup]
    assert [p.tags["cache"] for p in measured] == ["cold", "cached"] * 4
    cold, cached = measured[0], measured[1]
    assert cold.request.params["cache_prompt"] is False
    assert cached.request.params["cache_prompt"] is True
    assert cold.request.messages == cached.request.messages  # the same request, twice


def test_without_a_cache_switch_a_fresh_nonce_opens_each_pair() -> None:
    openai = make_provider("openai", api_key="k")
    measured = [p for p in _plan(openai) if not p.warmup]
    firsts = [p.request.messages[0]["content"] for p in measured]
    assert firsts[0] == firsts[1] and firsts[2] == firsts[3]  # one nonce per pair
    assert firsts[0] != firsts[2] and firsts[0].startswith("Request ")


def test_as_sent_sends_each_repeat_once() -> None:
    llama = make_provider("llamacpp", managed=False, base_url="http://127.0.0.1:1")
    measured = [p for p in _plan(llama, prompt_cache="as_sent") if not p.warmup]
    assert len(measured) == 4 and not any("cache" in p.tags for p in measured)


def _pair(trial: int, cold_ms: float, cached_ms: float, cached: int = 30) -> list[RequestRecord]:
    cold = make_record(ttft_ms=cold_ms, input_tokens=32, cached_tokens=0, tags={"cache": "cold"})
    warm = make_record(
        ttft_ms=cached_ms, input_tokens=32, cached_tokens=cached, tags={"cache": "cached"}
    )
    cold.trial = warm.trial = trial
    return [cold, warm]


def test_the_answer_gives_the_cold_and_the_cached_ttft_apart() -> None:
    records = [r for t in range(6) for r in _pair(t, 400.0 + t, 20.0 + t)]
    answer = SingleExperiment(SingleSettings()).analyze("local", "m", records)
    f = answer.figures
    assert f.cold is not None and f.cached is not None
    assert (f.cold.n, f.cached.n) == (6, 6)
    assert f.cold.ttft.value == pytest.approx(402.5) and f.cached.ttft.value == pytest.approx(22.5)
    assert f.cold.ttft.lo is not None and f.cached.cached_tokens_p50 == 30
    assert answer.answer.startswith("402 ms (95% CI")  # the number first
    assert "to the first token sent cold, none of its 32 input tokens cached" in answer.answer
    assert (
        "22.5 ms (95% CI" in answer.answer and "sent again with 30 of them cached" in answer.answer
    )
    assert "KV cache" in answer.answer
    # the anatomy picture shows a cold request: its prefill is the prompt's
    assert f.timeline is not None and f.timeline.ttft_ms is not None
    assert f.timeline.ttft_ms >= 400.0


def test_a_repeat_the_provider_served_with_no_cached_token_is_cold() -> None:
    """The provider's count is the truth: a `cached` send it reports 0 for is a cold one."""
    records = [r for t in range(3) for r in _pair(t, 400.0, 390.0, cached=0)]
    answer = SingleExperiment(SingleSettings()).analyze("hosted", "m", records)
    f = answer.figures
    assert f.cached is None and f.cold is not None and f.cold.n == 6
    assert f.repeats_uncached == 3
    assert "none cached" in answer.answer and "served none of them from a cache" in answer.answer


def test_without_counts_the_states_are_as_asked_and_said_so() -> None:
    records = [r for t in range(3) for r in _pair(t, 400.0, 20.0)]
    for r in records:
        r.usage.cached_input_tokens = r.provider_timings.cached_tokens = None
    answer = SingleExperiment(SingleSettings()).analyze("hosted", "m", records)
    assert answer.figures.cold is not None and not answer.figures.cold.confirmed
    assert "reports no cached-token count" in answer.answer


def test_sent_as_is_a_cache_hit_is_still_said_to_be_one() -> None:
    records = [make_record(ttft_ms=20.0 + t, cached_tokens=30) for t in range(5)]
    records.append(make_record(ttft_ms=400.0, cached_tokens=0))
    answer = SingleExperiment(SingleSettings(prompt_cache="as_sent")).analyze("l", "m", records)
    assert answer.figures.cache_hits == 5
    assert "5 of 6 requests had part of their prompt read from the provider's cache" in (
        answer.answer
    )
