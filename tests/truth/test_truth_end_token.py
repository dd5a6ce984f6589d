"""The end token llama.cpp and vLLM count but never stream, served by the fake server and
read by labkit's llama.cpp client: the usage counts one more token than the stream carried
when the reply stops on its own, none with a length stop or ``ignore_eos``; the timings'
``predicted_n`` and ``predicted_ms`` include it, as the truth log does."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from labkit.measurement.recorder import RecordContext, StreamRecorder
from labkit.providers.base import ChatRequest
from labkit.records import RequestRecord, StopReason
from labkit.truth.log import TruthRequest, read_truth_log
from labkit.truth.process import TruthServer
from tests.providers.streams import chat, make_provider

pytestmark = pytest.mark.integration

SCHEDULE = {
    "first_token_ms": 2,
    "token_interval_ms": 1,
    "tokens": 6,
    "end_token": True,
    "server_timings": "llamacpp",
}


def served(tmp_path: Path, *requests: ChatRequest) -> list[tuple[RequestRecord, TruthRequest]]:
    log = tmp_path / "truth.jsonl"

    async def go() -> list[RequestRecord]:
        with TruthServer(truth_log=log, **SCHEDULE) as server:
            root = f"http://127.0.0.1:{server.port}"
            provider = make_provider("llamacpp", base_url=root, managed=False)
            ctx = RecordContext(run_id="r", experiment="t")
            try:
                return [await StreamRecorder().record(provider, r, ctx) for r in requests]
            finally:
                await provider.aclose()

    records = asyncio.run(go())
    return list(zip(records, read_truth_log(log).requests, strict=True))


def test_the_end_token_is_counted_not_streamed_and_only_when_the_reply_stops(
    tmp_path: Path,
) -> None:
    stop, cut, exact = served(
        tmp_path,
        chat(max_tokens=32),
        chat(max_tokens=4),
        chat(max_tokens=10, ignore_eos=True),
    )
    rec, truth = stop
    assert rec.error is None and rec.stop_reason == StopReason.END
    assert truth.end_token and truth.finish_reason == "stop"
    assert len(rec.client.event_offsets_ms) == len(truth.events_ns) == truth.output_tokens == 6
    assert rec.usage.output_tokens == truth.usage_output_tokens == 7
    assert rec.usage.streamed_output_tokens == truth.output_tokens
    raw = rec.provider_timings.raw or {}
    assert raw["predicted_n"] == truth.usage_output_tokens
    assert raw["predicted_ms"] == rec.provider_timings.decode_ms == truth.decode_ms
    assert truth.decode_ms == 6  # five gaps between six events, and the end token's interval

    for (rec, truth), n in ((cut, 4), (exact, 10)):
        assert rec.stop_reason == StopReason.LENGTH and truth.finish_reason == "length"
        assert not truth.end_token and truth.capped
        assert rec.usage.output_tokens == truth.usage_output_tokens == truth.output_tokens == n
        assert len(rec.client.event_offsets_ms) == n
