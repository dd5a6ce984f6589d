"""Hidden reasoning on the truth server: a request asking for reasoning (Chat
``reasoning_effort``, Responses ``reasoning.effort``) is thought about for the schedule's
``reasoning_tokens`` before its first visible token, never streamed, and counted in the
usage's documented field; the truth log holds the true thinking time. A request that does
not ask, or a schedule without reasoning tokens, is served as before."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import pytest

from labkit.measurement.recorder import RecordContext, StreamRecorder
from labkit.providers.base import ChatRequest
from labkit.records import RequestRecord
from labkit.truth.log import TruthRequest, read_truth_log
from labkit.truth.process import TruthServer
from labkit.truth.schedule import TruthSchedule, plan
from tests.providers.streams import chat, make_provider

SCHEDULE = {
    "first_token_ms": 2,
    "token_interval_ms": 1,
    "tokens": 6,
    "reasoning_tokens": 40,
    "reasoning_ms_per_token": 0.5,
}


def served(
    tmp_path: Path, kind: str, *requests: ChatRequest, **schedule: object
) -> list[tuple[RequestRecord, TruthRequest]]:
    log = tmp_path / "truth.jsonl"

    async def go() -> list[RequestRecord]:
        with TruthServer(truth_log=log, **{**SCHEDULE, **schedule}) as server:
            root = f"http://127.0.0.1:{server.port}/v1"
            provider = make_provider(kind, api_key="k", base_url=root)
            ctx = RecordContext(run_id="r", experiment="t")
            try:
                return [await StreamRecorder().record(provider, r, ctx) for r in requests]
            finally:
                await provider.aclose()

    records = asyncio.run(go())
    return list(zip(records, read_truth_log(log).requests, strict=True))


@pytest.mark.unit
def test_the_plan_thinks_inside_the_first_wait_only_when_asked() -> None:
    s = TruthSchedule(first_token_ms=5, token_interval_ms=2, tokens=4, reasoning_tokens=10)
    asked = plan(s, 3, None, random.Random(0), reasoning=True)
    plain = plan(s, 3, None, random.Random(0))
    assert (asked.reasoning_tokens, asked.thinking_ms) == (10, 20.0)
    assert asked.first_ms == plain.first_ms + 20.0
    assert (plain.reasoning_tokens, plain.thinking_ms) == (0, 0.0)
    assert asked.gaps_ms == plain.gaps_ms and asked.event_tokens == plain.event_tokens
    paced = s.with_overrides({"reasoning_ms_per_token": "0.5"})
    assert plan(paced, 3, None, random.Random(0), reasoning=True).thinking_ms == 5.0


@pytest.mark.integration
@pytest.mark.parametrize(
    ("kind", "ask"),
    [
        ("openai", {"reasoning_effort": "low"}),
        ("openai_responses", {"reasoning": {"effort": "low"}}),
    ],
)
def test_hidden_reasoning_is_counted_never_streamed_and_logged(
    tmp_path: Path, kind: str, ask: dict[str, object]
) -> None:
    (asked, truth), (plain, plain_truth) = served(tmp_path, kind, chat(**ask), chat())
    assert asked.error is None and plain.error is None
    assert asked.usage.reasoning_tokens == 40 == truth.reasoning_tokens
    assert asked.usage.output_tokens == truth.output_tokens + 40
    assert asked.usage.streamed_output_tokens == truth.output_tokens == 6
    assert len(asked.client.event_offsets_ms) == len(truth.events_ns) == 6
    assert truth.thinking_ms == pytest.approx(20.0)
    assert truth.prefill_ms is not None and truth.prefill_ms >= 20.0
    assert asked.client.decode_ms_per_token is not None
    assert plain.usage.reasoning_tokens in (None, 0)
    assert (plain_truth.reasoning_tokens, plain_truth.thinking_ms) == (0, None)
    assert plain.usage.output_tokens == 6


@pytest.mark.integration
def test_llamacpps_own_timings_count_the_thinking_as_decode_not_prefill(tmp_path: Path) -> None:
    """llama-server's `timings`: the hidden reasoning is predicted (decoded) tokens, not
    prompt processing; labkit takes both the end token and the reasoning out of the count
    its decode divides by."""
    ((rec, truth),) = served(
        tmp_path,
        "llamacpp",
        chat(reasoning_effort="high"),
        server_timings="llamacpp",
        end_token=True,  # as llama-server counts its end token: never streamed
    )
    assert rec.error is None and truth.thinking_ms is not None and truth.prefill_ms is not None
    raw = rec.provider_timings.raw
    assert raw is not None and raw["predicted_n"] == 6 + 1 + 40
    assert rec.provider_timings.prefill_ms == pytest.approx(truth.prefill_ms - truth.thinking_ms)
    assert truth.decode_ms is not None
    assert raw["predicted_ms"] == pytest.approx(truth.decode_ms + truth.thinking_ms)
    assert rec.usage.reasoning_tokens == 40 and rec.usage.streamed_output_tokens == 6
