"""The fake server's prefix cache through labkit's own clients: the cached tokens each API
reports (llama.cpp's `timings.cache_n`, OpenAI's `prompt_tokens_details.cached_tokens`,
Anthropic's `cache_read_input_tokens`) are the ones the truth log says were cached, and the
prefill the server reports is the one it logged."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from labkit.measurement.recorder import RecordContext, StreamRecorder
from labkit.records import RequestRecord
from labkit.truth.log import TruthRequest, read_truth_log
from labkit.truth.process import TruthServer
from tests.providers.streams import chat, make_provider

pytestmark = pytest.mark.integration

SCHEDULE = {
    "first_token_ms": 2,
    "token_interval_ms": 1,
    "tokens": 4,
    "prefill_ms_per_token": 0.5,
    "cached_ms_per_token": 0.05,
    "cache_tokens": 10_000,
    "server_timings": "llamacpp",
}
BASE = "one two three four five six seven eight nine ten"


def served(
    tmp_path: Path,
    kind: str,
    prompts: list[str],
    params: dict[str, Any] | None = None,
    **extra: Any,
) -> list[tuple[RequestRecord, TruthRequest]]:
    """The prompts one after another from a provider of `kind`; each record with its line."""
    log = tmp_path / f"{kind}.jsonl"

    async def go() -> list[RequestRecord]:
        with TruthServer(truth_log=log, **{**SCHEDULE, **extra}) as server:
            root = f"http://127.0.0.1:{server.port}"
            settings: dict[str, Any] = {"base_url": server.base_url}
            if kind == "llamacpp":
                settings = {"base_url": root, "managed": False}
            elif kind == "anthropic":
                settings = {"base_url": root, "api_key": "x"}
            provider = make_provider(kind, **settings)
            recorder = StreamRecorder()
            ctx = RecordContext(run_id="r", experiment="t")
            try:
                return [
                    await recorder.record(provider, chat(p, **(params or {})), ctx) for p in prompts
                ]
            finally:
                await provider.aclose()

    records = asyncio.run(go())
    truth = read_truth_log(log).requests
    assert len(truth) == len(records) and all(r.error is None for r in records)
    return list(zip(records, truth, strict=True))


def test_llamacpp_timings_report_the_cached_and_prefilled_tokens_the_server_logged(
    tmp_path: Path,
) -> None:
    pairs = served(tmp_path, "llamacpp", [BASE, BASE + " eleven twelve", BASE])
    cached = [t.cached_tokens for _, t in pairs]
    assert cached == [0, 10, 9]  # a new prompt, a longer one, the first again (all but one)
    for rec, truth in pairs:
        pt = rec.provider_timings
        assert pt.cached_tokens == truth.cached_tokens
        assert pt.prefill_tokens == truth.prompt_tokens - truth.cached_tokens
        assert rec.usage.input_tokens == truth.prompt_tokens
        assert rec.usage.cached_input_tokens == truth.cached_tokens
        assert pt.prefill_ms == truth.prefill_ms
        uncached = truth.prompt_tokens - truth.cached_tokens
        assert truth.prefill_ms == pytest.approx(2 + 0.5 * uncached + 0.05 * truth.cached_tokens)


def test_cache_prompt_false_reads_nothing_from_the_cache(tmp_path: Path) -> None:
    pairs = served(tmp_path, "llamacpp", [BASE, BASE], params={"cache_prompt": False})
    assert [t.cached_tokens for _, t in pairs] == [0, 0]
    assert [r.provider_timings.cached_tokens for r, _ in pairs] == [0, 0]


def test_openai_cached_tokens_are_the_logged_ones_and_a_small_cache_evicts(
    tmp_path: Path,
) -> None:
    other = "a b c d e f g h i j k l"
    pairs = served(tmp_path, "openai_compatible", [BASE, BASE, other, BASE], cache_tokens=20)
    assert [t.cached_tokens for _, t in pairs] == [0, 9, 0, 0]  # 12 + 4 tokens evict BASE's
    assert [r.usage.cached_input_tokens for r, _ in pairs] == [0, 9, 0, 0]


def test_anthropic_cache_reads_are_the_logged_cached_tokens(tmp_path: Path) -> None:
    pairs = served(tmp_path, "anthropic", [BASE, BASE + " more"], params={"max_tokens": 4})
    for rec, truth in pairs:
        assert rec.usage.cached_input_tokens == truth.cached_tokens
        assert rec.usage.input_tokens == truth.prompt_tokens
    assert pairs[1][1].cached_tokens == 10
